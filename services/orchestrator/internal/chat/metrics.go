package chat

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agentmesh/agentmesh/libs/telemetry"
)

// metrics are the loop's OpenTelemetry instruments, on the global meter
// provider the service installs at start.
type metrics struct {
	overhead metric.Float64Histogram
	turns    metric.Float64Histogram
}

func newMetrics() *metrics {
	meter := otel.Meter("github.com/agentmesh/agentmesh/services/orchestrator/internal/chat")
	m := &metrics{}
	// Instrument creation only fails on invalid names; the no-op fallback
	// the API returns alongside the error is fine.
	m.overhead, _ = meter.Float64Histogram("agentmesh.orchestrator.loop.iteration.overhead",
		metric.WithUnit("s"),
		metric.WithDescription("Time of one loop iteration spent in the orchestrator itself (model and tool time excluded)"),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1))
	m.turns, _ = meter.Float64Histogram("agentmesh.orchestrator.turn.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Wall time of one chat turn, by strategy and outcome"),
		metric.WithExplicitBucketBoundaries(telemetry.SecondsBuckets...))
	return m
}

func (m *metrics) iteration(ctx context.Context, strategy string, s IterationStats) {
	m.overhead.Record(ctx, s.Overhead().Seconds(), metric.WithAttributes(attribute.String("strategy", strategy)))
}

func (m *metrics) turn(ctx context.Context, strategy, outcome string, d time.Duration) {
	m.turns.Record(ctx, d.Seconds(), metric.WithAttributes(attribute.String("strategy", strategy), attribute.String("outcome", outcome)))
}
