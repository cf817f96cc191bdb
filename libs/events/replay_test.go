package events

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

type replayed struct {
	seq uint64
	id  string
}

func TestReplayFromSequenceThenLive(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	ctx := testContext(t)
	mine := EventSubject("acme", "run", "r1", "progress")
	other := EventSubject("acme", "run", "r2", "progress")

	var ids []string // ids of events on mine, by position
	var seqs []uint64
	for i := range 6 {
		subject := mine
		if i%2 == 1 {
			subject = other
		}
		ev := testEvent(t, strconv.Itoa(i))
		seq, err := b.Publish(ctx, subject, ev)
		if err != nil {
			t.Fatal(err)
		}
		if subject == mine {
			ids = append(ids, ev.GetId())
			seqs = append(seqs, seq)
		}
	}
	// mine holds seqs 1, 3, 5. Resume after 1: expect 3 and 5, then a live one.
	got := make(chan replayed, 10)
	errStop := errors.New("stop")
	done := make(chan error, 1)
	go func() {
		done <- b.Replay(ctx, StreamEvents, mine, seqs[0], func(seq uint64, ev *commonv1.Event) error {
			got <- replayed{seq, ev.GetId()}
			if ev.GetSubject() != mine {
				return errors.New("replayed an event of another subject: " + ev.GetSubject())
			}
			if seq > seqs[len(seqs)-1] {
				return errStop
			}
			return nil
		})
	}()
	want := []replayed{{seqs[1], ids[1]}, {seqs[2], ids[2]}}
	for _, w := range want {
		select {
		case r := <-got:
			if r != w {
				t.Fatalf("replayed %+v, want %+v", r, w)
			}
		case <-ctx.Done():
			t.Fatal("replay stalled")
		}
	}
	live := testEvent(t, "live")
	liveSeq, err := b.Publish(ctx, mine, live)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r != (replayed{liveSeq, live.GetId()}) {
			t.Fatalf("live delivery %+v, want seq %d id %s", r, liveSeq, live.GetId())
		}
	case <-ctx.Done():
		t.Fatal("live event not replayed")
	}
	if err := <-done; !errors.Is(err, errStop) {
		t.Fatalf("Replay returned %v, want fn's error", err)
	}
}

func TestReplayReturnsWhenContextEnds(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	subject := EventSubject("acme", "run", "r1", "x")
	if _, err := b.Publish(testContext(t), subject, testEvent(t, "x")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testContext(t))
	seen := make(chan uint64, 1)
	done := make(chan error, 1)
	go func() {
		done <- b.Replay(ctx, StreamEvents, "", 0, func(seq uint64, _ *commonv1.Event) error {
			seen <- seq
			return nil
		})
	}()
	if seq := <-seen; seq != 1 {
		t.Fatalf("first replayed seq = %d, want 1", seq)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Replay returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Replay did not return after its context ended")
	}
}

// TestReplaysLeaveNoConsumers runs more replays than the server keeps
// consumers per stream by default (1,000): each must remove its consumer
// when it returns, or a busy gateway's watches fail with "maximum consumers
// limit reached" minutes into a run.
func TestReplaysLeaveNoConsumers(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	subject := EventSubject("acme", "run", "r1", "progress")
	if _, err := b.Publish(ctx, subject, testEvent(t, "one")); err != nil {
		t.Fatal(err)
	}
	errStop := errors.New("stop")
	const replays = 1050
	for i := range replays {
		err := b.Replay(ctx, StreamEvents, subject, 0, func(uint64, *commonv1.Event) error { return errStop })
		if !errors.Is(err, errStop) {
			t.Fatalf("replay %d: %v, want the callback's error", i+1, err)
		}
	}
	stream, err := b.js.Stream(ctx, StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Consumers; n != 0 {
		t.Errorf("%d consumers left on %s after %d finished replays, want 0", n, StreamEvents, replays)
	}
}
