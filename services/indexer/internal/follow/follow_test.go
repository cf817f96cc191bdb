package follow_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/follow"
)

const subject = "am.evt.*.document.*.chunks_changed"

// replica is the state a follower keeps: the ids of the events it applied,
// in order, and its rebuilds and health reports.
type replica struct {
	mu       sync.Mutex
	applied  []string
	rebuilds int
	health   []error
	// gate, when not nil, holds Apply (or Rebuild) until it is closed.
	gate chan struct{}
	// fail makes Apply fail for event ids in it, as many times as counted
	// (-1: permanently).
	fail map[string]int
}

func (r *replica) apply(ctx context.Context, ev *commonv1.Event) error {
	r.wait(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch n := r.fail[ev.GetId()]; {
	case n < 0:
		return events.Permanent(errors.New("cannot apply"))
	case n > 0:
		r.fail[ev.GetId()] = n - 1
		return errors.New("store down")
	}
	r.applied = append(r.applied, ev.GetId())
	return nil
}

func (r *replica) rebuild(ctx context.Context) error {
	r.wait(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rebuilds++
	return nil
}

func (r *replica) wait(ctx context.Context) {
	r.mu.Lock()
	gate := r.gate
	r.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
}

func (r *replica) setHealth(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.health = append(r.health, err)
}

func (r *replica) snapshot() (applied []string, rebuilds int, health []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.applied), r.rebuilds, slices.Clone(r.health)
}

// world is one NATS with the mesh's streams, and a replica's directory.
type world struct {
	t   *testing.T
	bus *events.Bus
	dir string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	n := testkit.NewNATS(t)
	bus, err := events.Connect(context.Background(), n.URL(), t.Name(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Close() })
	if err := bus.EnsureStreams(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &world{t: t, bus: bus, dir: t.TempDir()}
}

// publish publishes a chunk change of document doc, and an event on
// another subject of the stream, which no follower applies.
func (w *world) publish(doc string) string {
	w.t.Helper()
	ctx := context.Background()
	ev, err := events.NewEvent("document.chunks_changed", "test", nil, "", nil)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.bus.Publish(ctx, events.EventSubject("acme", "document", doc, "chunks_changed"), ev); err != nil {
		w.t.Fatal(err)
	}
	other, _ := events.NewEvent("document.indexed", "test", nil, "", nil)
	if _, err := w.bus.Publish(ctx, events.EventSubject("acme", "document", doc, "indexed"), other); err != nil {
		w.t.Fatal(err)
	}
	return ev.GetId()
}

// run starts a follower of r on the world until stop is called.
func (w *world) run(r *replica) (f *follow.Follower, stop func()) {
	w.t.Helper()
	f, err := follow.New(w.bus, follow.Config{Stream: events.StreamEvents, Subject: subject, Position: filepath.Join(w.dir, "position.json"),
		Name: "indexer-0.test", Apply: r.apply, Rebuild: r.rebuild, Health: r.setHealth, SaveInterval: time.Hour})
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	w.t.Cleanup(stop)
	return f, stop
}

func caughtUp(t *testing.T, f *follow.Follower) {
	t.Helper()
	select {
	case <-f.CaughtUp():
	case <-time.After(10 * time.Second):
		t.Fatal("not caught up")
	}
}

// TestFollowerResumesFromItsPosition: a first start has no position and
// rebuilds; what is published afterwards is applied once, in order; a
// restart applies only what was published while it was down, without a
// rebuild, and is not caught up (nor healthy) before it has.
func TestFollowerResumesFromItsPosition(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	before := w.publish("d0") // before the first start: the rebuild covers it
	r := &replica{}
	f, stop := w.run(r)
	caughtUp(t, f)
	want := []string{w.publish("d1"), w.publish("d2"), w.publish("d1")}
	testkit.Eventually(t, 10*time.Second, func() bool { a, _, _ := r.snapshot(); return len(a) == 3 }, "three applied")
	stop()
	applied, rebuilds, health := r.snapshot()
	if !slices.Equal(applied, want) || slices.Contains(applied, before) || rebuilds != 1 {
		t.Fatalf("first run: applied %v rebuilds %d; want %v and one rebuild", applied, rebuilds, want)
	}
	if !slices.Equal(health, []error{follow.ErrCatchingUp, follow.ErrRebuilding, nil}) {
		t.Fatalf("first run: health reports %v", health)
	}

	// Down while three more changes come; the restart holds in Apply.
	down := []string{w.publish("d3"), w.publish("d4"), w.publish("d3")}
	r2 := &replica{gate: make(chan struct{})}
	f2, _ := w.run(r2)
	testkit.Eventually(t, 10*time.Second, func() bool { _, _, h := r2.snapshot(); return len(h) > 0 }, "a health report")
	select {
	case <-f2.CaughtUp():
		t.Fatal("caught up before applying what it missed")
	default:
	}
	if _, _, h := r2.snapshot(); !slices.Equal(h, []error{follow.ErrCatchingUp}) {
		t.Fatalf("while catching up: health reports %v", h)
	}
	close(r2.gate)
	caughtUp(t, f2)
	applied, rebuilds, health = r2.snapshot()
	if !slices.Equal(applied, down) || rebuilds != 0 || !slices.Equal(health, []error{follow.ErrCatchingUp, nil}) {
		t.Fatalf("restart: applied %v rebuilds %d health %v; want %v, no rebuild, caught up", applied, rebuilds, health, down)
	}
	if st := f2.Stats(); !st.CaughtUp || st.Applied != 3 || st.Rebuilds != 0 {
		t.Fatalf("restart: stats %+v", st)
	}
}

// TestFollowerRebuildsWhenTheStreamLostItsPosition: events after the
// position that the stream no longer holds (aged out, here purged), or a
// stream created anew, make the restart rebuild, report so, and then
// apply only what came after the rebuild began.
func TestFollowerRebuildsWhenTheStreamLostItsPosition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, w *world)
	}{
		{"purged past the position", func(t *testing.T, w *world) {
			s, err := w.bus.JetStream().Stream(context.Background(), events.StreamEvents)
			if err != nil {
				t.Fatal(err)
			}
			last := s.CachedInfo().State.LastSeq
			if err := s.Purge(context.Background(), jetstream.WithPurgeSequence(last)); err != nil {
				t.Fatal(err)
			}
		}},
		{"stream created again", func(t *testing.T, w *world) {
			if err := w.bus.JetStream().DeleteStream(context.Background(), events.StreamEvents); err != nil {
				t.Fatal(err)
			}
			if err := w.bus.EnsureStreams(context.Background()); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			r := &replica{}
			f, stop := w.run(r)
			caughtUp(t, f)
			w.publish("d1")
			testkit.Eventually(t, 10*time.Second, func() bool { a, _, _ := r.snapshot(); return len(a) == 1 }, "applied")
			stop()

			w.publish("d2") // missed: lost with the stream's head
			w.publish("d3")
			tc.lose(t, w)
			r2 := &replica{gate: make(chan struct{})}
			f2, _ := w.run(r2)
			testkit.Eventually(t, 10*time.Second, func() bool { _, _, h := r2.snapshot(); return len(h) == 2 }, "rebuild reported")
			if _, _, h := r2.snapshot(); !slices.Equal(h, []error{follow.ErrCatchingUp, follow.ErrRebuilding}) {
				t.Fatalf("while rebuilding: health reports %v", h)
			}
			close(r2.gate)
			caughtUp(t, f2)
			after := w.publish("d4")
			testkit.Eventually(t, 10*time.Second, func() bool { a, _, _ := r2.snapshot(); return len(a) == 1 }, "applied after the rebuild")
			applied, rebuilds, health := r2.snapshot()
			if !slices.Equal(applied, []string{after}) || rebuilds != 1 || !slices.Equal(health, []error{follow.ErrCatchingUp, follow.ErrRebuilding, nil}) {
				t.Fatalf("applied %v rebuilds %d health %v; want [%s], one rebuild, caught up", applied, rebuilds, health, after)
			}
		})
	}
}

// TestFollowerRetriesFailuresAndSkipsPermanentOnes: an event whose apply
// fails is applied again, not skipped, and the events behind it wait; one
// that can never be applied (events.Permanent) is skipped.
func TestFollowerRetriesFailuresAndSkipsPermanentOnes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r := &replica{fail: map[string]int{}}
	f, _ := w.run(r)
	caughtUp(t, f)
	// The ids are known once published; make the follower wait until
	// they are marked.
	r.mu.Lock()
	r.gate = make(chan struct{})
	r.mu.Unlock()
	flaky, broken, last := w.publish("d1"), w.publish("d2"), w.publish("d3")
	r.mu.Lock()
	r.fail[flaky], r.fail[broken] = 2, -1
	close(r.gate)
	r.mu.Unlock()
	testkit.Eventually(t, 10*time.Second, func() bool { a, _, _ := r.snapshot(); return len(a) == 2 }, "applied")
	if applied, _, _ := r.snapshot(); !slices.Equal(applied, []string{flaky, last}) {
		t.Fatalf("applied %v, want [%s %s]", applied, flaky, last)
	}
	if st := f.Stats(); st.Applied != 3 {
		t.Fatalf("stats %+v: want 3 events handled", st)
	}
}
