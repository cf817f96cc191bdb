package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentmesh/agentmesh/libs/events"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	"github.com/agentmesh/agentmesh/services/indexer/internal/graph"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
)

// Delete removes a document from the search indexes, the graph and the
// store. The document is hidden first, so a crash half way leaves it
// invisible, and reconciliation finishes the removal. Everything is
// removed by id: the record names its chunks and entity mentions.
func (s *Service) Delete(ctx context.Context, sc document.Scope, id string) error {
	change, err := s.changeEntries(ctx, sc, id, document.ChunkSet{})
	if err != nil {
		return err
	}
	doc, err := s.Docs.MarkDeleting(ctx, sc, id, change...)
	if err != nil {
		return err
	}
	if err := s.finishDelete(ctx, doc); err != nil {
		s.failed.add(sc, id) // hidden already: finished by FinishFailedIngests
		return err
	}
	return nil
}

// finishDelete removes a document marked deleting, as its record (read
// after the marking) names its parts. Other replicas' shards follow the
// change the marking carries; the record goes last, once its outbox is
// published.
func (s *Service) finishDelete(ctx context.Context, doc *document.Document) error {
	sc, id := doc.Scope, doc.ID
	var err error
	if s.local {
		err = s.Indexes.Write(hscope(sc), func(tx hybrid.Tx) error { return tx.DeleteDocument(ctx, id) })
	} else {
		err = s.converge(ctx, sc, id, &document.Absent, nil)
	}
	if err != nil {
		return fmt.Errorf("intake: delete from search indexes: %w", err)
	}
	ids := idsOf(id, append(slices.Clone(doc.StaleChunks), doc.Chunks()), nil)
	if err := s.Graph.DeleteDocument(ctx, graph.Scope(sc), id, docKey(id), chunkKeys(ids), doc.GraphMentions); err != nil {
		return fmt.Errorf("intake: delete from graph: %w", err)
	}
	if err := s.Docs.DeleteChunks(ctx, ids); err != nil {
		return fmt.Errorf("intake: delete chunks: %w", err)
	}
	// The intake's events hold what the pipeline read of the document
	// (vision summaries, extractions): they go with it, once its outbox
	// has published every one of them, and before its record, so that a
	// failure leaves it marked deleting for this to be done again. (A
	// single writer's relay publishes the entries handed to it within
	// milliseconds, unflushed: an event handed in the milliseconds before
	// the delete may stay until it expires.)
	if err := s.Docs.FlushDocument(ctx, id); err != nil {
		return fmt.Errorf("intake: publish the events of %s before removing them: %w", id, err)
	}
	if err := s.purgeIntakeEvents(ctx, sc, id); err != nil {
		return fmt.Errorf("intake: remove the intake events of %s: %w", id, err)
	}
	if s.beforeRemove != nil {
		if err := s.beforeRemove(id); err != nil {
			return err
		}
	}
	if err := s.Docs.DeleteDocument(ctx, sc, id); err != nil {
		return fmt.Errorf("intake: delete document: %w", err)
	}
	// Once more, now that no relay can find the record: another replica's
	// relay may have been publishing its entries as they were purged.
	if err := s.purgeIntakeEvents(ctx, sc, id); err != nil {
		s.Logger.Warn("intake events of a deleted document may be left until they expire", slog.String("document_id", id), slog.Any("error", err))
	}
	s.Logger.Info("document deleted", slog.String("document_id", id), slog.String("tenant", sc.Tenant))
	return nil
}

// purgeIntakeEvents removes from the events stream every intake event of
// document id (am.evt.<tenant>.intake.<id>.*). Without an event bus there
// are none.
func (s *Service) purgeIntakeEvents(ctx context.Context, sc document.Scope, id string) error {
	if s.Events == nil {
		return nil
	}
	stream, err := s.Events.JetStream().Stream(ctx, events.StreamEvents)
	if err != nil {
		return err
	}
	return stream.Purge(ctx, jetstream.WithPurgeSubject(events.EntityEventsSubject(sc.Tenant, intakeDomain, id)))
}

// FindByExtract returns up to limit documents of the scope with an
// extract of typ whose fields all equal the filter's values (in that one
// extract), in id order after afterID; more is true when others follow.
func (s *Service) FindByExtract(ctx context.Context, sc document.Scope, typ string, fields map[string]string, afterID string, limit int) (docs []*document.Document, more bool, err error) {
	terms := document.FilterTerms(typ, fields)
	for {
		batch, err := s.Docs.FindByTerms(ctx, sc, terms, afterID, limit+1)
		if err != nil {
			return nil, false, err
		}
		for _, d := range batch {
			for _, e := range d.Extracts {
				if document.Matches(e, typ, fields) {
					if len(docs) == limit {
						return docs, true, nil
					}
					docs = append(docs, d)
					break
				}
			}
		}
		if len(batch) <= limit {
			return docs, false, nil
		}
		afterID = batch[len(batch)-1].ID
	}
}

