package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// queueJob stores a queued job (with its "queued" event) and puts its work
// message on the queue. The message id is the job id, so queueing a job
// again (reconciliation) inside the duplicate window stores one message.
func (s *Service) queueJob(ctx context.Context, j *document.Job) error {
	ev, err := jobEvent(ctx, j)
	if err != nil {
		return err
	}
	if err := s.Docs.CreateJob(ctx, j, ev); err != nil {
		return fmt.Errorf("intake: create job: %w", err)
	}
	return s.publishJob(ctx, j)
}

func (s *Service) publishJob(ctx context.Context, j *document.Job) error {
	work, err := events.NewEvent(eventJobRequested, Source, j.Scope.Proto(), j.DocumentID,
		&indexerv1.ExtractionJob{Id: j.ID, Scope: j.Scope.Proto(), DocumentId: j.DocumentID, ContentHash: j.ContentHash})
	if err != nil {
		return err
	}
	work.Id = j.ID
	if _, err := s.Bus.Publish(ctx, events.WorkSubject(ExtractionQueue), work); err != nil {
		return fmt.Errorf("intake: queue extraction job: %w", err)
	}
	return nil
}

// HandleJob is the extraction work queue's handler. It is idempotent: a
// redelivered job that already ended is acknowledged; one whose document
// changed or went away is superseded; otherwise the extractors run again
// and their results replace the document's.
func (s *Service) HandleJob(ctx context.Context, d *events.Delivery) error {
	var msg indexerv1.ExtractionJob
	if err := d.Event.GetPayload().UnmarshalTo(&msg); err != nil {
		return events.Permanent(fmt.Errorf("intake: job message: %w", err))
	}
	sc := document.Scope{Tenant: msg.GetScope().GetTenantId(), Project: msg.GetScope().GetProjectId()}
	j, err := s.Docs.GetJob(ctx, sc, msg.GetId())
	if errors.Is(err, document.ErrNotFound) {
		return events.Permanent(fmt.Errorf("intake: job %s does not exist", msg.GetId()))
	}
	if err != nil {
		return err
	}
	if document.Terminal(j.Status) {
		return nil
	}
	j.Attempts = int(d.NumDelivered)
	err = s.runJob(ctx, j)
	if err != nil && int(d.NumDelivered) >= s.cfg.MaxDeliver && ctx.Err() == nil {
		j.Status, j.Error, j.EndTime = indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_FAILED, err.Error(), s.now()
		if werr := s.finishJob(ctx, j); werr != nil {
			err = errors.Join(err, werr)
		}
		_ = s.Docs.SetExtractionStatus(ctx, j.Scope, j.DocumentID, j.ID, j.Status)
	}
	return err
}

// runJob runs one attempt of a job.
func (s *Service) runJob(ctx context.Context, j *document.Job) error {
	log := s.Logger.With(slog.String("job_id", j.ID), slog.String("document_id", j.DocumentID), slog.String("tenant", j.Scope.Tenant))
	doc, err := s.Docs.GetDocument(ctx, j.Scope, j.DocumentID)
	if errors.Is(err, document.ErrNotFound) {
		return s.supersede(ctx, j, "the document was deleted")
	}
	if err != nil {
		return err
	}
	if doc.ContentHash != j.ContentHash || doc.ExtractionJobID != j.ID {
		return s.supersede(ctx, j, "the document changed; a newer job extracts it")
	}
	j.Status, j.StartTime, j.Error = indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_RUNNING, s.now(), ""
	if err := s.writeJob(ctx, j); err != nil {
		return err
	}
	if err := s.Docs.SetExtractionStatus(ctx, j.Scope, j.DocumentID, j.ID, j.Status); err != nil {
		return err
	}

	in := &extract.Document{ID: doc.ID, Title: doc.Title, SourceType: doc.SourceType, SourceURL: doc.SourceURL,
		ContentType: doc.ContentType, Text: doc.RawContent, VisionSummary: doc.VisionSummary}
	outcomes := extract.Run(ctx, in, s.Extractors, s.cfg.ExtractorTimeout)
	if ctx.Err() != nil {
		return ctx.Err() // shutting down: let another delivery run it
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

	// Entities into the graph, and the base chunk with the extract digest.
	if err := s.Graph.ReplaceMentions(ctx, graph.Scope(j.Scope), doc.ID, docKey(doc.ID), entityNodes(exs)); err != nil {
		return fmt.Errorf("intake: graph mentions: %w", err)
	}
	doc.Extracts = exs
	base := s.chunkDocument(doc, digest(exs))[:1]
	if err := s.embedChunks(ctx, base); err != nil {
		return err
	}
	if err := s.Docs.PutChunks(ctx, base); err != nil {
		return err
	}
	if err := s.Indexes.Write(hscope(j.Scope), func(tx hybrid.Tx) error { return tx.Add(toHybrid(base)) }); err != nil {
		return fmt.Errorf("intake: index base chunk: %w", err)
	}

	dec := routing.Decide(routing.Input{ContentType: doc.ContentType, Title: doc.Title, Text: doc.RawContent, Extracts: exs})
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
	ok, err := s.Docs.CompleteExtraction(ctx, j.Scope, doc.ID, doc.ContentHash, docstore.ExtractionResult{
		Extracts: exs, ExtractorVersions: versions, Routing: dec.Routing, RoutingReason: dec.Reason, Status: j.Status, JobID: j.ID,
	}, doc.UpdateTime, entries...)
	if err != nil {
		return err
	}
	if !ok {
		return s.supersede(ctx, j, "the document changed while extracting")
	}
	j.EndTime = s.now()
	log.Info("extraction finished", slog.String("status", jobEventNames[j.Status]), slog.Int("extracts", len(exs)),
		slog.String("routing", dec.Routing.String()))
	return s.finishJob(ctx, j)
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

func (s *Service) supersede(ctx context.Context, j *document.Job, why string) error {
	j.Status, j.Error, j.EndTime = indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUPERSEDED, why, s.now()
	return s.finishJob(ctx, j)
}

// writeJob stores a running job's state with its event.
func (s *Service) writeJob(ctx context.Context, j *document.Job) error {
	ev, err := jobEvent(ctx, j)
	if err != nil {
		return err
	}
	if _, err := s.Docs.UpdateJob(ctx, j, ev); err != nil {
		return err
	}
	return nil
}

// finishJob stores a job's final state with its event; a job that already
// ended (a concurrent delivery) is left as it is.
func (s *Service) finishJob(ctx context.Context, j *document.Job) error {
	return s.writeJob(ctx, j)
}

// entityNodes turns extracts into entity nodes, without duplicates.
func entityNodes(exs []extract.Extract) []graph.Node {
	byKey := map[string]graph.Node{}
	for _, e := range exs {
		for _, ent := range extract.Entities(e) {
			if _, ok := byKey[ent.Key()]; !ok {
				byKey[ent.Key()] = graph.Node{Key: ent.Key(), Kind: graph.KindEntity, Label: ent.Name, Props: map[string]any{"entity_kind": ent.Kind, "name": ent.Name}}
			}
		}
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
