package mongostore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestTouchesKeepTheNewest: a touch set while an older one of the same
// conversation is being written stays pending and goes in the next flush,
// after the older one, so the document ends with the newest.
func TestTouchesKeepTheNewest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	var written []touch
	writing, release := make(chan struct{}), make(chan struct{})
	ts := newTouches(func(_ context.Context, _ string, tc touch) error {
		mu.Lock()
		first := len(written) == 0
		mu.Unlock()
		if first {
			close(writing)
			<-release
		}
		mu.Lock()
		defer mu.Unlock()
		written = append(written, tc)
		return nil
	})
	t0 := time.Unix(1_700_000_000, 0).UTC()
	older, newer := touch{updateTime: t0, leaseGen: 1}, touch{updateTime: t0.Add(time.Second), leaseGen: 2}
	if err := ts.set(ctx, "c1", older); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ts.flush(ctx) }()
	<-writing
	if err := ts.set(ctx, "c1", newer); err != nil {
		t.Fatal(err)
	}
	d := &convDoc{ID: "c1", UpdateTime: t0.Add(-time.Hour)}
	if ts.apply(d); !d.UpdateTime.Equal(newer.updateTime) || d.LeaseGen != 2 {
		t.Errorf("apply during the write gave %v gen %d; want the newer touch", d.UpdateTime, d.LeaseGen)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := ts.close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(written) != 2 || written[0] != older || written[1] != newer {
		t.Errorf("written %+v; want the older touch, then the newer", written)
	}
	if len(ts.pending) != 0 {
		t.Errorf("pending after close: %+v", ts.pending)
	}
}

// TestTouchesCloseWaitsOnlyForItsContext: a flush stuck on the database
// (a lost connection) holds Close no longer than Close's own context, and
// what it could not write is reported, not dropped.
func TestTouchesCloseWaitsOnlyForItsContext(t *testing.T) {
	t.Parallel()
	stuck := make(chan struct{})
	defer close(stuck)
	ts := newTouches(func(ctx context.Context, _ string, _ touch) error {
		select {
		case <-stuck:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err := ts.set(context.Background(), "c1", touch{updateTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = ts.flush(context.Background()) }() // never returns until stuck closes
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := ts.close(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("close behind a stuck flush: %v; want its deadline", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("close took %v behind a stuck flush; want about its 200ms deadline", took)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, ok := ts.pending["c1"]; !ok {
		t.Error("the unwritten touch was dropped")
	}
}
