package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// Defaults applied by [Bus.Consume] to zero fields of [ConsumerSpec].
const (
	// DefaultMaxDeliver is the default [ConsumerSpec.MaxDeliver].
	DefaultMaxDeliver = 5
	// DefaultAckWait is the default [ConsumerSpec.AckWait].
	DefaultAckWait = 30 * time.Second
	// DefaultConcurrency is the default [ConsumerSpec.Concurrency].
	DefaultConcurrency = 1
)

// defaultBackoff is the redelivery schedule used when ConsumerSpec.Backoff
// is empty.
var defaultBackoff = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second}

// ackTimeout bounds acknowledgements and dead-letter publishes, which run
// even while the consumer's context is being cancelled.
const ackTimeout = 10 * time.Second

// Pulling. A worker asks for one message when it is free and waits for it
// up to pullWait; after a failed pull it waits pullRetryMin, doubling up to
// pullRetryMax, before the next.
const (
	pullWait     = 30 * time.Second
	pullRetryMin = 100 * time.Millisecond
	pullRetryMax = 5 * time.Second
)

// ConsumerSpec configures a durable consumer started by [Bus.Consume].
type ConsumerSpec struct {
	// Stream is the stream to consume, e.g. [StreamEvents]. Required.
	Stream string
	// Durable names the consumer; instances sharing the name share the work.
	// Required.
	Durable string
	// FilterSubject restricts the consumer to matching subjects; empty
	// means every subject of the stream.
	FilterSubject string
	// MaxDeliver is how many times a message is handed to the handler before
	// it is dead-lettered. Zero means [DefaultMaxDeliver].
	MaxDeliver int
	// AckWait is how long the server waits for an ack before redelivering.
	// While a handler runs, the consumer extends it every AckWait/2, so a
	// slow handler is not redelivered concurrently; and a consumer takes a
	// message only when a handler is free for it, so no message waits in a
	// client's buffer with its ack wait running. AckWait therefore need not
	// cover the handler's work: it is how soon the message of a handler
	// that died (its process killed) is delivered again, and can be a few
	// seconds. Zero means [DefaultAckWait].
	AckWait time.Duration
	// Backoff is the delay before redelivering after the n-th failed
	// delivery (Backoff[n-1]; the last value repeats). Empty means 1s, 5s,
	// 30s.
	Backoff []time.Duration
	// MaxAckPending caps unacknowledged messages across all instances of the
	// consumer. Zero means the server default (1000).
	MaxAckPending int
	// Concurrency is how many handler calls one [Consumer] runs at once.
	// Zero means [DefaultConcurrency]. Messages handled concurrently may
	// complete out of order.
	Concurrency int
}

// withDefaults validates s and fills in defaults.
func (s ConsumerSpec) withDefaults() (ConsumerSpec, error) {
	if s.Stream == "" {
		return s, errors.New("events: consumer spec: empty stream")
	}
	if s.Durable == "" {
		return s, errors.New("events: consumer spec: empty durable name")
	}
	if s.MaxDeliver < 0 || s.AckWait < 0 || s.MaxAckPending < 0 || s.Concurrency < 0 {
		return s, errors.New("events: consumer spec: negative limit")
	}
	for _, d := range s.Backoff {
		if d < 0 {
			return s, errors.New("events: consumer spec: negative backoff")
		}
	}
	if s.MaxDeliver == 0 {
		s.MaxDeliver = DefaultMaxDeliver
	}
	if s.AckWait == 0 {
		s.AckWait = DefaultAckWait
	}
	if len(s.Backoff) == 0 {
		s.Backoff = defaultBackoff
	}
	if s.Concurrency == 0 {
		s.Concurrency = DefaultConcurrency
	}
	return s, nil
}

// backoff returns the redelivery delay after delivery number n (1-based).
func (s ConsumerSpec) backoff(n uint64) time.Duration {
	i := int(min(n, uint64(len(s.Backoff)))) - 1
	return s.Backoff[max(i, 0)]
}

// Handler processes one delivery. Returning nil acknowledges the message;
// returning an error redelivers it after the spec's backoff, or dead-letters
// it if the error is [Permanent] or this was the last allowed delivery. A
// panic counts as an error. Handlers must be idempotent: a message can be
// delivered more than once.
type Handler func(ctx context.Context, d *Delivery) error

// Delivery is one message handed to a [Handler].
type Delivery struct {
	// Event is the decoded envelope.
	Event *commonv1.Event
	// Subject is the subject the message was published on.
	Subject string
	// Stream and Consumer name where the message came from.
	Stream, Consumer string
	// Sequence is the message's stream sequence.
	Sequence uint64
	// NumDelivered counts deliveries of this message, 1 on the first.
	NumDelivered uint64
	// Header holds the message headers. Treat it as read-only.
	Header nats.Header

	ctx context.Context
}

