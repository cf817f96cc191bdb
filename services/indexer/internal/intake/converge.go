package intake

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
)

// EventChunksChanged is the type of the event a write that changes what
// the search indexes must hold of a document carries in its outbox:
// marking new content indexed, completing an extraction (a new base
// chunk), marking the document deleted. Its payload is an
// indexerv1.Document with the id, the scope, and the content hash and
// chunk count the write left (empty for a delete); followers read the
// record itself (see HandleChunkChange).
const EventChunksChanged = "document.chunks_changed"

// ChunksChangedFilter is the subject filter of every chunk change, in
// AM_EVENTS: am.evt.<tenant>.document.<id>.chunks_changed.
const ChunksChangedFilter = events.EventSubjectPrefix + "*.document.*.chunks_changed"

// chunksChanged is the outbox entry of a chunk change of document id to
// chunk set set (empty: removed). Its id is fresh, not derived from the
// change: the same content indexed again later is a change of its own,
// which a derived id would have JetStream drop as a duplicate inside its
// window, while a relay publishing this entry again keeps its id.
func chunksChanged(ctx context.Context, sc document.Scope, id string, set document.ChunkSet) (events.OutboxEntry, error) {
	ev, err := events.NewEvent(EventChunksChanged, Source, sc.Proto(), id,
		&indexerv1.Document{Id: id, Scope: sc.Proto(), ContentHash: set.Hash, ChunkCount: int32(set.Count)})
	if err != nil {
		return events.OutboxEntry{}, err
	}
	e, err := events.OutboxEntryFor(events.EventSubject(sc.Tenant, "document", id, "chunks_changed"), ev)
	if err != nil {
		return events.OutboxEntry{}, err
	}
	return e.WithTraceContext(ctx), nil
}

// changeEntries returns the chunk change entry a write to document id
// carries: none for a single writer, whose shards the pipeline writes
// itself and which no other replica follows.
func (s *Service) changeEntries(ctx context.Context, sc document.Scope, id string, set document.ChunkSet) ([]events.OutboxEntry, error) {
	if s.local {
		return nil, nil
	}
	e, err := chunksChanged(ctx, sc, id, set)
	if err != nil {
		return nil, err
	}
	return []events.OutboxEntry{e}, nil
}

// HandleChunkChange applies a chunk change event (EventChunksChanged) of
// any replica to this replica's search shard: it reads the document's
// record and makes the shard hold what the record says (see converge).
// It is idempotent, and an old event applied after a newer one changes
// nothing, since both lead to the record as it is now. An event it cannot
// decode is a permanent error (events.Permanent).
func (s *Service) HandleChunkChange(ctx context.Context, ev *commonv1.Event) error {
	var d indexerv1.Document
	if err := ev.GetPayload().UnmarshalTo(&d); err != nil {
		return events.Permanent(fmt.Errorf("intake: chunk change %s: %w", ev.GetId(), err))
	}
	if d.GetId() == "" {
		return events.Permanent(fmt.Errorf("intake: chunk change %s names no document", ev.GetId()))
	}
	sc := document.Scope{Tenant: d.GetScope().GetTenantId(), Project: d.GetScope().GetProjectId()}
	return s.converge(ctx, sc, d.GetId(), nil, nil)
}

// ConvergeStats counts what converge did, since the service started.
type ConvergeStats struct {
	// Written counts documents whose chunks were written to a shard;
	// ChunksRead the chunks read from the store for that (those a caller
	// held were not read).
	Written, ChunksRead int64
	// Removed counts documents removed from a shard.
	Removed int64
	// Unchanged counts changes the shard already held: nothing written.
	Unchanged int64
	// Unsettled counts changes found with an ingest under way: the write
	// that ends it carries a change of its own.
	Unsettled int64
}

// convergeStats are the counters behind ConvergeStats.
type convergeStats struct {
	written, chunksRead, removed, unchanged, unsettled atomic.Int64
}

// ConvergeStats returns what converge did so far.
func (s *Service) ConvergeStats() ConvergeStats {
	c := &s.stats
	return ConvergeStats{Written: c.written.Load(), ChunksRead: c.chunksRead.Load(), Removed: c.removed.Load(),
		Unchanged: c.unchanged.Load(), Unsettled: c.unsettled.Load()}
}

// docLocks serialise converge per document (by a hash of its id), so that
// reading the record and writing what it says is one step.
type docLocks [64]sync.Mutex

// lockOwnChange takes document id's lock, with many writers, before the
// write that records a change this replica makes, to be held until this
// replica's shard holds the change (convergeLocked): its follower, which
// takes the same lock, then finds its own change applied — one read of
// the record, no chunk read, no write. The returned unlock may be called
// more than once.
func (s *Service) lockOwnChange(id string) (unlock func()) {
	if s.local {
		return func() {}
	}
	var once sync.Once
	release := s.locks.lock(id)
	return func() { once.Do(release) }
}

func (l *docLocks) lock(id string) (unlock func()) {
	h := fnv.New32a()
	h.Write([]byte(id))
	mu := &l[h.Sum32()%uint32(len(l))]
	mu.Lock()
	return mu.Unlock
}

// held is what a caller of converge wrote and still holds: chunks of a
// chunk set, whose base chunk carries the digest of job baseJob (empty:
// the ingest's), so that converge need not read them back.
type held struct {
	chunks  []document.Chunk
	baseJob string
}

