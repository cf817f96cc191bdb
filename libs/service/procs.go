package service

import (
	"os"
	"runtime"
)

// OversubscribeProcs gives the Go scheduler factor times as many
// processors (GOMAXPROCS) as the CPUs the process may use, unless the
// environment sets GOMAXPROCS; it returns the setting in force. For a
// process that hosts a whole mesh (`agentmesh up`): when its background
// work (analysis steps, the outbox relay, the embedded database) keeps
// every processor busy, a request that arrives waits for a goroutine to
// yield one, and Go has no priorities; with more processors than CPUs the
// kernel shares the CPUs between their threads every few milliseconds and
// runs a woken thread soon. In the growth bench on 2 cores (50 concurrent
// analyses) twice the CPUs halved the first event's p99 (86–159 → 46–52 ms)
// at the same throughput; chat turns lost about 6% (both well within their
// targets), and three times the CPUs did no better than twice. Setting it
// stops the runtime from following later changes of the CPU limit
// (containers run the services one per process, which keep Go's default).
func OversubscribeProcs(factor int) int {
	if os.Getenv("GOMAXPROCS") != "" || factor <= 1 {
		return runtime.GOMAXPROCS(0)
	}
	n := factor * runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(n)
	return n
}