// Context returns the context the handler is called with: the consumer's
// context carrying the trace context extracted from the message headers
// and the event's scope (grpcx.WithScope).
func (d *Delivery) Context() context.Context { return d.ctx }

// permanentError marks a handler failure that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so that a [Handler] returning it dead-letters the
// message at once instead of retrying. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, came from
// [Permanent].
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// Consumer is a running durable consumer created by [Bus.Consume].
type Consumer struct {
	bus     *Bus
	spec    ConsumerSpec
	handler Handler
	logger  *slog.Logger
	ctx     context.Context // base context of handler calls
	cons    jetstream.Consumer

	stopOnce  sync.Once
	pulling   context.Context    // cancelled when fetching stops: ends pending pulls
	stopPulls context.CancelFunc // cancels pulling
	done      chan struct{}      // closed when every worker has returned

	mu  sync.Mutex
	err error // guarded by mu: the error that ended fetching, if any
}

// Consume creates (or updates) the durable pull consumer described by spec
// and starts handling its messages with handler, spec.Concurrency at a time.
// It returns once the consumer exists; handling continues in the background
// until ctx is done or [Consumer.Stop] is called.
//
// The consumer acknowledges explicitly and starts, when first created, at the
// beginning of the stream. Outcomes per message:
//   - handler returns nil: the message is acknowledged;
//   - handler returns an error (or panics): the message is redelivered after
//     spec.Backoff[NumDelivered-1];
//   - the error is [Permanent], or delivery spec.MaxDeliver failed, or the
//     message is not a decodable [commonv1.Event]: the message, its headers
//     and Am-Dlq-* headers describing the failure are published to
//     [DeadLetterSubject] of its subject, then the original is terminated;
//   - handler fails after ctx is done (shutdown): the message is released
//     for immediate redelivery, without counting towards dead-lettering.
//
// The server allows one delivery beyond spec.MaxDeliver: a message whose
// last handling never completed (a crash) is dead-lettered on arrival.
func (b *Bus) Consume(ctx context.Context, spec ConsumerSpec, handler Handler) (*Consumer, error) {
	if handler == nil {
		return nil, errors.New("events: consume: nil handler")
	}
	spec, err := spec.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       spec.Durable,
		FilterSubject: spec.FilterSubject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       spec.AckWait,
		MaxDeliver:    spec.MaxDeliver + 1,
		MaxAckPending: spec.MaxAckPending,
	}
	cons, err := b.js.CreateOrUpdateConsumer(ctx, spec.Stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("events: consume %s/%s: %w", spec.Stream, spec.Durable, err)
	}
	pulling, stopPulls := context.WithCancel(context.WithoutCancel(ctx))
	c := &Consumer{
		bus:       b,
		spec:      spec,
		handler:   handler,
		logger:    b.logger.With(slog.String("stream", spec.Stream), slog.String("consumer", spec.Durable)),
		ctx:       ctx,
		cons:      cons,
		pulling:   pulling,
		stopPulls: stopPulls,
		done:      make(chan struct{}),
	}
	stopOnCancel := context.AfterFunc(ctx, c.stopFetching)
	unobserve := c.observe()
	var wg sync.WaitGroup
	for range spec.Concurrency {
		wg.Go(c.work)
	}
	go func() {
		defer close(c.done)
		defer stopOnCancel()
		defer unobserve()
		wg.Wait()
	}()
	return c, nil
}