// converge makes the scope's shard hold what document id's record says:
// its current chunk set once indexed, nothing once gone or being deleted,
// and, while an ingest is under way, what it held (the write that ends the
// ingest carries a change). state is the record's state when the caller
// knows it (a document marked deleting stays so), nil to read it.
//
// The record is read, and the shard written, under the document's lock,
// and the shard records the state it holds (a token): a change the shard
// holds already costs one read of the record; a new base chunk, one chunk
// read; new content, its chunks (those in h are not read). A chunk missing
// from the store means the record moved on meanwhile: the state is read
// again, at most three times, and otherwise the next change of the
// document (there is one) finishes the job.
func (s *Service) converge(ctx context.Context, sc document.Scope, id string, state *document.IndexState, h *held) error {
	defer s.locks.lock(id)()
	return s.convergeLocked(ctx, sc, id, state, h)
}

// convergeLocked is converge for a caller holding the document's lock.
func (s *Service) convergeLocked(ctx context.Context, sc document.Scope, id string, state *document.IndexState, h *held) error {
	for attempt := 0; ; attempt++ {
		var st document.IndexState
		if state != nil {
			st = *state
		} else {
			var err error
			if st, err = s.Docs.IndexState(ctx, sc, id); err != nil {
				return fmt.Errorf("intake: converge %s: %w", id, err)
			}
		}
		if !st.Settled() {
			s.stats.unsettled.Add(1)
			return nil
		}
		complete, err := s.writeState(ctx, sc, id, st, h)
		if err != nil {
			return fmt.Errorf("intake: converge %s: %w", id, err)
		}
		if complete || state != nil || attempt == 2 {
			return nil
		}
	}
}

// writeState writes state st of document id to the scope's shard, unless
// the shard's token says it holds it. It reports false when chunks of st
// were missing from the store, so what it wrote is not st.
func (s *Service) writeState(ctx context.Context, sc document.Scope, id string, st document.IndexState, h *held) (complete bool, err error) {
	err = s.Indexes.Write(hscope(sc), func(tx hybrid.Tx) error {
		have, known := tx.Applied(id)
		token := st.Token()
		switch {
		case known && have == token:
			s.stats.unchanged.Add(1)
			complete = true
			return nil
		case !st.Present():
			complete = true
			tx.ForgetApplied(id)
			n, err := tx.ReplaceDocument(ctx, id, nil)
			if n > 0 {
				s.stats.removed.Add(1)
			} else {
				s.stats.unchanged.Add(1)
			}
			return err
		}
		// The chunk set is there already: only the base chunk changed.
		baseOnly := known && strings.HasPrefix(have, st.SetToken())
		want := document.ChunkIDs(id, st.Chunks)
		if baseOnly {
			want = want[:1]
		}
		chunks, err := s.chunksOf(ctx, sc, st, want, h)
		if err != nil {
			return err
		}
		complete = len(chunks) == len(want)
		if complete {
			tx.SetApplied(id, token)
		} else {
			tx.ForgetApplied(id)
		}
		s.stats.written.Add(1)
		if baseOnly {
			return tx.Add(toHybrid(chunks))
		}
		_, err = tx.ReplaceDocument(ctx, id, toHybrid(chunks))
		return err
	})
	return complete, err
}

// chunksOf returns the chunks with ids want of state st: from h where it
// holds them (the base chunk only if it carries st's digest), the others
// read from the store, with vectors, embedded again if another embedder
// made them. Chunks missing from the store are left out.
func (s *Service) chunksOf(ctx context.Context, sc document.Scope, st document.IndexState, want []string, h *held) ([]document.Chunk, error) {
	have := map[string]document.Chunk{}
	if h != nil {
		for _, c := range h.chunks {
			if c.ContentHash == st.Chunks.Hash && (c.Seq != 0 || h.baseJob == st.BaseJob) {
				have[c.ID] = c
			}
		}
	}
	var missing []string
	for _, id := range want {
		if _, ok := have[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		read, err := s.Docs.ReadChunks(ctx, sc, missing)
		if err != nil {
			return nil, err
		}
		s.stats.chunksRead.Add(int64(len(read)))
		var stale []document.Chunk
		for _, c := range read {
			if c.Embedder != s.Embedder.Name() || len(c.Vector) != s.Embedder.Dimensions() {
				stale = append(stale, c)
				continue
			}
			have[c.ID] = c
		}
		if len(stale) > 0 {
			if err := s.embedChunks(ctx, stale); err != nil {
				return nil, err
			}
			for _, c := range stale {
				have[c.ID] = c
			}
		}
	}
	out := make([]document.Chunk, 0, len(want))
	for _, id := range want {
		if c, ok := have[id]; ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// writeBaseAhead writes base, the base chunk of chunk set set with the
// digest of job jobID, to the scope's shard just before the write that
// records the job's results (CompleteExtraction), if the shard holds that
// chunk set: so that once the job's end is visible, this replica's
// searches find the digest too. The shard's token becomes the state that
// write leaves; should the write not happen, undoExtraction converges the
// shard to what the record says instead.
// The caller holds the document's lock (lockOwnChange).
func (s *Service) writeBaseAhead(ctx context.Context, sc document.Scope, id string, set document.ChunkSet, jobID string, base document.Chunk) error {
	next := document.IndexState{Found: true, Indexed: true, Chunks: set, BaseJob: jobID}
	return s.Indexes.Write(hscope(sc), func(tx hybrid.Tx) error {
		if have, ok := tx.Applied(id); !ok || !strings.HasPrefix(have, next.SetToken()) {
			return nil // the converge after the write does it all
		}
		if err := tx.Add(toHybrid([]document.Chunk{base})); err != nil {
			tx.ForgetApplied(id)
			return err
		}
		tx.SetApplied(id, next.Token())
		return nil
	})
}
