package testkit

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/service"
)

// RunService starts run (a service's Run, with its config bound) on a
// loopback listener with a discarding logger, waits until it reports Ready,
// and returns its address. The service is stopped in t.Cleanup; a Run that
// fails to start, is not ready within 20 s, or returns an error fails the
// test, each message naming the service.
func RunService(t testing.TB, name string, run func(ctx context.Context, rt service.Runtime) error) string {
	t.Helper()
	lis := Listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, service.Runtime{
			Logger:   slog.New(slog.DiscardHandler),
			Listener: lis,
			Ready:    func() { close(ready) },
		})
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("%s: Run: %v", name, err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatalf("%s not ready within 20s", name)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: Run returned %v", name, err)
		}
	})
	return lis.Addr().String()
}
