package modelgateway

import "github.com/agentmesh/agentmesh/libs/service"

// The gateway's garbage collector settings, when the environment sets no
// GOGC (see service.TuneGC for why): at 2,000 calls per second the
// collector runs every few seconds, and a gateway holding large requests
// (images) still collects in proportion to them.
const (
	// HeapFloor is the heap size below which the collector does not run.
	HeapFloor = 64 << 20
	// MinGCPercent is the GOGC applied once the live heap is large enough
	// that it puts the goal past HeapFloor.
	MinGCPercent = 400
)

// TuneGC applies the gateway's collector settings unless GOGC is set. Call
// it at the start of a process that runs the gateway on its own; processes
// that host several services (`agentmesh up`) keep Go's default.
func TuneGC() { service.TuneGC(HeapFloor, MinGCPercent) }
