// Package intakequeue takes intakes from other systems off the JetStream
// work queue am.work.indexer.intake: each message is the mesh's event
// envelope (agentmesh.common.v1.Event: id, type, source, scope, payload)
// whose payload is an agentmesh.indexer.v1.IngestDocumentRequest, and is
// ingested exactly as DocumentService.IngestDocument ingests it over gRPC
// (same contract checks, limits and pipeline).
//
// Delivery is at least once, the landing exactly once: the publisher's
// event id is the message's Nats-Msg-Id, so a message published twice
// inside the stream's duplicate window is stored once; and an ingest is
// idempotent by content (document id from scope and source URL, or the
// content hash; the same content indexed again is unchanged), so a
// redelivery — after a crash between the ingest and the acknowledgement —
// finds the document indexed and starts no second intake.
//
// A message that can never be ingested — not an envelope, a payload of
// another type, no tenant, a request the contract refuses — is
// dead-lettered at once (am.dlq.am.work.indexer.intake, the reason in the
// Am-Dlq-Reason header) and never retried; a failure that may pass (the
// database or a peer down) is retried with back-off, and dead-lettered
// after the last delivery.
package intakequeue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/agentmesh/libs/events"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// Queue is the work queue's name: its subject is am.work.indexer.intake.
const Queue = "indexer.intake"

// Durable is the consumer's name; the indexer's replicas share it.
const Durable = "indexer-intake"

// EventType is the envelope type publishers set (informational: the
// payload's type decides).
const EventType = "indexer.intake"

// Ingester ingests one request as IngestDocument does; *grpcapi.Documents
// is one.
type Ingester interface {
	IngestDocument(ctx context.Context, req *indexerv1.IngestDocumentRequest) (*indexerv1.IngestDocumentResponse, error)
}

// Spec is the durable consumer of the intake queue, running workers
// ingests at once.
func Spec(workers int) events.ConsumerSpec {
	return events.ConsumerSpec{
		Stream: events.StreamWork, Durable: Durable, FilterSubject: events.WorkSubject(Queue),
		AckWait: 30 * time.Second, MaxDeliver: events.DefaultMaxDeliver, Concurrency: max(workers, 1),
	}
}

// Handler ingests the queue's messages.
type Handler struct {
	docs Ingester
	log  *slog.Logger
}

// New returns the handler ingesting through docs.
func New(docs Ingester, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{docs: docs, log: log}
}

// Handle is the events.Handler of the queue.
func (h *Handler) Handle(ctx context.Context, d *events.Delivery) error {
	req, err := request(ctx, d)
	if err != nil {
		return events.Permanent(fmt.Errorf("intake %s: %w", d.Event.GetId(), err))
	}
	res, err := h.docs.IngestDocument(ctx, req)
	if err != nil {
		if refused(err) {
			return events.Permanent(fmt.Errorf("intake %s: %s", d.Event.GetId(), status.Convert(err).Message()))
		}
		return fmt.Errorf("intake %s: %w", d.Event.GetId(), err)
	}
	h.log.Info("intake from the work queue ingested", slog.String("event_id", d.Event.GetId()), slog.String("source", d.Event.GetSource()),
		slog.String("document_id", res.GetDocument().GetId()), slog.Bool("unchanged", res.GetUnchanged()),
		slog.String("extraction_job_id", res.GetExtractionJobId()), slog.Uint64("delivery", d.NumDelivered))
	return nil
}

// request is the delivery's ingest request, checked as the gRPC server
// checks one: the envelope's scope applies; a payload scope, if set,
// must be the same.
func request(ctx context.Context, d *events.Delivery) (*indexerv1.IngestDocumentRequest, error) {
	sc := d.Event.GetScope()
	if sc.GetTenantId() == "" {
		return nil, errors.New("the envelope's scope.tenant_id is required")
	}
	var req indexerv1.IngestDocumentRequest
	if err := d.Event.GetPayload().UnmarshalTo(&req); err != nil {
		return nil, fmt.Errorf("the payload must be a %s, not %q: %w", proto.MessageName(&req), d.Event.GetPayload().GetTypeUrl(), err)
	}
	switch {
	case req.GetScope() == nil:
		req.Scope = sc
	case !proto.Equal(req.GetScope(), sc):
		return nil, fmt.Errorf("the payload's scope %v differs from the envelope's %v", req.GetScope(), sc)
	}
	if err := grpcx.CheckRequest(ctx, &req); err != nil {
		return nil, errors.New(status.Convert(err).Message())
	}
	return &req, nil
}

// refused reports whether err says the request itself is wrong, so that
// no retry can help.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.PermissionDenied, codes.OutOfRange:
		return true
	}
	return false
}
