package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/agentmesh/libs/events"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	docstore "github.com/agentmesh/agentmesh/services/indexer/internal/document/mongostore"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
	"github.com/agentmesh/agentmesh/services/indexer/internal/graph"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
	"github.com/agentmesh/agentmesh/services/indexer/internal/pipeline"
	"github.com/agentmesh/agentmesh/services/indexer/internal/routing"
)

// Event types.
const (
	EventDocumentIndexed = "document.indexed"
	EventDocumentLifted  = "document.lifted_up"
	eventJobRequested    = "extraction_job.requested"
)

// jobEventNames are the last subject token and type suffix of each job
// status's event.
var jobEventNames = map[indexerv1.ExtractionJobStatus]string{
	indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_QUEUED:           "queued",
	indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_RUNNING:          "started",
	indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED:        "succeeded",
	indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_PARTIALLY_FAILED: "partially_failed",
	indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_FAILED:           "failed",
	indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUPERSEDED:       "superseded",
}

// outboxEvent builds an outbox entry with a deterministic event id, so a
// retried step re-publishes the same event and JetStream stores it once.
func outboxEvent(ctx context.Context, sc document.Scope, domain, entity, name, correlation string, idSuffix string, payload proto.Message) (events.OutboxEntry, error) {
	ev, err := events.NewEvent(domain+"."+name, Source, sc.Proto(), correlation, payload)
	if err != nil {
		return events.OutboxEntry{}, err
	}
	ev.Id = entity + ":" + name + idSuffix
	e, err := events.OutboxEntryFor(events.EventSubject(sc.Tenant, domain, entity, name), ev)
	if err != nil {
		return events.OutboxEntry{}, err
	}
	return e.WithTraceContext(ctx), nil
}

// jobEvent is the outbox entry announcing a job's current status.
func jobEvent(ctx context.Context, j *document.Job) (events.OutboxEntry, error) {
	name := jobEventNames[j.Status]
	return outboxEvent(ctx, j.Scope, "extraction_job", j.ID, name, j.DocumentID, fmt.Sprintf(":%d", j.Attempts),
		&indexerv1.ExtractionJobEvent{Job: j.Proto()})
}

// queueJob stores a queued job with its "queued" event and its work item
// in its outbox: one write, so the job and the message that runs it exist
// together or not at all.
func (s *Service) queueJob(ctx context.Context, j *document.Job) error {
	ev, err := jobEvent(ctx, j)
	if err != nil {
		return err
	}
	work, err := workEntry(ctx, j)
	if err != nil {
		return err
	}
	if err := s.Docs.CreateJob(ctx, j, ev, work); err != nil {
		return fmt.Errorf("intake: create job: %w", err)
	}
	return nil
}

// workEntry is the outbox entry of a job's work item. Its id is the job
// id, so the same job queued again inside the duplicate window is stored
// once.
func workEntry(ctx context.Context, j *document.Job) (events.OutboxEntry, error) {
	work, err := events.NewEvent(eventJobRequested, Source, j.Scope.Proto(), j.DocumentID,
		&indexerv1.ExtractionJob{Id: j.ID, Scope: j.Scope.Proto(), DocumentId: j.DocumentID, ContentHash: j.ContentHash})
	if err != nil {
		return events.OutboxEntry{}, err
	}
	work.Id = j.ID
	e, err := events.OutboxEntryFor(events.WorkSubject(ExtractionQueue), work)
	if err != nil {
		return events.OutboxEntry{}, err
	}
	return e.WithTraceContext(ctx), nil
}

// jobDocument reads the document job j extracts, once the ingest that
// queued j has marked it indexed, or says why j is superseded. The ingest
// may not have finished: it is about to (a job is queued just before its
// document is marked indexed), or it died, and reconciliation finishes it
// under a new job that supersedes j — running j now would make that
// extraction's model calls twice (awaitIngest).
func (s *Service) jobDocument(ctx context.Context, j *document.Job) (doc *document.Document, superseded string, err error) {
	doc, err = s.Docs.GetDocument(ctx, j.Scope, j.DocumentID)
	for {
		switch {
		case errors.Is(err, document.ErrNotFound):
			return nil, "the document was deleted", nil
		case err != nil:
			return nil, "", err
		case doc.ContentHash != j.ContentHash || doc.ExtractionJobID != j.ID:
			return nil, "the document changed; a newer job extracts it", nil
		case doc.Indexed:
			return doc, "", nil
		}
		doc, err = s.awaitIngest(ctx, doc)
	}
}

