package checkpoint

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// newTransitions is the counter of runs entering each state, on the meter
// provider installed when the store is built. Counted where the checkpoint
// is written, so a state counts once however many replicas and retries
// took part; its label is the state machine's state, a fixed set.
func newTransitions() metric.Int64Counter {
	c, _ := otel.Meter("github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint").Int64Counter(
		"agentmesh.classifier.run.transitions",
		metric.WithUnit("{run}"),
		metric.WithDescription("Classification runs entering each state (checkpoints written), by state: AwaitingFetchApproval and AwaitingBatchApproval rising faster than Classifying and Saving are runs waiting for people."))
	// Instrument creation fails only on an invalid name; the no-op
	// counter returned alongside is fine.
	return c
}

// entered counts run entering state.
func (s *Store) entered(ctx context.Context, state statemachine.State) {
	s.transitions.Add(ctx, 1, metric.WithAttributes(attribute.String("state", string(state))))
}
