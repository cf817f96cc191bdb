package mongox

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
)

// writeGateHold bounds how long one write may keep the gate: a command whose
// end the driver never reports (it publishes an end for every command it
// starts, but this is a lock) cannot stop every other writer for good.
var writeGateHold = 30 * time.Second

// writeGate lets the write commands of a single writer's clients reach
// their server one at a time. The embedded FerretDB keeps a database in
// one SQLite file, whose writers take turns on one lock; when many write at
// once, SQLite's busy handler makes the losers sleep and retry in steps of
// up to 100 ms, which is where a loaded mesh's slow tail came from. Taking
// turns in Go instead costs the losers only the writes ahead of them.
// Reads are not gated: in SQLite's WAL mode they do not wait for writers.
type writeGate struct {
	sem  chan struct{}
	held sync.Map // request id (int64) → func() releasing the gate once
}

// writeGates holds one gate per server address: the clients of one process
// that write to the same server share it.
var writeGates sync.Map // URI → *writeGate

func gateFor(uri string) *writeGate {
	g, _ := writeGates.LoadOrStore(uri, &writeGate{sem: make(chan struct{}, 1)})
	return g.(*writeGate)
}

// IsWrite reports whether a command (by its name, the first key of its
// document) writes.
func IsWrite(cmd string) bool {
	switch cmd {
	case "insert", "update", "delete", "findAndModify", "create", "createIndexes", "drop", "dropIndexes", "dropDatabase":
		return true
	}
	return false
}

// monitor returns the command monitor that applies the gate: a write
// command waits for its turn when the driver starts it and gives the turn
// back when the driver reports its end.
func (g *writeGate) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{
		Started: func(ctx context.Context, e *event.CommandStartedEvent) {
			if !IsWrite(e.CommandName) {
				return
			}
			select {
			case g.sem <- struct{}{}:
			case <-ctx.Done():
				return // the driver fails the command at once
			}
			var once sync.Once
			release := func() { once.Do(func() { <-g.sem }) }
			timer := time.AfterFunc(writeGateHold, release)
			g.held.Store(e.RequestID, func() { timer.Stop(); release() })
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) { g.done(e.RequestID) },
		Failed:    func(_ context.Context, e *event.CommandFailedEvent) { g.done(e.RequestID) },
	}
}

func (g *writeGate) done(requestID int64) {
	if release, ok := g.held.LoadAndDelete(requestID); ok {
		release.(func())()
	}
}
