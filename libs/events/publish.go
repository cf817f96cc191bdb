package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

// Message headers set or read by this package.
const (
	// HeaderMsgID is the JetStream deduplication header; it carries the
	// event id.
	HeaderMsgID = jetstream.MsgIDHeader
	// HeaderContentType names the encoding of the message body.
	HeaderContentType = "Content-Type"
	// ContentTypeProtobuf is the content type of a binary [commonv1.Event].
	ContentTypeProtobuf = "application/protobuf"
)

// Publish retry tuning.
const (
	// defaultPublishTimeout bounds a publish whose ctx has no deadline.
	defaultPublishTimeout = 30 * time.Second
	// publishAttemptTimeout bounds one request/ack round trip.
	publishAttemptTimeout = 5 * time.Second
	publishBackoffMin     = 25 * time.Millisecond
	publishBackoffMax     = time.Second
)

// instrumentationName names this package's tracer.
const instrumentationName = "github.com/agentmesh/agentmesh/libs/events"

func tracer() trace.Tracer { return otel.GetTracerProvider().Tracer(instrumentationName) }

// Publish stores ev in the JetStream stream bound to subject and returns its
// stream sequence. It sets ev.Subject, encodes the envelope as protobuf, sets
// Nats-Msg-Id to ev.Id and injects the W3C trace context of ctx (through
// otel.GetTextMapPropagator) into the headers.
//
// Publish waits for the stream's acknowledgement and retries transient
// failures (no stream responding, timeouts, reconnects) with a small
// exponential backoff until ctx is done, or for 30s if ctx has no deadline.
// Publishing an event whose id the stream already stored inside the duplicate
// window succeeds and returns the sequence of the stored copy. Because a
// subject no stream listens on looks like a transient failure, such a publish
// fails only when ctx (or the 30s default) runs out.
func (b *Bus) Publish(ctx context.Context, subject string, ev *commonv1.Event) (uint64, error) {
	data, err := marshalEvent(subject, ev)
	if err != nil {
		return 0, err
	}
	ctx, span := tracer().Start(ctx, "events.publish",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", subject),
			attribute.String("messaging.message.id", ev.GetId()),
			attribute.String("agentmesh.event.type", ev.GetType()),
		))
	defer span.End()

	h := nats.Header{}
	h.Set(HeaderMsgID, ev.GetId())
	h.Set(HeaderContentType, ContentTypeProtobuf)
	otel.GetTextMapPropagator().Inject(ctx, headerCarrier(h))

	ack, err := b.publishMsg(ctx, &nats.Msg{Subject: subject, Data: data, Header: h})
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return 0, fmt.Errorf("events: publish %s to %s: %w", ev.GetId(), subject, err)
	}
	span.SetAttributes(attribute.Int64("messaging.nats.stream_sequence", int64(ack.Sequence)),
		attribute.Bool("messaging.nats.duplicate", ack.Duplicate))
	return ack.Sequence, nil
}

// publishMsg publishes msg with JetStream and waits for the ack, retrying
// transient failures until ctx is done. A duplicate ack is a success.
func (b *Bus) publishMsg(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultPublishTimeout)
		defer cancel()
	}
	backoff := publishBackoffMin
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, publishAttemptTimeout)
		ack, err := b.js.PublishMsg(actx, msg, jetstream.WithRetryAttempts(0))
		cancel()
		if err == nil {
			if ack.Duplicate {
				b.logger.Debug("duplicate publish ignored by stream",
					slog.String("subject", msg.Subject), slog.String("msg_id", msg.Header.Get(HeaderMsgID)),
					slog.Uint64("seq", ack.Sequence))
			}
			return ack, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (after %d attempts, last error: %w)", ctx.Err(), attempt, err)
		}
		if !transientPublishError(err) {
			return nil, err
		}
		b.logger.Debug("publish failed, retrying", slog.String("subject", msg.Subject),
			slog.Int("attempt", attempt), slog.Any("error", err))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (after %d attempts, last error: %w)", ctx.Err(), attempt, err)
		case <-t.C:
		}
		backoff = min(2*backoff, publishBackoffMax)
	}
}

// transientPublishError reports whether a publish may succeed if retried.
func transientPublishError(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected)
}