// work is one worker: it pulls a message only when it is free to handle
// it, handles it, and pulls the next, until fetching stops. Pulling one
// message per free worker, rather than a batch kept in a buffer, means no
// message sits fetched but unhandled while its ack wait runs out — with a
// short AckWait it would be redelivered again and again behind a long
// handler, and dead-lettered once its deliveries ran out.
func (c *Consumer) work() {
	retry := time.Duration(0)
	for {
		msg, err := c.next()
		if c.pulling.Err() != nil {
			if msg != nil {
				// Stopped while it arrived: release it so another
				// instance takes it now.
				_ = msg.Nak()
			}
			return
		}
		switch {
		case err == nil:
			retry = 0
			c.handle(msg)
			continue
		case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
			continue // no message within pullWait: ask again
		}
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		if c.deleted(err) {
			c.logger.Error("consumer deleted on the server; stopping", slog.Any("error", err))
			c.stopFetching()
			return
		}
		retry = min(max(2*retry, pullRetryMin), pullRetryMax)
		c.logger.Warn("consumer fetch failed; retrying", slog.Duration("delay", retry), slog.Any("error", err))
		t := time.NewTimer(retry)
		select {
		case <-c.pulling.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// next pulls one message, waiting up to pullWait for it.
func (c *Consumer) next() (jetstream.Msg, error) {
	ctx, cancel := context.WithTimeout(c.pulling, pullWait)
	defer cancel()
	return c.cons.Next(jetstream.FetchContext(ctx))
}

// deleted reports whether err, a failed pull, means the consumer no longer
// exists on the server.
func (c *Consumer) deleted(err error) bool {
	if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
		return true
	}
	ctx, cancel := context.WithTimeout(c.pulling, ackTimeout)
	defer cancel()
	_, ierr := c.cons.Info(ctx)
	return errors.Is(ierr, jetstream.ErrConsumerNotFound)
}

// stopFetching stops pulling new messages; it does not wait.
func (c *Consumer) stopFetching() {
	c.stopOnce.Do(c.stopPulls)
}

// Stop stops fetching messages and waits until in-flight handler calls have
// returned. Handlers are not cancelled by Stop; cancel the ctx given to
// [Bus.Consume] for that. A message that arrives as fetching stops is
// released for redelivery. Stop is safe to call more than once and
// concurrently.
func (c *Consumer) Stop() {
	c.stopFetching()
	<-c.done
}

// Done returns a channel closed when the consumer has stopped: after
// [Consumer.Stop], after the context given to [Bus.Consume] is done, or after
// the server deleted the consumer; in-flight handlers have returned by then.
func (c *Consumer) Done() <-chan struct{} { return c.done }

// Err returns the last fetch error, such as the consumer having been deleted
// on the server, or nil.
func (c *Consumer) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// handle runs the handler for one message and settles it.
func (c *Consumer) handle(msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		c.logger.Error("message without jetstream metadata", slog.String("subject", msg.Subject()), slog.Any("error", err))
		_ = msg.Term()
		return
	}
	log := c.logger.With(slog.String("subject", msg.Subject()), slog.Uint64("seq", meta.Sequence.Stream),
		slog.Uint64("delivered", meta.NumDelivered))

	if meta.NumDelivered > uint64(c.spec.MaxDeliver) {
		c.deadLetter(msg, meta, log, fmt.Sprintf("delivery limit %d exceeded without the handler completing", c.spec.MaxDeliver))
		return
	}
	ev, err := decodeEvent(msg.Data())
	if err != nil {
		c.deadLetter(msg, meta, log, err.Error())
		return
	}
	log = log.With(slog.String("event_id", ev.GetId()), slog.String("event_type", ev.GetType()))

	hdr := msg.Headers()
	ctx := otel.GetTextMapPropagator().Extract(c.ctx, headerCarrier(hdr))
	ctx, span := tracer().Start(ctx, "events.process",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", msg.Subject()),
			attribute.String("messaging.consumer.group.name", c.spec.Durable),
			attribute.String("messaging.message.id", ev.GetId()),
			attribute.Int64("messaging.nats.stream_sequence", int64(meta.Sequence.Stream)),
			attribute.Int64("messaging.nats.num_delivered", int64(meta.NumDelivered)),
		))
	defer span.End()
	// The work is done for the event's scope: model calls made while
	// handling it name its tenant (grpcx.WithScope).
	ctx = grpcx.WithScope(ctx, ev.GetScope())

	d := &Delivery{
		Event:        ev,
		Subject:      msg.Subject(),
		Stream:       meta.Stream,
		Consumer:     meta.Consumer,
		Sequence:     meta.Sequence.Stream,
		NumDelivered: meta.NumDelivered,
		Header:       hdr,
		ctx:          ctx,
	}
	stopHeartbeat := c.keepAlive(msg)
	err = c.call(ctx, d)
	stopHeartbeat()

	switch {
	case err == nil:
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
		defer cancel()
		if err := msg.DoubleAck(actx); err != nil {
			log.Warn("ack failed; message will be redelivered", slog.Any("error", err))
		}
		return
	case c.ctx.Err() != nil:
		span.RecordError(err)
		log.Info("handler failed during shutdown; releasing message", slog.Any("error", err))
		_ = msg.Nak()
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	switch {
	case IsPermanent(err):
		c.deadLetter(msg, meta, log, "permanent: "+err.Error())
	case meta.NumDelivered >= uint64(c.spec.MaxDeliver):
		c.deadLetter(msg, meta, log, fmt.Sprintf("failed %d deliveries: %v", meta.NumDelivered, err))
	default:
		delay := c.spec.backoff(meta.NumDelivered)
		log.Warn("handler failed; redelivering", slog.Duration("delay", delay), slog.Any("error", err))
		if err := msg.NakWithDelay(delay); err != nil {
			log.Warn("nak failed; message will be redelivered after ack wait", slog.Any("error", err))
		}
	}
}

// call runs the handler, turning a panic into an error.
func (c *Consumer) call(ctx context.Context, d *Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.logger.Error("handler panicked", slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
			err = fmt.Errorf("events: handler panic: %v", r)
		}
	}()
	return c.handler(ctx, d)
}

// keepAlive tells the server every AckWait/2 that msg is still being worked
// on, until the returned function is called.
func (c *Consumer) keepAlive(msg jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(max(c.spec.AckWait/2, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}
