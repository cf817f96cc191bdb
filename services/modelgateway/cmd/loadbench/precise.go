package main

import (
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Go's timers are not precise enough for this bench: when a process has
// little else to do, a timer fires when the runtime's netpoller wakes, and
// that waits in whole milliseconds, so a 20 ms sleep ends anywhere up to a
// millisecond late, and how late depends on what else the process does.
// Measured here, the mock's sleeps overran by ~500 µs p50 in the rounds of
// one path and ~200 µs in the other's: more than the gateway's overhead.
// The bench's waits block an OS thread on a kernel high-resolution timer
// instead, with the thread's timer slack (50 µs by default) set to 1 ns.

// prSetTimerSlack is prctl's PR_SET_TIMERSLACK.
const prSetTimerSlack = 29

// lockPreciseThread locks the calling goroutine to its OS thread and makes
// that thread's sleeps end on time.
func lockPreciseThread() {
	runtime.LockOSThread()
	_, _, _ = syscall.RawSyscall6(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0, 0, 0, 0)
}

// sleepOnThread blocks the calling goroutine's OS thread for d.
func sleepOnThread(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}

// alarms wakes goroutines at their deadlines from one OS thread sleeping
// on the kernel's timer: one thread for any number of waiters, so a
// thousand concurrent waits cost no more threads or system calls than one.
// Every wait has the same length, so deadlines arrive in order and a queue
// serves.
type alarms struct {
	d    time.Duration
	mu   sync.Mutex
	q    []alarm
	more chan struct{} // the queue was empty and no longer is
}

type alarm struct {
	at   time.Time
	ring chan struct{}
}

func newAlarms(d time.Duration) *alarms {
	a := &alarms{d: d, more: make(chan struct{}, 1)}
	go a.run()
	return a
}

// wait blocks until d has passed.
func (a *alarms) wait() {
	ring := make(chan struct{})
	a.mu.Lock()
	a.q = append(a.q, alarm{at: time.Now().Add(a.d), ring: ring})
	first := len(a.q) == 1
	a.mu.Unlock()
	if first {
		select {
		case a.more <- struct{}{}:
		default:
		}
	}
	<-ring
}

func (a *alarms) run() {
	lockPreciseThread()
	for {
		a.mu.Lock()
		if len(a.q) == 0 {
			a.mu.Unlock()
			<-a.more
			continue
		}
		next := a.q[0].at
		a.mu.Unlock()
		if d := time.Until(next); d > 0 {
			sleepOnThread(d)
			continue
		}
		a.mu.Lock()
		now := time.Now()
		i := 0
		for ; i < len(a.q) && !a.q[i].at.After(now); i++ {
			close(a.q[i].ring)
		}
		a.q = a.q[i:]
		a.mu.Unlock()
	}
}
