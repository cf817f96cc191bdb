package intake

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
)

// ErrNoEventBus means the service was built without Deps.Events, so it
// cannot read intake events back.
var ErrNoEventBus = errors.New("intake: no event bus to watch intakes with")

// ErrEventsExpired means a finished intake's events are no longer in
// AM_EVENTS (it keeps them events.EventsMaxAge): GetDocument still has
// the pipeline.
var ErrEventsExpired = errors.New("intake: the intake's events are no longer kept")

// errWatchEnded ends a watch's replay after the finished event.
var errWatchEnded = errors.New("intake watch ended")

// expiredWait is how long a watch of an intake finished before it began
// waits for the finished event when the stream does not hold it: the
// outbox relay publishes it within milliseconds of the write, so past
// this it has expired from the stream.
const expiredWait = 10 * time.Second

// Watch calls fn for each intake.* event of document id's current intake
// (the pipeline's correlation id), in stream order, after stream sequence
// afterSeq (0: from the intake's first event), then live, and returns nil
// after the finished event. Events of the document's earlier intakes are
// skipped. It returns document.ErrNotFound when the scope holds no such
// document, ErrEventsExpired for a finished intake whose events the
// stream no longer keeps; otherwise it runs until ctx ends or fn fails.
// The replay's consumer is deleted when Watch returns (events.Bus.Replay).
func (s *Service) Watch(ctx context.Context, sc document.Scope, id string, afterSeq uint64,
	fn func(seq uint64, name string, ev *indexerv1.IntakePhaseEvent) error,
) error {
	if s.Events == nil {
		return ErrNoEventBus
	}
	doc, err := s.Docs.GetDocument(ctx, sc, id)
	if err != nil {
		return err
	}
	correlation := doc.Pipeline.GetCorrelationId()
	if correlation == "" {
		return fmt.Errorf("%w: the document has no pipeline (ingested before it existed)", ErrEventsExpired)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if doc.Pipeline.GetFinished() {
		seq, found, err := s.finishedSequence(ctx, doc, correlation)
		switch {
		case err != nil:
			return err
		case found && seq <= afterSeq:
			return nil // the client already holds the last event
		case !found:
			// Either not relayed yet or expired: give the relay its moment.
			t := time.AfterFunc(expiredWait, func() { cancel(ErrEventsExpired) })
			defer t.Stop()
		}
	}
	filter := events.EntityEventsSubject(sc.Tenant, intakeDomain, id)
	err = s.Events.Replay(rctx, events.StreamEvents, filter, afterSeq, func(seq uint64, env *commonv1.Event) error {
		if env.GetCorrelationId() != correlation || env.GetScope().GetProjectId() != sc.Project {
			return nil // an earlier intake's, or another project's document of that id
		}
		var ev indexerv1.IntakePhaseEvent
		if err := env.GetPayload().UnmarshalTo(&ev); err != nil {
			return nil
		}
		name := strings.TrimPrefix(env.GetType(), intakeDomain+".")
		if err := fn(seq, name, &ev); err != nil {
			return err
		}
		if name == EventIntakeFinished {
			return errWatchEnded
		}
		return nil
	})
	switch cause := context.Cause(rctx); {
	case errors.Is(err, errWatchEnded):
		return nil
	case errors.Is(cause, ErrEventsExpired) && ctx.Err() == nil:
		return cause
	}
	return err
}

// finishedSequence is the stream sequence of the finished event of doc's
// intake correlation, if the stream holds it.
func (s *Service) finishedSequence(ctx context.Context, doc *document.Document, correlation string) (uint64, bool, error) {
	stream, err := s.Events.JetStream().Stream(ctx, events.StreamEvents)
	if err != nil {
		return 0, false, fmt.Errorf("intake: watch: %w", err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, events.EventSubject(doc.Scope.Tenant, intakeDomain, doc.ID, EventIntakeFinished))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("intake: watch: %w", err)
	}
	var env commonv1.Event
	if err := proto.Unmarshal(msg.Data, &env); err != nil || env.GetCorrelationId() != correlation {
		return 0, false, nil // an earlier intake's end
	}
	return msg.Sequence, true, nil
}
