package mongox

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
)

// TestWriteGateNeverHeldForGood: a write whose end is never reported gives
// the turn back after the hold limit, and a write whose context ends while
// waiting does not take it.
func TestWriteGateNeverHeldForGood(t *testing.T) {
	old := writeGateHold
	writeGateHold = 50 * time.Millisecond
	defer func() { writeGateHold = old }()
	g := &writeGate{sem: make(chan struct{}, 1)}
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
	if len(g.sem) != 0 {
		t.Fatal("the gate is held after every write ended")
	}
	m.Started(context.Background(), &event.CommandStartedEvent{CommandName: "find", RequestID: 4})
	if len(g.sem) != 0 {
		t.Fatal("a read took the gate")
	}
}
