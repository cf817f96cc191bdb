package modelgateway

import (
	"os"
	"runtime/debug"
)

// DefaultGCPercent is the gateway's GOGC when the environment sets none.
//
// The gateway's live heap is small (a few MB) and nearly all it allocates is
// per-call garbage (request and answer buffers), so at Go's default of 100
// the collector runs many times a second under load and its mark work takes
// CPU from calls in flight, which shows as tail latency. At 400 it runs about
// a quarter as often for roughly 10 MB more heap (`make bench` prints the
// gateway's peak RSS). deploy/k8s also sets GOMEMLIMIT from the container's
// memory limit, so the collector tightens before the limit is reached.
const DefaultGCPercent = 400

// TuneGC applies DefaultGCPercent unless GOGC is set. Call it at the start
// of a process that runs the gateway on its own; processes that host several
// services (`agentmesh up`) keep Go's default.
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(DefaultGCPercent)
	}
}
