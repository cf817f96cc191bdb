package service_test

import (
	"runtime"
	"testing"

	"github.com/agentmesh/agentmesh/libs/service"
)

// TestOversubscribeProcs: twice the processors unless GOMAXPROCS is set in
// the environment, which wins.
func TestOversubscribeProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	t.Setenv("GOMAXPROCS", "")
	if got := service.OversubscribeProcs(2); got != 2*before || runtime.GOMAXPROCS(0) != 2*before {
		t.Fatalf("OversubscribeProcs(2) = %d (GOMAXPROCS %d), want %d", got, runtime.GOMAXPROCS(0), 2*before)
	}
	runtime.GOMAXPROCS(before)
	t.Setenv("GOMAXPROCS", "3")
	if got := service.OversubscribeProcs(2); got != before || runtime.GOMAXPROCS(0) != before {
		t.Fatalf("with GOMAXPROCS set: %d (GOMAXPROCS %d), want %d unchanged", got, runtime.GOMAXPROCS(0), before)
	}
}
