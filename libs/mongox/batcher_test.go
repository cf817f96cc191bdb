package mongox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/priority"
)

// recorder is a Batcher's write function that records each batch and can
// hold the first one until released.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	ctxs    []context.Context
	started chan struct{} // a batch has started (buffered)
	hold    chan struct{} // closed to let held batches finish
	holdAll bool          // hold every batch, not only the first
}

func newRecorder() *recorder {
	return &recorder{started: make(chan struct{}, 100), hold: make(chan struct{})}
}

func (r *recorder) write(ctx context.Context, items []int) []error {
	r.mu.Lock()
	first := len(r.batches) == 0
	r.batches = append(r.batches, slices.Clone(items))
	r.ctxs = append(r.ctxs, ctx)
	r.mu.Unlock()
	r.started <- struct{}{}
	if first || r.holdAll {
		<-r.hold
	}
	errs := make([]error, len(items))
	for i, it := range items {
		if it%2 == 1 {
			errs[i] = fmt.Errorf("odd %d", it)
		}
	}
	return errs
}

func (r *recorder) sizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for _, b := range r.batches {
		out = append(out, len(b))
	}
	return out
}

// waitQueued waits until n callers of b wait for a batch (the one being
// written is no longer queued).
func waitQueued(t *testing.T, b *mongox.Batcher[int], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for mongox.Queued(b) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d callers queued, want %d", mongox.Queued(b), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A caller alone is written at once, as a batch of one, and gets its own
// outcome.
func TestBatcherWritesALoneCallerAtOnce(t *testing.T) {
	r := newRecorder()
	close(r.hold)
	b := mongox.NewBatcher(8, r.write)
	if err := b.Do(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if err := b.Do(context.Background(), 3); err == nil || err.Error() != "odd 3" {
		t.Fatalf("Do(3) = %v, want odd 3", err)
	}
	if got := r.sizes(); !slices.Equal(got, []int{1, 1}) {
		t.Fatalf("batches %v, want two of one", got)
	}
}

// Callers arriving while a batch is written go together in the next ones,
// at most size each, in their order, and each gets its own outcome.
func TestBatcherGathersCallersWhileABatchIsWritten(t *testing.T) {
	r := newRecorder()
	b := mongox.NewBatcher(4, r.write)
	ctx := context.Background()
	firstDone := make(chan error)
	go func() { firstDone <- b.Do(ctx, 0) }()
	<-r.started

	const n = 10
	errs := make([]error, n)
	var done sync.WaitGroup
	for i := range n {
		done.Go(func() { errs[i] = b.Do(ctx, 100+i) })
		waitQueued(t, b, i+1) // in order
	}
	close(r.hold)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	done.Wait()
	if got := r.sizes(); !slices.Equal(got, []int{1, 4, 4, 2}) {
		t.Fatalf("batches %v, want [1 4 4 2]: the ten waiting callers in batches of at most 4", got)
	}
	r.mu.Lock()
	all := slices.Concat(r.batches[1:]...)
	r.mu.Unlock()
	want := make([]int, n)
	for i := range n {
		want[i] = 100 + i
	}
	if !slices.Equal(all, want) {
		t.Fatalf("items written %v, want %v in order", all, want)
	}
	for i, err := range errs {
		if odd := (100+i)%2 == 1; odd != (err != nil) {
			t.Fatalf("Do(%d) = %v", 100+i, err)
		}
	}
}

// A batch of background writes under way does not hold back an
// interactive caller: it is written in its own batch meanwhile.
func TestBatcherKeepsInteractiveCallersOutOfBackgroundBatches(t *testing.T) {
	r := newRecorder()
	b := mongox.NewBatcher(8, r.write)
	background := priority.Background(context.Background())
	held := make(chan error)
	go func() { held <- b.Do(background, 0) }()
	<-r.started

	interactive := priority.Interactive(context.Background())
	got := make(chan error)
	go func() { got <- b.Do(interactive, 2) }()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the interactive write waited for the background batch")
	}
	close(r.hold)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ctxs) != 2 || priority.IsInteractive(r.ctxs[0]) || !priority.IsInteractive(r.ctxs[1]) {
		t.Fatalf("%d batches; want a background one, then an interactive one", len(r.ctxs))
	}
}

// A caller's canceled context does not end the batch it is in, nor does
// its caller return before the outcome; the batch ends at the latest of
// its callers' deadlines.
func TestBatcherContext(t *testing.T) {
	r := newRecorder()
	r.holdAll = true
	b := mongox.NewBatcher(8, r.write)
	go func() { _ = b.Do(context.Background(), 0) }()
	<-r.started

	soon, cancelSoon := context.WithTimeout(context.Background(), time.Minute)
	later, cancelLater := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLater()
	results := make(chan error, 2)
	go func() { results <- b.Do(soon, 2) }() // first: the batch has its values
	waitQueued(t, b, 1)
	go func() { results <- b.Do(later, 4) }()
	waitQueued(t, b, 2)
	r.hold <- struct{}{} // the first batch ends; the second starts
	<-r.started
	cancelSoon()
	select {
	case err := <-results:
		t.Fatalf("Do returned %v before its batch was written", err)
	case <-time.After(50 * time.Millisecond):
	}
	r.mu.Lock()
	ctx := r.ctxs[1]
	r.mu.Unlock()
	if ctx.Err() != nil {
		t.Fatalf("the batch's context ended with a caller's: %v", ctx.Err())
	}
	want, _ := later.Deadline()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(want) {
		t.Fatalf("batch deadline %v (%v), want the later caller's %v", d, ok, want)
	}
	close(r.hold)
	for range 2 {
		if err := <-results; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
}

// A write that panics panics in its batch's leader, as if it had written
// alone; the other callers in that batch get an error, not a wait forever,
// and the next batches are written.
func TestBatcherSurvivesAPanickingWrite(t *testing.T) {
	hold := make(chan struct{})
	started := make(chan struct{}, 10)
	b := mongox.NewBatcher(8, func(_ context.Context, items []int) []error {
		started <- struct{}{}
		if items[0] == 100 {
			<-hold
		}
		if slices.Contains(items, 0) {
			panic("boom")
		}
		return make([]error, len(items))
	})
	ctx := context.Background()
	go func() { _ = b.Do(ctx, 100) }()
	<-started

	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_ = b.Do(ctx, 0)
	}()
	waitQueued(t, b, 1)
	other := make(chan error, 1)
	go func() { other <- b.Do(ctx, 2) }()
	waitQueued(t, b, 2)
	close(hold)

	if r := <-panicked; r != "boom" {
		t.Fatalf("the leader of the panicking batch recovered %v, want the panic", r)
	}
	select {
	case err := <-other:
		if err == nil {
			t.Fatal("a caller in the panicking batch got no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a caller in the panicking batch is still waiting")
	}
	done := make(chan error, 1)
	go func() { done <- b.Do(ctx, 4) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the batcher writes nothing after a panicking batch")
	}
}
