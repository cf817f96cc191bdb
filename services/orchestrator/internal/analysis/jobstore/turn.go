package jobstore

import "sync"

// urgentStreak is how many urgent writes go in a row while other writes
// wait: one, so under load the two kinds alternate and housekeeping — above
// all archiving, which keeps the live set small — keeps up.
const urgentStreak = 1

// turn lets the writes to FerretDB of this process go one at a time,
// urgent ones first.
//
// SQLite admits one writer at a time and makes the others poll with sleeps
// of a millisecond and more (its busy handler); under concurrent writes
// those sleeps cost more than the writes themselves. Queueing here instead
// hands the turn over at once. Urgent writes are state changes, whose
// events and next steps wait for them; the others (the relay removing
// relayed entries, archiving) wait while urgent ones do, but no longer than
// urgentStreak of them.
type turn struct {
	mu     sync.Mutex
	cond   *sync.Cond
	busy   bool // guarded by mu: a write is under way
	urgent int  // guarded by mu: urgent writes waiting
	others int  // guarded by mu: other writes waiting
	streak int  // guarded by mu: urgent writes since the last other one
}

// take waits for the turn and returns the function that gives it back.
func (t *turn) take(urgent bool) (give func()) {
	t.mu.Lock()
	if t.cond == nil {
		t.cond = sync.NewCond(&t.mu)
	}
	if urgent {
		t.urgent++
		for t.busy || (t.others > 0 && t.streak >= urgentStreak) {
			t.cond.Wait()
		}
		t.urgent--
		t.streak++
	} else {
		t.others++
		for t.busy || (t.urgent > 0 && t.streak < urgentStreak) {
			t.cond.Wait()
		}
		t.others--
		t.streak = 0
	}
	t.busy = true
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		t.busy = false
		t.mu.Unlock()
		t.cond.Broadcast()
	}
}