// SearchQuery is a search.
type SearchQuery struct {
	Scope  document.Scope
	Text   string
	Limit  int
	Mode   hybrid.Mode
	Filter *hybrid.Filter
}

// SearchHit is a chunk found by a search.
type SearchHit struct {
	Chunk document.Chunk
	hybrid.Hit
}

// Search runs a hybrid (or keyword, or vector) search in the scope's
// shard and returns the chunks, best first.
func (s *Service) Search(ctx context.Context, q SearchQuery) ([]SearchHit, error) {
	var qv []float32
	if q.Mode != hybrid.ModeKeyword {
		vs, err := s.Embedder.Embed(ctx, []string{q.Text})
		if err != nil {
			return nil, fmt.Errorf("intake: embed query: %w", err)
		}
		qv = vs[0]
	}
	var hits []hybrid.Hit
	err := s.Indexes.Read(hscope(q.Scope), func(sh *hybrid.Shard) error {
		var err error
		hits, err = sh.Search(ctx, q.Text, qv, q.Limit, q.Mode, q.Filter)
		return err
	})
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(hits))
	for i, h := range hits {
		keys[i] = h.Key
	}
	chunks, err := s.Docs.GetChunks(ctx, q.Scope, keys)
	if err != nil {
		return nil, err
	}
	out := make([]SearchHit, 0, len(hits))
	for _, h := range hits {
		c, ok := chunks[h.Key]
		if !ok {
			continue // deleted between the index read and now
		}
		out = append(out, SearchHit{Chunk: c, Hit: h})
	}
	return out, nil
}

// GetJob returns an extraction job of the scope.
func (s *Service) GetJob(ctx context.Context, sc document.Scope, id string) (*document.Job, error) {
	return s.Docs.GetJob(ctx, sc, id)
}

// RebuildStats reports a rebuild.
type RebuildStats struct {
	Documents, Chunks int64
}

// Rebuild rebuilds the search indexes of one scope, or of every scope
// with documents when sc is nil, from the chunks in the document store.
// Chunks embedded by another embedder are embedded again (and stored), so
// switching embedders is a rebuild.
func (s *Service) Rebuild(ctx context.Context, sc *document.Scope) (RebuildStats, error) {
	var scopes []document.Scope
	if sc != nil {
		scopes = []document.Scope{*sc}
	} else {
		var err error
		if scopes, err = s.Docs.Scopes(ctx); err != nil {
			return RebuildStats{}, err
		}
	}
	var st RebuildStats
	for _, one := range scopes {
		docs := map[string]bool{}
		err := s.Indexes.Rebuild(hscope(one), func(add func([]hybrid.Chunk) error) error {
			return s.Docs.EachChunk(ctx, one, 500, func(cs []document.Chunk) error {
				var stale []int
				for i, c := range cs {
					if c.Embedder != s.Embedder.Name() || len(c.Vector) != s.Embedder.Dimensions() {
						stale = append(stale, i)
					}
				}
				if len(stale) > 0 {
					re := make([]document.Chunk, len(stale))
					for i, k := range stale {
						re[i] = cs[k]
					}
					if err := s.embedChunks(ctx, re); err != nil {
						return err
					}
					if err := s.Docs.PutChunks(ctx, re); err != nil {
						return err
					}
					for i, k := range stale {
						cs[k] = re[i]
					}
				}
				for _, c := range cs {
					docs[c.DocID] = true
				}
				st.Chunks += int64(len(cs))
				return add(toHybrid(cs))
			})
		})
		if err != nil {
			return st, fmt.Errorf("intake: rebuild %s/%s: %w", one.Tenant, one.Project, err)
		}
		st.Documents += int64(len(docs))
		s.Logger.Info("indexes rebuilt", slog.String("tenant", one.Tenant), slog.String("project", one.Project), slog.Int("documents", len(docs)))
	}
	return st, nil
}

