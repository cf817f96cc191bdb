package analysis

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// liveFixture is a liveTrees whose consumer "delivers" what the test adds.
func liveFixture(t *testing.T, keep time.Duration) (*liveTrees, *fakeClock) {
	t.Helper()
	clock := &fakeClock{now: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	l := newLiveTrees(nil, keep, clock.Now, slog.New(slog.DiscardHandler))
	l.start()
	return l, clock
}

// addEvent delivers an event of job in root's tree at seq.
func addEvent(t *testing.T, l *liveTrees, root *Job, job string, seq uint64) {
	t.Helper()
	ev := &commonv1.Event{Id: job, CorrelationId: root.ID}
	if err := l.add(seq, JobEventSubject(root.Tenant, root.ID, job, StatusRunning), ev); err != nil {
		t.Fatal(err)
	}
}

// served is what a serve call gave its fn, and how it ended.
type served struct {
	mu   sync.Mutex
	seqs []uint64
	ok   bool
	last uint64
	err  error
	done chan struct{}
}

func (s *served) got() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint64(nil), s.seqs...)
}

// serveAsync runs l.serve for root until ctx ends, fn failing with stop
// once it was given the sequence stopAt.
func serveAsync(ctx context.Context, l *liveTrees, root *Job, stopAt uint64) *served {
	s := &served{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		ok, last, err := l.serve(ctx, root, func(seq uint64, _ string, _ *commonv1.Event) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.seqs = append(s.seqs, seq)
			if seq == stopAt {
				return errWatchDone
			}
			return nil
		})
		s.mu.Lock()
		s.ok, s.last, s.err = ok, last, err
		s.mu.Unlock()
	}()
	return s
}

func waitSeqs(t *testing.T, s *served, want int) []uint64 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(s.got()) < want {
		if time.Now().After(deadline) {
			t.Fatalf("served %v; want %d events", s.got(), want)
		}
		time.Sleep(time.Millisecond)
	}
	return s.got()
}

func wait(t *testing.T, s *served) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatal("serve did not return")
	}
}

// A watch served from memory gets the tree's events stored before it and
// then those that come, in order, and no other tree's.
func TestLiveTreesServeStoredThenLive(t *testing.T) {
	l, clock := liveFixture(t, 10*time.Second)
	clock.Add(2 * liveSkew)
	root := &Job{ID: "an-1", Tenant: "acme", CreateTime: clock.Now()}
	other := &Job{ID: "an-2", Tenant: "acme", CreateTime: clock.Now()}
	addEvent(t, l, root, root.ID, 10)
	addEvent(t, l, other, other.ID, 11)
	addEvent(t, l, root, "job-1", 12)
	// A subject of the oldest layout (one token fewer) is not a tree's.
	if err := l.add(13, "am.evt.acme.job.an-1.running", &commonv1.Event{}); err != nil {
		t.Fatal(err)
	}
	s := serveAsync(t.Context(), l, root, 15)
	if got := waitSeqs(t, s, 2); len(got) != 2 || got[0] != 10 || got[1] != 12 {
		t.Fatalf("stored events served: %v; want [10 12]", got)
	}
	addEvent(t, l, other, other.ID, 14)
	addEvent(t, l, root, root.ID, 15)
	wait(t, s)
	if got := s.got(); len(got) != 3 || got[2] != 15 {
		t.Errorf("events served: %v; want [10 12 15]", got)
	}
	if !s.ok || !errors.Is(s.err, errWatchDone) {
		t.Errorf("serve ended ok=%v err=%v; want ok and fn's error", s.ok, s.err)
	}
}

// An analysis created before the consumer started, or less than liveSkew
// after (another replica's clock may run ahead), may have events the
// consumer never saw: serve refuses it.
func TestLiveTreesRefuseWhatTheyMayMiss(t *testing.T) {
	l, clock := liveFixture(t, 10*time.Second)
	for _, created := range []time.Time{clock.Now().Add(-time.Minute), clock.Now(), clock.Now().Add(liveSkew)} {
		root := &Job{ID: "an-1", Tenant: "acme", CreateTime: created}
		if ok, _, err := l.serve(t.Context(), root, nil); ok || err != nil {
			t.Errorf("created %s from the start: served (ok=%v, %v); want refused", created.Sub(clock.Now()), ok, err)
		}
	}
	l.drop()
	clock.Add(time.Hour)
	root := &Job{ID: "an-1", Tenant: "acme", CreateTime: clock.Now()}
	if ok, _, _ := l.serve(t.Context(), root, nil); ok {
		t.Error("served a tree while the consumer is down")
	}
}

