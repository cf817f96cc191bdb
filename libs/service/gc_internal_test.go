package service

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestGCPercentKeepsTheHeapFloor(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	tu := &gcTuner{floor: 64 * mib, min: 400}
	for _, tc := range []struct {
		live, scan uint64
		want       int
	}{
		{0, 0, 400},               // not measured yet
		{3 * mib, 5 * mib, 1220},  // goal 3 + 5*12.2 = 64 MiB
		{8 * mib, 10 * mib, 560},  // 8 + 10*5.6 = 64 MiB
		{1 * mib, 2 * mib, 1600},  // 4 MiB * 16 = 64 MiB: Go's minimum goal caps it
		{16 * mib, 18 * mib, 400}, // 16 + 18*2.7 < 64: the minimum percentage
		{1 << 30, 1 << 30, 400},   // a large heap collects in proportion
		{64 * mib, 70 * mib, 400}, // live at the floor
	} {
		if got := tu.percent(tc.live, tc.scan); got != tc.want {
			t.Errorf("percent(%d MiB, %d MiB) = %d, want %d", tc.live/mib, tc.scan/mib, got, tc.want)
		}
	}
}

// TestGCTunerFollowsEveryCollection: once armed, the tuner runs after each
// collection, reading the heap then.
func TestGCTunerFollowsEveryCollection(t *testing.T) {
	var mu sync.Mutex
	var set []int
	live := uint64(3 << 20)
	tu := &gcTuner{floor: 64 << 20, min: 400,
		set: func(p int) int {
			mu.Lock()
			defer mu.Unlock()
			set = append(set, p)
			return 100
		},
		heap: func() (uint64, uint64) {
			mu.Lock()
			defer mu.Unlock()
			return live, live + 2<<20
		},
	}
	tu.arm()
	defer tu.done.Store(true)
	wait := func(n int) []int {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
			runtime.GC()
			mu.Lock()
			got := append([]int(nil), set...)
			mu.Unlock()
			if len(got) >= n {
				return got
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("tuner ran %d times, want %d", len(set), n)
		return nil
	}
	if got := wait(1); got[0] != 1220 {
		t.Fatalf("first run set %d, want 1220", got[0])
	}
	mu.Lock()
	live = 1 << 30
	mu.Unlock()
	if got := wait(2); got[len(got)-1] != 400 {
		t.Fatalf("after the heap grew the tuner set %v, want 400 last", got)
	}
}

// TestHeapSizesAreMeasured: the runtime reports the sizes the tuner needs.
func TestHeapSizesAreMeasured(t *testing.T) {
	runtime.GC()
	live, scan := heapSizes()
	if live == 0 || scan < live {
		t.Fatalf("heapSizes = %d, %d", live, scan)
	}
}
