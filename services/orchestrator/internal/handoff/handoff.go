// Package handoff takes over the documents intake lifts up: it consumes
// the indexer's document.lifted_up events (am.evt.<tenant>.document.<id>.lifted_up,
// payload indexerv1.DocumentIndexed) with a durable JetStream consumer and
// starts, for each, an analysis job whose input names the document.
//
// The job's id is the one the event names (Document.lifted_job_id, which
// the indexer records on the document in the write that routes it), so:
// the document shows the job before the job exists and after; every
// delivery of the event — redelivered after a crash between the submit
// and the ack, or published again by a re-run extraction — names the same
// job, and analysis.Engine.Submit of an id that exists starts nothing.
// The event waits in the indexer's outbox, then in the stream, until a
// submit succeeds: a crash on either side loses nothing.
package handoff

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/agentmesh/agentmesh/libs/events"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

// Durable is the consumer's name; the orchestrator's replicas share it.
const Durable = "orchestrator-lifted-up"

// FilterSubject selects every tenant's lifted_up events.
const FilterSubject = "am.evt.*.document.*.lifted_up"

// Submitter starts analyses; *analysis.Engine is one.
type Submitter interface {
	Submit(ctx context.Context, req analysis.SubmitRequest) (*analysis.Job, error)
}

// Spec is the durable consumer of lifted_up events.
func Spec() events.ConsumerSpec {
	return events.ConsumerSpec{
		Stream: events.StreamEvents, Durable: Durable, FilterSubject: FilterSubject,
		AckWait: 10 * time.Second, MaxDeliver: 10, Concurrency: 2,
		Backoff: []time.Duration{time.Second, 5 * time.Second, 30 * time.Second},
	}
}

// Handler hands lifted documents to analyses.
type Handler struct {
	sub Submitter
	log *slog.Logger
	// afterSubmit, when set, runs after a successful submit and before the
	// delivery is acknowledged; its error fails the delivery (tests use it
	// to stand for a crash between the two).
	afterSubmit func(job *analysis.Job) error
}

// New returns the handler submitting to sub.
func New(sub Submitter, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{sub: sub, log: log}
}

// testHook, when set, is called by every handler at two points of each
// delivery: "received" (the event decoded, nothing submitted yet) and
// "submitted" (the analysis started, the delivery not yet acknowledged),
// with the document's id and, at "submitted", the job's. Only this
// package's tests set it (export_test.go), in a child process that runs
// the whole orchestrator and is killed with SIGKILL at one of the points
// (net/http's testHook variables are the model): a field of Handler would
// not reach the handler orchestrator.Run builds.
var testHook func(point, documentID, jobID string)

// jobNamespace derives a job id from an event id, for lifted_up events
// of indexers that name no job.
var jobNamespace = uuid.MustParse("2b0c4f7e-8d3a-4e51-9a6c-1f7d2e9b5c30")

// Handle is the events.Handler: one analysis per lifted document version,
// whatever the number of deliveries.
func (h *Handler) Handle(ctx context.Context, d *events.Delivery) error {
	var payload indexerv1.DocumentIndexed
	if err := d.Event.GetPayload().UnmarshalTo(&payload); err != nil {
		return events.Permanent(fmt.Errorf("handoff: lifted_up payload: %w", err))
	}
	doc := payload.GetDocument()
	sc := doc.GetScope()
	if doc.GetId() == "" || sc.GetTenantId() == "" {
		return events.Permanent(errors.New("handoff: lifted_up event names no document or tenant"))
	}
	if testHook != nil {
		testHook("received", doc.GetId(), "")
	}
	id := doc.GetLiftedJobId()
	if id == "" {
		id = uuid.NewSHA1(jobNamespace, []byte(d.Event.GetId())).String()
	}
	job, err := h.sub.Submit(ctx, analysis.SubmitRequest{
		Tenant: sc.GetTenantId(), Project: sc.GetProjectId(), ID: id,
		Query: query(doc),
		Input: map[string]any{
			"document_id": doc.GetId(), "source_url": doc.GetSourceUrl(), "content_type": doc.GetContentType(),
			"routing_reason": doc.GetRoutingReason(), "lifted_up_event_id": d.Event.GetId(),
		},
	})
	var fe *analysis.FieldError
	if errors.As(err, &fe) {
		return events.Permanent(fmt.Errorf("handoff: document %s: %w", doc.GetId(), err))
	}
	if err != nil {
		return fmt.Errorf("handoff: document %s: %w", doc.GetId(), err)
	}
	if h.afterSubmit != nil {
		if err := h.afterSubmit(job); err != nil {
			return err
		}
	}
	if testHook != nil {
		testHook("submitted", doc.GetId(), job.ID)
	}
	h.log.Info("lifted document handed to an analysis", slog.String("document_id", doc.GetId()),
		slog.String("job_id", job.ID), slog.String("tenant", sc.GetTenantId()), slog.Uint64("delivery", d.NumDelivered))
	return nil
}

// query is the analysis question about a lifted document.
func query(doc *indexerv1.Document) string {
	title := doc.GetTitle()
	if title == "" {
		title = doc.GetSourceUrl()
	}
	q := fmt.Sprintf("Intake lifted up the %s document %q (id %s) because: %s. Analyse it and say what should be done.",
		strings.ReplaceAll(doc.GetContentType(), "_", " "), title, doc.GetId(), doc.GetRoutingReason())
	if utf8.RuneCountInString(q) > analysis.MaxQueryLength {
		q = string([]rune(q)[:analysis.MaxQueryLength])
	}
	return q
}

// Start consumes lifted_up events until ctx is done or the consumer is
// stopped.
func Start(ctx context.Context, bus *events.Bus, h *Handler) (*events.Consumer, error) {
	return bus.Consume(ctx, Spec(), h.Handle)
}