// Reconcile repairs what a crash or a configuration change left behind:
// it finishes interrupted deletes and ingests, queues again extraction
// jobs whose message may be lost, re-extracts documents handled by an
// extractor whose schema version has since risen, and rebuilds shards
// that disagree with the document store (missing, wiped for another
// embedder, or short of chunks). A document whose ingest still holds its
// claim (ingestClaimEnd) may be being ingested by another replica (or a
// request of this one): it is finished last, once the claim has lapsed,
// if it is still unfinished then. Each step logs and continues on error;
// the joined errors are returned.
func (s *Service) Reconcile(ctx context.Context) error {
	var errs []error
	recent, err := s.finishUnfinished(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	if err := s.requeueJobs(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.reextractUpgraded(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.checkShards(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.finishRecent(ctx, recent); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (s *Service) finishUnfinished(ctx context.Context) (recent []*document.Document, err error) {
	docs, err := s.Docs.Unfinished(ctx, 1000)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, d := range docs {
		if !d.Deleting && s.ingestLive(d) {
			recent = append(recent, d) // an ingest may be under way
			continue
		}
		if err := s.finishOne(ctx, d, byReconciliation); errors.Is(err, document.ErrConflict) {
			recent = append(recent, d) // written or its claim renewed since it was read: look again
		} else {
			errs = append(errs, err)
		}
	}
	return recent, errors.Join(errs...)
}

// finishOne finishes the interrupted delete or ingest of d; by names what
// finishes it, for agentmesh.indexer.ingests.finished.
func (s *Service) finishOne(ctx context.Context, d *document.Document, by string) error {
	if d.Deleting {
		return s.finishDelete(ctx, d)
	}
	in := IngestInput{Scope: d.Scope, SourceType: d.SourceType, SourceURL: d.SourceURL, Title: d.Title, RawContent: d.RawContent}
	prior := priorRun{pipeline: d.Pipeline, attachmentText: d.AttachmentText}
	if prior.pipeline == nil && d.VisionSummary != "" {
		// Ingested before the pipeline state existed: its vision summary.
		prior.pipeline = &indexerv1.IntakePipeline{Vision: &indexerv1.IntakeVision{GeneralSummary: d.VisionSummary}}
	}
	_, err := s.ingestVersion(ctx, in, d.ID, d.ContentHash, d, prior)
	if err == nil {
		s.countFinished(ctx, by)
		s.Logger.Info("finished an interrupted ingest", slog.String("document_id", d.ID), slog.String("by", by))
	}
	return err
}

// ingestClaimEnd is when the claim of the ingest that last wrote d lapses:
// its IngestUntil, which a live ingest keeps renewing, or for a document
// written before the claim existed, IngestGrace after its last write.
func (s *Service) ingestClaimEnd(d *document.Document) time.Time {
	if !d.IngestUntil.IsZero() {
		return d.IngestUntil
	}
	return d.UpdateTime.Add(s.cfg.IngestGrace)
}

// ingestLive reports whether the ingest that last wrote d may still be
// under way: its claim holds and, for a single writer, an ingest of this
// process is at work on d. No other process writes a single writer's
// store, so a claim no ingest of its own holds was left by the process it
// replaced, dead: its document is finished at once, not when the claim
// lapses (JobLeaseTTL after the kill).
func (s *Service) ingestLive(d *document.Document) bool {
	if !s.now().Before(s.ingestClaimEnd(d)) {
		return false
	}
	return !s.local || s.ingests.count(d.ID) > 0
}

// finishRecent waits until the ingest claim of each document has lapsed,
// and finishes those still unfinished then, as they are then: the ingest
// that wrote them is over, done or dead.
func (s *Service) finishRecent(ctx context.Context, docs []*document.Document) error {
	var errs []error
	for len(docs) > 0 {
		d := docs[0]
		if s.ingestLive(d) {
			t := time.NewTimer(s.ingestClaimEnd(d).Sub(s.now()))
			select {
			case <-ctx.Done():
				t.Stop()
				return errors.Join(append(errs, ctx.Err())...)
			case <-t.C:
			}
		}
		wait, err := s.settle(ctx, d.Scope, d.ID, byReconciliation)
		if err != nil {
			errs = append(errs, err)
		}
		if wait == nil {
			docs = docs[1:]
			continue
		}
		docs[0] = wait
		if !s.ingestLive(wait) {
			// Handed back with its claim lapsed: its finish conflicted
			// with another writer's, which may still be at it. Let it
			// settle before trying again.
			t := time.NewTimer(5 * ingestPoll)
			select {
			case <-ctx.Done():
				t.Stop()
				return errors.Join(append(errs, ctx.Err())...)
			case <-t.C:
			}
		}
	}
	return errors.Join(errs...)
}

// settle reads document id again and finishes its interrupted ingest
// unless it is gone, finished, or an ingest may be at work on it: written
// again or its claim renewed meanwhile. Then it returns the document as it
// is, to wait for that ingest. by names what finishes it (finishOne). A
// document hidden by a delete that failed after the marking has its
// delete finished.
func (s *Service) settle(ctx context.Context, sc document.Scope, id, by string) (wait *document.Document, err error) {
	cur, err := s.Docs.GetDocument(ctx, sc, id)
	switch {
	case errors.Is(err, document.ErrNotFound):
		// Gone, or hidden by a delete that failed after the marking
		// (Delete): that one is finished here.
		d, err := s.Docs.LoadDocument(ctx, sc, id)
		switch {
		case errors.Is(err, document.ErrNotFound):
			return nil, nil
		case err != nil:
			return nil, err
		case d.Deleting:
			return nil, s.finishDelete(ctx, d)
		}
		return nil, nil
	case err == nil && cur.Indexed:
		return nil, nil
	case err != nil:
		return nil, err
	case s.ingestLive(cur):
		return cur, nil
	}
	if err := s.finishOne(ctx, cur, by); !errors.Is(err, document.ErrConflict) {
		return nil, err
	}
	// Written, or its claim renewed, since it was read: an ingest is at
	// work after all (a slow one, not dead), or another finisher came
	// first. The caller looks again, at its own pace: each try runs the
	// qualifier's model calls.
	return cur, nil
}

// requeueAfter is how old a queued or running job must be before
// reconciliation assumes its message is lost.
const requeueAfter = 10 * time.Minute

// requeueJobs puts the work item of every job pending since before
// requeueAfter in its outbox again. A job another worker is running meanwhile
// is safe: its claim makes the new delivery wait.
func (s *Service) requeueJobs(ctx context.Context) error {
	cutoff := s.now().Add(-requeueAfter)
	jobs, err := s.Docs.PendingJobs(ctx, cutoff, 1000)
	if err != nil {
		return err
	}
	var errs []error
	for _, j := range jobs {
		work, err := workEntry(ctx, j)
		if err == nil {
			_, err = s.Docs.RequeueJob(ctx, j, work)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// reextractUpgraded queues a job for every document an extractor handled
// at a lower schema version than it has now.
func (s *Service) reextractUpgraded(ctx context.Context) error {
	queued := map[string]bool{}
	var errs []error
	for _, ex := range s.Extractors {
		after := ""
		for {
			docs, err := s.Docs.HandledBelow(ctx, ex.Name(), ex.SchemaVersion(), after, 200)
			if err != nil {
				return errors.Join(append(errs, err)...)
			}
			for _, d := range docs {
				after = d.ID
				if queued[d.ID] {
					continue
				}
				queued[d.ID] = true
				errs = append(errs, s.queueReextraction(ctx, d, document.ReasonSchemaUpgrade))
			}
			if len(docs) < 200 {
				break
			}
		}
	}
	if len(queued) > 0 {
		s.Logger.Info("re-extracting after extractor schema upgrades", slog.Int("documents", len(queued)))
	}
	return errors.Join(errs...)
}

func (s *Service) queueReextraction(ctx context.Context, d *document.Document, reason string) error {
	now := s.now()
	j := &document.Job{ID: document.JobID(d.ID, now), Scope: d.Scope, DocumentID: d.ID, ContentHash: d.ContentHash, Reason: reason,
		Status: indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_QUEUED, CreateTime: now}
	ok, err := s.Docs.QueueExtraction(ctx, d.Scope, d.ID, d.ContentHash, j.ID)
	if err != nil || !ok {
		return err
	}
	return s.queueJob(ctx, j)
}

// checkShards rebuilds every shard whose chunk counts differ from the
// store's.
func (s *Service) checkShards(ctx context.Context) error {
	scopes, err := s.Docs.Scopes(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, sc := range scopes {
		want, err := s.Docs.CountChunks(ctx, sc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var kw, vec int
		err = s.Indexes.Read(hscope(sc), func(sh *hybrid.Shard) error {
			var err error
			kw, vec, err = sh.Counts()
			return err
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		stale := s.Indexes.Stale(hscope(sc))
		if !stale && int64(kw) == want && int64(vec) == want {
			continue
		}
		s.Logger.Warn("search indexes disagree with the document store; rebuilding",
			slog.String("tenant", sc.Tenant), slog.String("project", sc.Project),
			slog.Int64("store_chunks", want), slog.Int("bm25_chunks", kw), slog.Int("vector_chunks", vec))
		one := sc
		if _, err := s.Rebuild(ctx, &one); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