// errIngestUnfinished fails a job delivery whose document's ingest died
// before marking it indexed: the job is delivered again later, when
// reconciliation has finished the ingest (and superseded the job).
var errIngestUnfinished = errors.New("intake: the document's ingest has not finished; its extraction waits for it")

// ingestPoll is how often awaitIngest reads the document.
const ingestPoll = 20 * time.Millisecond

// awaitIngest waits while the ingest of doc holds its claim for the
// document to be indexed, and returns it then; errIngestUnfinished if
// the claim lapsed first (the ingest died), or the document's error.
func (s *Service) awaitIngest(ctx context.Context, doc *document.Document) (*document.Document, error) {
	for !doc.Indexed {
		if !s.ingestLive(doc) {
			return nil, errIngestUnfinished
		}
		t := time.NewTimer(ingestPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		case <-t.C:
		}
		next, err := s.Docs.GetDocument(ctx, doc.Scope, doc.ID)
		if err != nil {
			return nil, err
		}
		doc = next
	}
	return doc, nil
}

// errJobMoved means another worker moved the job on (ended it) while this
// one was writing it.
var errJobMoved = errors.New("intake: the job was moved on by another worker")

// HandleJob is the extraction work queue's handler. It runs the job under
// its claim (see claim.go), so it is idempotent and exclusive: a delivery
// of a job that already ended is acknowledged; one of a job another worker
// is running waits for it to end (or die); a job whose document changed or
// went away is superseded; otherwise the extractors run again and their
// results replace the document's.
func (s *Service) HandleJob(ctx context.Context, d *events.Delivery) error {
	var msg indexerv1.ExtractionJob
	if err := d.Event.GetPayload().UnmarshalTo(&msg); err != nil {
		return events.Permanent(fmt.Errorf("intake: job message: %w", err))
	}
	sc := document.Scope{Tenant: msg.GetScope().GetTenantId(), Project: msg.GetScope().GetProjectId()}
	defer s.claimers.enter(claimKey(msg.GetId()))()
	c, err := s.claimJob(ctx, sc, msg.GetId())
	if errors.Is(err, document.ErrNotFound) {
		return events.Permanent(fmt.Errorf("intake: job %s does not exist", msg.GetId()))
	}
	if err != nil || c == nil {
		return err
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := s.keepClaim(runCtx, c, cancel)
	ended, err := s.handleClaimed(runCtx, d, sc, msg.GetId())
	stop()
	if cause := context.Cause(runCtx); errors.Is(cause, errClaimLost) {
		return cause // another worker has the job now
	}
	s.letGo(ctx, c, ended)
	return err
}

// handleClaimed runs one attempt of job id, whose claim this worker
// holds, and reports whether the job has ended.
func (s *Service) handleClaimed(ctx context.Context, d *events.Delivery, sc document.Scope, id string) (ended bool, err error) {
	j, err := s.Docs.GetJob(ctx, sc, id)
	if errors.Is(err, document.ErrNotFound) {
		return true, events.Permanent(fmt.Errorf("intake: job %s does not exist", id))
	}
	if err != nil {
		return false, err
	}
	if document.Terminal(j.Status) {
		return true, nil
	}
	j.Attempts = int(d.NumDelivered)
	err = s.runJob(ctx, j)
	switch {
	case err == nil, errors.Is(err, errJobMoved):
		return true, nil
	case int(d.NumDelivered) < s.cfg.MaxDeliver || ctx.Err() != nil:
		return false, err
	}
	// The last delivery failed: the job fails, and the message is
	// dead-lettered.
	from := j.Status
	j.Status, j.Error, j.EndTime = indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_FAILED, err.Error(), s.now()
	if werr := s.writeJob(ctx, j, from); werr != nil && !errors.Is(werr, errJobMoved) {
		return false, errors.Join(err, werr)
	}
	_ = s.Docs.SetExtractionStatus(ctx, j.Scope, j.DocumentID, j.ID, j.Status)
	return true, err
}

// runJob runs one attempt of a job.
func (s *Service) runJob(ctx context.Context, j *document.Job) error {
	log := s.Logger.With(slog.String("job_id", j.ID), slog.String("document_id", j.DocumentID), slog.String("tenant", j.Scope.Tenant))
	from := j.Status
	doc, superseded, err := s.jobDocument(ctx, j)
	if superseded != "" {
		return s.supersede(ctx, j, from, superseded)
	}
	if err != nil {
		return err
	}
	j.Status, j.StartTime, j.Error = indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_RUNNING, s.now(), ""
	if err := s.writeJob(ctx, j, from); err != nil {
		return err
	}
	from = j.Status
	if err := s.Docs.SetExtractionStatus(ctx, j.Scope, j.DocumentID, j.ID, j.Status); err != nil {
		return err
	}

	in := &extract.Document{ID: doc.ID, Title: doc.Title, SourceType: doc.SourceType, SourceURL: doc.SourceURL,
		ContentType: doc.ContentType, Text: doc.RawContent, VisionSummary: doc.VisionSummary}
	outcomes := extract.Run(ctx, in, s.Extractors, s.cfg.ExtractorTimeout)
	if ctx.Err() != nil {
		return context.Cause(ctx) // shutting down, or the claim is lost: let another delivery run it
	}
	var (
		exs      []extract.Extract
		versions = map[string]int{}
		failed   int
	)
	j.Runs = nil
	for _, o := range outcomes {
		r := document.Run{Extractor: o.Extractor, SchemaVersion: o.SchemaVersion, Status: o.Status, ExtractCount: len(o.Extracts), Duration: o.Duration.Truncate(time.Microsecond)}
		if o.Err != nil {
			r.Error = o.Err.Error()
			failed++
			log.Warn("extractor failed; the others still ran", slog.String("extractor", o.Extractor), slog.Any("error", o.Err))
		}
		if o.Status != indexerv1.ExtractorRunStatus_EXTRACTOR_RUN_STATUS_SKIPPED {
			versions[o.Extractor] = o.SchemaVersion
		}
		j.Runs = append(j.Runs, r)
		exs = append(exs, o.Extracts...)
	}

	// Entities into the graph: first named on the document (so a delete
	// or a content change finds them), then written.
	ents := entityNodes(exs, pipeline.Entities(doc.Pipeline)...)
	mentions := make([]string, len(ents))
	for i, e := range ents {
		mentions[i] = e.Key
	}
	if !subset(mentions, doc.GraphMentions) {
		ok, err := s.Docs.AddMentions(ctx, j.Scope, doc.ID, doc.ContentHash, j.ID, mentions)
		if err != nil {
			return err
		}
		if !ok {
			return s.supersede(ctx, j, from, "the document changed while extracting")
		}
	}
	if err := s.Graph.ReplaceMentions(ctx, graph.Scope(j.Scope), doc.ID, docKey(doc.ID), ents, doc.GraphMentions); err != nil {
		return fmt.Errorf("intake: graph mentions: %w", err)
	}
	// The base chunk with the extract digest.
	doc.Extracts = exs
	base := []document.Chunk{s.baseChunk(doc, digest(exs))}
	if err := s.embedChunks(ctx, base); err != nil {
		return err
	}
	if err := s.Docs.PutChunks(ctx, base); err != nil {
		return err
	}
	unlock := s.lockOwnChange(doc.ID)
	defer unlock()
	if s.local {
		err = s.Indexes.Write(hscope(j.Scope), func(tx hybrid.Tx) error { return tx.Add(toHybrid(base)) })
	} else {
		err = s.writeBaseAhead(ctx, j.Scope, doc.ID, doc.Chunks(), j.ID, base[0])
	}
	if err != nil {
		return fmt.Errorf("intake: index base chunk: %w", err)
	}

	route, routed := s.route(ctx, doc, exs)
	if ctx.Err() != nil {
		return context.Cause(ctx) // shutting down, or the claim is lost: let another delivery run it
	}
	dec := routing.Decision{Routing: route.GetRouting(), Reason: route.GetReason()}
	doc.LiftedJobID = route.GetLiftedJobId()
	if doc.Pipeline != nil {
		doc.Pipeline.Routing, doc.Pipeline.Finished = route, true
	}
	j.Status = indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED
	if failed > 0 {
		j.Status = indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_PARTIALLY_FAILED
		j.Error = fmt.Sprintf("%d of %d extractors failed", failed, len(outcomes))
	}
	doc.Routing, doc.RoutingReason, doc.ExtractorVersions, doc.ExtractionStatus = dec.Routing, dec.Reason, versions, j.Status
	doc.UpdateTime = s.now()
	entries, err := s.documentEvents(ctx, doc, j)
	if err != nil {
		return err
	}
	if doc.Pipeline != nil {
		// The routing phase and the pipeline's end, under the intake's
		// correlation id (its watchers follow that), named after the
		// job, so a retried job publishes them once.
		correlation := doc.Pipeline.GetCorrelationId()
		if correlation == "" {
			correlation = j.ID
		}
		ev, err := s.phaseEvents(ctx, doc, correlation, j.ID, routed)
		if err != nil {
			return err
		}
		fin, err := s.finishedEvent(ctx, doc, correlation, j.ID, routed)
		if err != nil {
			return err
		}
		entries = append(entries, append(ev, fin)...)
	}
	change, err := s.changeEntries(ctx, j.Scope, doc.ID, doc.Chunks())
	if err != nil {
		return err
	}
	entries = append(entries, change...)
	ok, err := s.Docs.CompleteExtraction(ctx, j.Scope, doc.ID, doc.ContentHash, docstore.ExtractionResult{
		Extracts: exs, ExtractorVersions: versions, Routing: dec.Routing, RoutingReason: dec.Reason, Status: j.Status, JobID: j.ID,
		Mentions: mentions, Pipeline: docstore.PipelineProgress{Phase: routed, Routing: route}, LiftedJobID: doc.LiftedJobID,
	}, doc.UpdateTime, entries...)
	if err != nil {
		return err
	}
	if !ok {
		unlock()
		if err := s.undoExtraction(ctx, j, mentions); err != nil {
			return err
		}
		return s.supersede(ctx, j, from, "the document changed while extracting")
	}
	if !s.local {
		if err := s.convergeLocked(ctx, j.Scope, doc.ID, nil, &held{chunks: base, baseJob: j.ID}); err != nil {
			log.Warn("search index not updated; it follows the change from the stream", slog.Any("error", err))
		}
	}
	unlock()
	j.EndTime = s.now()
	log.Info("extraction finished", slog.String("status", jobEventNames[j.Status]), slog.Int("extracts", len(exs)),
		slog.String("routing", dec.Routing.String()))
	return s.writeJob(ctx, j, from)
}

// undoExtraction removes what an extraction wrote for a document that
// changed or went away before the extraction could record its results:
// the newer version, or the delete, may have cleaned up before these
// writes landed. The base chunk of the job's content is obsolete unless
// that content is current; the mentions matter only once the document is
// gone (a newer extraction drops them otherwise: they are on the
// document's graph_mentions).
func (s *Service) undoExtraction(ctx context.Context, j *document.Job, mentions []string) error {
	cur, err := s.Docs.LoadDocument(ctx, j.Scope, j.DocumentID)
	gone := errors.Is(err, document.ErrNotFound) || (err == nil && cur.Deleting)
	if err != nil && !gone {
		return err
	}
	if gone || cur.ContentHash != j.ContentHash {
		base := []string{document.ChunkID(j.DocumentID, j.ContentHash, 0)}
		if s.local { // with replicas, no shard got it
			if err := s.Indexes.Write(hscope(j.Scope), func(tx hybrid.Tx) error { return tx.Delete(base) }); err != nil {
				return fmt.Errorf("intake: search indexes: %w", err)
			}
		}
		if err := s.Docs.DeleteChunks(ctx, base); err != nil {
			return err
		}
	}
	if gone {
		if err := s.Graph.ReplaceMentions(ctx, graph.Scope(j.Scope), j.DocumentID, docKey(j.DocumentID), nil, mentions); err != nil {
			return fmt.Errorf("intake: graph mentions: %w", err)
		}
	}
	if !s.local {
		// The base chunk written ahead (writeBaseAhead) gives way to what
		// the record says.
		return s.converge(ctx, j.Scope, j.DocumentID, nil, nil)
	}
	return nil
}

// subset reports whether every key of a is in b.
func subset(a, b []string) bool {
	for _, k := range a {
		if !slices.Contains(b, k) {
			return false
		}
	}
	return true
}

// documentEvents are the document's "indexed" event, and "lifted_up" when
// routing says so. Ids derive from the job, so a retried job publishes
// each once.
func (s *Service) documentEvents(ctx context.Context, doc *document.Document, j *document.Job) ([]events.OutboxEntry, error) {
	payload := &indexerv1.DocumentIndexed{Document: doc.Proto(false)}
	var out []events.OutboxEntry
	e, err := outboxEvent(ctx, doc.Scope, "document", doc.ID, "indexed", doc.ID, ":"+j.ID, payload)
	if err != nil {
		return nil, err
	}
	out = append(out, e)
	if doc.Routing == indexerv1.Routing_ROUTING_LIFT_UP {
		e, err := outboxEvent(ctx, doc.Scope, "document", doc.ID, "lifted_up", doc.ID, ":"+j.ID, payload)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func (s *Service) supersede(ctx context.Context, j *document.Job, from indexerv1.ExtractionJobStatus, why string) error {
	j.Status, j.Error, j.EndTime = indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUPERSEDED, why, s.now()
	return s.writeJob(ctx, j, from)
}

// writeJob stores a job's state with its event, if its stored status is
// still from; otherwise (another worker moved it on, to its end in
// particular) it returns errJobMoved and leaves it as it is.
func (s *Service) writeJob(ctx context.Context, j *document.Job, from indexerv1.ExtractionJobStatus) error {
	ev, err := jobEvent(ctx, j)
	if err != nil {
		return err
	}
	ok, err := s.Docs.UpdateJob(ctx, j, from, ev)
	if err != nil {
		return err
	}
	if !ok {
		return errJobMoved
	}
	return nil
}

// entityNodes turns the entities extracts name, and more, into entity
// nodes, without duplicates.
func entityNodes(exs []extract.Extract, more ...extract.Entity) []graph.Node {
	byKey := map[string]graph.Node{}
	add := func(ent extract.Entity) {
		if _, ok := byKey[ent.Key()]; !ok {
			byKey[ent.Key()] = graph.Node{Key: ent.Key(), Kind: graph.KindEntity, Label: ent.Name, Props: map[string]any{"entity_kind": ent.Kind, "name": ent.Name}}
		}
	}
	for _, e := range exs {
		for _, ent := range extract.Entities(e) {
			add(ent)
		}
	}
	for _, ent := range more {
		add(ent)
	}
	out := make([]graph.Node, 0, len(byKey))
	for _, n := range byKey {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// digest summarises extracts for the base chunk, so a search for "BHP
// revenue" finds the document by its extract too.
func digest(exs []extract.Extract) string {
	var lines []string
	for _, e := range exs {
		keys := make([]string, 0, len(e.Data))
		for k, v := range e.Data {
			switch v.(type) {
			case string, float64, bool:
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %v", strings.ReplaceAll(k, "_", " "), e.Data[k]))
		}
		for _, ent := range extract.Entities(e) {
			parts = append(parts, ent.Name)
		}
		if s, ok := e.Data["summary"].(string); ok {
			parts = append(parts, s)
		}
		lines = append(lines, strings.ReplaceAll(e.Type, "_", " ")+": "+strings.Join(parts, "; "))
		if len(lines) == 20 {
			break
		}
	}
	return strings.Join(lines, "\n")
}
