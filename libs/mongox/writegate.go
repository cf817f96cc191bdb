package mongox

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/agentmesh/agentmesh/libs/priority"
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
//
// Writes a caller waits on (priority.Interactive: a gRPC request being
// served) take their turn before background work's (job execution, event
// relays, sweeps), so under load a submission waits for the write under
// way, not for the whole queue; after interactiveRun turns in a row with
// background writes waiting, one of those goes, so neither starves.
type writeGate struct {
	mu     sync.Mutex
	busy   bool            // guarded by mu: a write holds the turn
	fore   []chan struct{} // guarded by mu: interactive writes waiting, oldest first
	back   []chan struct{} // guarded by mu: background writes waiting
	streak int             // guarded by mu: interactive turns since a background one
	held   sync.Map        // request id (int64) → func() releasing the gate once
}

// interactiveRun is how many interactive writes may go in a row ahead of a
// waiting background write.
const interactiveRun = 4

// writeGates holds one gate per server address: the clients of one process
// that write to the same server share it.
var writeGates sync.Map // URI → *writeGate

func gateFor(uri string) *writeGate {
	g, _ := writeGates.LoadOrStore(uri, &writeGate{})
	return g.(*writeGate)
}

// acquire waits for the turn; it reports false, without the turn, when
// ctx ends first.
func (g *writeGate) acquire(ctx context.Context, interactive bool) bool {
	g.mu.Lock()
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		return true
	}
	turn := make(chan struct{})
	if interactive {
		g.fore = append(g.fore, turn)
	} else {
		g.back = append(g.back, turn)
	}
	g.mu.Unlock()
	select {
	case <-turn:
		return true
	case <-ctx.Done():
	}
	g.mu.Lock()
	waiting := remove(&g.fore, turn) || remove(&g.back, turn)
	g.mu.Unlock()
	if !waiting {
		g.release() // handed the turn as ctx ended: pass it on
	}
	return false
}

// release gives the turn to the next waiting write, or frees the gate.
func (g *writeGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	var next chan struct{}
	switch {
	case len(g.fore) > 0 && (len(g.back) == 0 || g.streak < interactiveRun):
		next, g.fore = g.fore[0], g.fore[1:]
		g.streak++
	case len(g.back) > 0:
		next, g.back = g.back[0], g.back[1:]
		g.streak = 0
	default:
		g.busy = false
		g.streak = 0
		return
	}
	close(next) // the turn passes on: busy stays set
}

// remove deletes c from *q, reporting whether it was there.
func remove(q *[]chan struct{}, c chan struct{}) bool {
	for i, x := range *q {
		if x == c {
			*q = append((*q)[:i], (*q)[i+1:]...)
			return true
		}
	}
	return false
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
			if !g.acquire(ctx, priority.IsInteractive(ctx)) {
				return // the driver fails the command at once
			}
			var once sync.Once
			release := func() { once.Do(g.release) }
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
