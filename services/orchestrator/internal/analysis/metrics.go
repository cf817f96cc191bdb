package analysis

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// newJobTransitions is the counter of jobs entering each status, by type,
// on the global meter provider installed when the engine is built (as the
// classifier's checkpoint store makes its own): a process that runs the
// mesh again (the tests of agentmesh up) installs another, and its engine
// counts there. A counter of transitions
// rather than a gauge of jobs per status: a gauge would need a count of
// the collection at every scrape (a full scan on FerretDB) or a running
// total that every replica would have to agree on; rates of transitions
// answer the same questions (jobs started, failing, waiting) and sum
// across replicas.
func newJobTransitions() metric.Int64Counter {
	c, _ := otel.Meter("github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis").Int64Counter(
		"agentmesh.orchestrator.job.transitions",
		metric.WithUnit("{job}"),
		metric.WithDescription("Analysis jobs entering each status (pending at creation, running, waiting_for_children, complete, failed, cancelled), by type, counted once per stored change."))
	// Instrument creation fails only on an invalid name; the no-op
	// counter returned alongside is fine.
	return c
}

// entered counts j entering its status. Called after the write that
// stored the change succeeded, and only when the status changed, so a
// redelivered work item, a retried write or another replica's attempt at
// the same change counts nothing.
func (e *Engine) entered(ctx context.Context, j *Job) {
	e.transitions.Add(ctx, 1, metric.WithAttributes(attribute.String("type", string(j.Type)), attribute.String("to", string(j.Status))))
}
