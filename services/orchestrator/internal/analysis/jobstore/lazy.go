package jobstore

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

// LazyDelay is the longest a single writer holds back a write made with
// UpdateLazily before writing it on its own.
const LazyDelay = 100 * time.Millisecond

// lazyWriteTimeout bounds a held write once it is written on its own.
const lazyWriteTimeout = 30 * time.Second

// heldWrite is a write UpdateLazily held back: the job's state to store and
// the outbox entries to push, in order.
type heldWrite struct {
	job    *analysis.Job
	outbox []events.OutboxEntry
	timer  *time.Timer
}

// held holds a single writer's held-back writes, by job id.
type held struct {
	mu     sync.Mutex
	writes map[string]*heldWrite // guarded by mu
}

// UpdateLazily implements analysis.LazyUpdater: Update, except that a single
// writer may write it up to LazyDelay later, or with the job's next write if
// that comes first — one write instead of two. Reads through the store see
// it at once (the mirror has it); the database, and so the relay's
// publishing of its events, get it with that write. A process that dies
// meanwhile leaves the job as it was before it in the database, as if it
// had died just before the write. With many writers it is Update.
func (s *Store) UpdateLazily(ctx context.Context, j *analysis.Job, version int64, outbox ...events.OutboxEntry) error {
	return s.update(ctx, j, version, outbox, true)
}

// hold keeps the write of next, with outbox, back for LazyDelay, merged
// with a write of the job held already; the caller holds the job's lock.
func (s *Store) hold(next *analysis.Job, outbox []events.OutboxEntry) {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	if s.held.writes == nil {
		s.held.writes = map[string]*heldWrite{}
	}
	if w, ok := s.held.writes[next.ID]; ok {
		w.job = copyJob(next)
		w.outbox = append(w.outbox, outbox...)
		return
	}
	w := &heldWrite{job: copyJob(next), outbox: outbox}
	w.timer = time.AfterFunc(s.lazyDelay, func() { s.writeHeld(next.ID, w) })
	s.held.writes[next.ID] = w
}

// take removes and returns the write held for job id, if any; the caller
// holds the job's lock.
func (s *Store) take(id string) *heldWrite {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	w := s.held.writes[id]
	if w != nil {
		w.timer.Stop()
		delete(s.held.writes, id)
	}
	return w
}

// isHeld reports whether a write of job id is held back.
func (s *Store) isHeld(id string) bool {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	return s.held.writes[id] != nil
}

// writeHeld writes w, the write held for job id, unless a later write of
// the job took it.
func (s *Store) writeHeld(id string, w *heldWrite) {
	unlock := mongox.LockDocument(s.live, id)
	defer unlock()
	s.held.mu.Lock()
	mine := s.held.writes[id] == w
	if mine {
		delete(s.held.writes, id)
	}
	s.held.mu.Unlock()
	if !mine {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), lazyWriteTimeout)
	defer cancel()
	// A failure leaves the job unknown to the mirror (writeMirrored):
	// its next reader finds it as the database has it.
	_ = s.writeMirrored(ctx, w.job, w.outbox)
}

// Flush writes every held write now: at shutdown, so a stop loses none.
func (s *Store) Flush() {
	s.held.mu.Lock()
	pending := maps.Clone(s.held.writes)
	s.held.mu.Unlock()
	for id, w := range pending {
		s.writeHeld(id, w)
	}
}
