package service

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// TuneGC sets the garbage collector of a process whose live heap is small
// and whose allocations are nearly all per-request garbage (a gateway's
// request and answer buffers, gRPC frames), unless the environment sets
// GOGC. At Go's default GOGC of 100 such a process collects many times a
// second under load (the model gateway and the REST gateway, each with a
// live heap of a few MB, ten times a second at 2,000 requests per second);
// each cycle stops the world briefly and, on a 2-core machine, takes a
// whole core for its mark phase, which shows as tail latency of the
// requests in flight. So the heap may grow to floor bytes before a
// collection, and to minPercent above the live heap once that is larger: a
// large live heap still collects in proportion to it. GOMEMLIMIT, when set
// (deploy/k8s sets it from the container's limit), takes precedence: the
// collector tightens before the limit is reached.
//
// Call it at the start of a process that runs one such service on its own;
// processes that host several services (`agentmesh up`) keep Go's default.
// The setting follows the heap after every collection, for the process's
// lifetime.
func TuneGC(floor uint64, minPercent int) {
	if os.Getenv("GOGC") != "" {
		return
	}
	t := &gcTuner{floor: floor, min: minPercent, set: debug.SetGCPercent, heap: heapSizes}
	t.tune()
	t.arm()
}

// gcTuner sets GOGC after every collection so that the next heap goal is
// about floor, or min percent above the live heap if that is more.
//
// Go's goal is live + scan*GOGC/100, where scan is the live heap plus
// goroutine stacks plus globals, and never below 4 MiB*GOGC/100: the
// percentage is the one that puts both at floor.
type gcTuner struct {
	floor uint64
	min   int
	set   func(percent int) int
	heap  func() (live, scan uint64)
	done  atomic.Bool // stops re-arming (tests)
}

// goMinHeap is the runtime's minimum heap goal at GOGC=100.
const goMinHeap = 4 << 20

// percent returns the GOGC for a live heap of live bytes and scan bytes to
// scan; scan 0 means no collection has measured it yet, and gets the
// minimum (Go's first goal is then a few MB, reached soon).
func (t *gcTuner) percent(live, scan uint64) int {
	if scan == 0 || live >= t.floor {
		return t.min
	}
	p := (t.floor - live) * 100 / scan
	p = min(p, t.floor*100/goMinHeap)
	return max(int(p), t.min)
}

func (t *gcTuner) tune() { t.set(t.percent(t.heap())) }

// arm runs tune once the next collection has run, and re-arms: an object
// with a finalizer and no references is found unreachable by the next cycle,
// which queues the finalizer.
func (t *gcTuner) arm() {
	sentinel := new([16]byte)
	runtime.SetFinalizer(sentinel, func(*[16]byte) {
		if t.done.Load() {
			return
		}
		t.tune()
		t.arm()
	})
}

// heapSizes reads what the last collection found: the live heap, and the
// bytes the collector scans (live heap, stacks, globals).
func heapSizes() (live, scan uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}
	metrics.Read(s)
	for _, v := range s {
		if v.Value.Kind() != metrics.KindUint64 {
			return 0, 0
		}
	}
	live = s[0].Value.Uint64()
	return live, live + s[1].Value.Uint64() + s[2].Value.Uint64()
}