// Trees are evicted keep after they were first seen, unless a watch is
// reading them, and the watermark follows: a watch of an analysis older
// than keep replays from the stream, even if a later event of it (a
// retry) made a new tree.
func TestLiveTreesEvictAndRefuseTheEvicted(t *testing.T) {
	l, clock := liveFixture(t, 10*time.Second)
	clock.Add(2 * liveSkew)
	old := &Job{ID: "an-old", Tenant: "acme", CreateTime: clock.Now()}
	watched := &Job{ID: "an-watched", Tenant: "acme", CreateTime: clock.Now()}
	addEvent(t, l, old, old.ID, 1)
	addEvent(t, l, watched, watched.ID, 2)
	ctx, cancel := context.WithCancel(t.Context())
	s := serveAsync(ctx, l, watched, 0)
	waitSeqs(t, s, 1)
	clock.Add(5 * time.Second)
	young := &Job{ID: "an-young", Tenant: "acme", CreateTime: clock.Now()}
	addEvent(t, l, young, young.ID, 3)

	clock.Add(6 * time.Second) // old and watched are 11 s old, young 6 s
	l.evict()
	l.mu.Lock()
	_, oldKept := l.trees[treeKey("acme", old.ID)]
	_, watchedKept := l.trees[treeKey("acme", watched.ID)]
	_, youngKept := l.trees[treeKey("acme", young.ID)]
	l.mu.Unlock()
	if oldKept || !watchedKept || !youngKept {
		t.Errorf("after eviction: old kept %v, watched kept %v, young kept %v; want false, true, true", oldKept, watchedKept, youngKept)
	}
	addEvent(t, l, old, "retry", 4)
	if ok, _, _ := l.serve(t.Context(), old, nil); ok {
		t.Error("served the evicted analysis from its new tree")
	}
	if ok, _, _ := l.serve(t.Context(), watched, nil); ok {
		t.Error("a second watch of an analysis older than keep was served from memory")
	}
	addEvent(t, l, watched, "job-1", 5)
	if got := waitSeqs(t, s, 2); got[1] != 5 {
		t.Errorf("the watch reading a tree past keep got %v; want [2 5]", got)
	}
	cancel()
	wait(t, s)
	clock.Add(time.Second)
	l.evict()
	l.mu.Lock()
	_, watchedKept = l.trees[treeKey("acme", watched.ID)]
	l.mu.Unlock()
	if watchedKept {
		t.Error("the tree was kept after its watch ended")
	}
}

// When the consumer fails, the watches it served end with errLiveLost and
// the last sequence they were given, so the stream's replay goes on after
// it.
func TestLiveTreesLostEndsTheirWatches(t *testing.T) {
	l, clock := liveFixture(t, 10*time.Second)
	clock.Add(2 * liveSkew)
	root := &Job{ID: "an-1", Tenant: "acme", CreateTime: clock.Now()}
	fresh := &Job{ID: "an-2", Tenant: "acme", CreateTime: clock.Now()}
	addEvent(t, l, root, root.ID, 7)
	s := serveAsync(t.Context(), l, root, 0)
	none := serveAsync(t.Context(), l, fresh, 0)
	waitSeqs(t, s, 1)
	// The eventless tree's watch waits before the loss: a watch that
	// starts after it is refused instead (its caller replays the stream).
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		tr := l.trees[treeKey("acme", fresh.ID)]
		waiting := tr != nil && tr.watchers == 1
		l.mu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the eventless tree's watch never started")
		}
		time.Sleep(time.Millisecond)
	}
	l.drop()
	wait(t, s)
	wait(t, none)
	if !s.ok || !errors.Is(s.err, errLiveLost) || s.last != 7 {
		t.Errorf("serve ended ok=%v last=%d err=%v; want ok, 7, errLiveLost", s.ok, s.last, s.err)
	}
	if !none.ok || !errors.Is(none.err, errLiveLost) || none.last != 0 {
		t.Errorf("serve of a tree with no event ended ok=%v last=%d err=%v; want ok, 0, errLiveLost", none.ok, none.last, none.err)
	}
}
