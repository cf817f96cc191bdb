package mongox

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/agentmesh/agentmesh/libs/priority"
)

// TestWriteGateNeverHeldForGood: a write whose end is never reported gives
// the turn back after the hold limit, and a write whose context ends while
// waiting does not take it.
func TestWriteGateNeverHeldForGood(t *testing.T) {
	old := writeGateHold
	writeGateHold = 50 * time.Millisecond
	defer func() { writeGateHold = old }()
	g := &writeGate{}
	m := g.monitor()
	m.Started(context.Background(), &event.CommandStartedEvent{CommandName: "insert", RequestID: 1})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	m.Started(cancelled, &event.CommandStartedEvent{CommandName: "update", RequestID: 2}) // must not block
	done := make(chan struct{})
	go func() {
		m.Started(context.Background(), &event.CommandStartedEvent{CommandName: "delete", RequestID: 3})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a lost write kept the gate")
	}
	m.Succeeded(context.Background(), &event.CommandSucceededEvent{CommandFinishedEvent: event.CommandFinishedEvent{RequestID: 3}})
	m.Failed(context.Background(), &event.CommandFailedEvent{CommandFinishedEvent: event.CommandFinishedEvent{RequestID: 2}})
	if g.busy {
		t.Fatal("the gate is held after every write ended")
	}
	m.Started(context.Background(), &event.CommandStartedEvent{CommandName: "find", RequestID: 4})
	if g.busy {
		t.Fatal("a read took the gate")
	}
}

// TestWriteGateServesInteractiveWritesFirst: a write a caller waits on
// (priority.Interactive) goes before background writes queued earlier, and
// after interactiveRun interactive turns in a row a waiting background
// write goes, so neither starves.
func TestWriteGateServesInteractiveWritesFirst(t *testing.T) {
	g := &writeGate{}
	if !g.acquire(context.Background(), false) {
		t.Fatal("a free gate refused a write")
	}
	order := make(chan string, 20)
	var queued []string
	enqueue := func(name string, interactive bool) {
		ctx := context.Background()
		if interactive {
			ctx = priority.Interactive(ctx)
		}
		g.mu.Lock()
		n := len(g.fore) + len(g.back)
		g.mu.Unlock()
		go func() {
			if g.acquire(ctx, priority.IsInteractive(ctx)) {
				order <- name
			}
		}()
		for { // wait until it is queued, so the queue order is known
			g.mu.Lock()
			m := len(g.fore) + len(g.back)
			g.mu.Unlock()
			if m > n {
				break
			}
			time.Sleep(time.Millisecond)
		}
		queued = append(queued, name)
	}
	for _, b := range []string{"b1", "b2"} {
		enqueue(b, false)
	}
	for _, f := range []string{"f1", "f2", "f3", "f4", "f5", "f6"} {
		enqueue(f, true)
	}
	var got []string
	for range queued {
		g.release()
		select {
		case name := <-order:
			got = append(got, name)
		case <-time.After(5 * time.Second):
			t.Fatalf("no write took the turn after %v", got)
		}
	}
	want := "f1 f2 f3 f4 b1 f5 f6 b2"
	if s := strings.Join(got, " "); s != want {
		t.Errorf("turns %s, want %s", s, want)
	}
	g.release()
	if g.busy {
		t.Error("the gate is held after every write ended")
	}
}
