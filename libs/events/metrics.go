package events

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/telemetry"
)

// consumerInfoTimeout bounds the JetStream request that a scrape makes per
// consumer, so a slow or absent server delays /metrics by at most this.
const consumerInfoTimeout = 2 * time.Second

// instruments are the bus's metrics, on the meter provider installed when
// it first needs them. Their labels are stream, consumer and collection
// names, fixed by the code, so their cardinality is bounded.
type instruments struct {
	meter       metric.Meter
	pending     metric.Int64ObservableGauge
	ackPending  metric.Int64ObservableGauge
	redelivered metric.Int64ObservableGauge
	deadLetters metric.Int64Counter
	relayLag    metric.Float64Histogram
}

// meters returns b's instruments, creating them on first use from the
// global meter provider of that moment (one per process in production;
// each `agentmesh up` in a test process installs its own, so they are not
// cached across buses).
func (b *Bus) meters() *instruments {
	b.metricsOnce.Do(func() {
		m := otel.Meter("github.com/agentmesh/agentmesh/libs/events")
		in := &instruments{meter: m}
		// Instrument creation fails only on invalid names; the no-op
		// instrument returned alongside is fine. Buses of one process share
		// a provider, which hands them the same instruments.
		in.pending, _ = m.Int64ObservableGauge("agentmesh.events.consumer.pending",
			metric.WithUnit("{message}"),
			metric.WithDescription("Messages of a durable consumer's stream not yet delivered to it: a work queue's depth (JetStream consumer info num_pending), by stream and consumer."))
		in.ackPending, _ = m.Int64ObservableGauge("agentmesh.events.consumer.ack_pending",
			metric.WithUnit("{message}"),
			metric.WithDescription("Messages delivered to a durable consumer and not yet acknowledged: work in progress (num_ack_pending), by stream and consumer."))
		in.redelivered, _ = m.Int64ObservableGauge("agentmesh.events.consumer.redelivered",
			metric.WithUnit("{message}"),
			metric.WithDescription("Unacknowledged messages of a durable consumer delivered more than once (num_redelivered), by stream and consumer."))
		in.deadLetters, _ = m.Int64Counter("agentmesh.events.dead_letters",
			metric.WithUnit("{message}"),
			metric.WithDescription("Messages a consumer gave up on and copied to the dead-letter stream, by stream and consumer."))
		in.relayLag, _ = m.Float64Histogram("agentmesh.events.outbox.relay.lag",
			metric.WithUnit("s"),
			metric.WithDescription("Time from an event's creation (written to a document's outbox) to its publication by the relay, by collection."),
			metric.WithExplicitBucketBoundaries(telemetry.SecondsBuckets...))
		b.metrics = in
	})
	return b.metrics
}

// observe registers c's consumer-info gauges until unregister is called.
func (c *Consumer) observe() (unregister func()) {
	in := c.bus.meters()
	attrs := metric.WithAttributes(attribute.String("stream", c.spec.Stream), attribute.String("consumer", c.spec.Durable))
	reg, err := in.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, consumerInfoTimeout)
		defer cancel()
		info, err := c.cons.Info(ctx)
		if err != nil {
			return nil // no figure beats a stale one; the consumer logs outages
		}
		o.ObserveInt64(in.pending, int64(info.NumPending), attrs)
		o.ObserveInt64(in.ackPending, int64(info.NumAckPending), attrs)
		o.ObserveInt64(in.redelivered, int64(info.NumRedelivered), attrs)
		return nil
	}, in.pending, in.ackPending, in.redelivered)
	if err != nil {
		c.logger.Warn("consumer metrics not registered", "error", err)
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}

// deadLettered counts one message c dead-lettered.
func (c *Consumer) deadLettered(ctx context.Context) {
	c.bus.meters().deadLetters.Add(ctx, 1, metric.WithAttributes(attribute.String("stream", c.spec.Stream), attribute.String("consumer", c.spec.Durable)))
}

// relayed records how long the event in e waited between its creation and
// its publication by r.
func (r *Relay) relayed(ctx context.Context, e OutboxEntry) {
	var ev commonv1.Event
	// Only the envelope's time is needed; its payload stays undecoded bytes.
	if proto.Unmarshal(e.Data, &ev) != nil || ev.GetTime() == nil {
		return
	}
	lag := time.Since(ev.GetTime().AsTime()).Seconds()
	r.bus.meters().relayLag.Record(ctx, max(lag, 0), metric.WithAttributes(attribute.String("collection", r.coll.Name())))
}
