package mongostore

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
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
	}, nil)
	t0 := time.Unix(1_700_000_000, 0).UTC()
	older, newer := touch{updateTime: t0, leaseGen: 1}, touch{updateTime: t0.Add(time.Second), leaseGen: 2}
	if err := ts.set(ctx, "c1", older); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ts.flush(ctx, nil) }()
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
	}, nil)
	if err := ts.set(context.Background(), "c1", touch{updateTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = ts.flush(context.Background(), nil) }() // never returns until stuck closes
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

// TestTouchesReportFailuresOnce: background flushes that fail are told to
// the log once, with the error and what is pending, not at every retry;
// the first that works after them is told too, and then nothing more.
func TestTouchesReportFailuresOnce(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	logs := &recorder{}
	ts := newTouches(func(context.Context, string, touch) error {
		if fail.Load() {
			return errors.New("connection refused")
		}
		return nil
	}, slog.New(logs))
	ctx := context.Background()
	for _, id := range []string{"c1", "c2"} {
		if err := ts.set(ctx, id, touch{updateTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		ts.flushLater()
	}
	if got := logs.lines(); len(got) != 1 || !strings.Contains(got[0], "WARN") ||
		!strings.Contains(got[0], "pending=2") || !strings.Contains(got[0], "connection refused") {
		t.Fatalf("after three failed flushes the log has %q; want one warning with pending=2 and the error", got)
	}
	fail.Store(false)
	ts.flushLater()
	ts.flushLater()
	if got := logs.lines(); len(got) != 2 || !strings.Contains(got[1], "INFO") || !strings.Contains(got[1], "written again") {
		t.Fatalf("after the writes worked again the log has %q; want the warning, then one line saying so", got)
	}
	if err := ts.close(ctx); err != nil {
		t.Fatal(err)
	}
}

// recorder is a slog.Handler keeping each record as "LEVEL msg k=v ...".
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Level.String() + " " + rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, b.String())
	return nil
}

func (r *recorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}
