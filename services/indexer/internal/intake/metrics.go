package intake

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The intake's counters, on the global meter provider installed when the
// service is built (as the classifier's checkpoint store makes its own): a
// process that runs the mesh again (the tests of agentmesh up) installs
// another, and its service counts there. Rates of ingests by outcome, and
// of interrupted ingests finished after the fact by what finished them,
// answer whether ingests fail and whether what they leave is picked up,
// and sum across replicas; a gauge of unindexed documents would need a
// count of the collection at every scrape.
type counters struct {
	ingests, finished metric.Int64Counter
}

func newCounters() counters {
	meter := otel.Meter("github.com/agentmesh/agentmesh/services/indexer/internal/intake")
	// Instrument creation fails only on an invalid name; the no-op
	// counters returned alongside are fine.
	ingests, _ := meter.Int64Counter("agentmesh.indexer.ingests",
		metric.WithUnit("{document}"),
		metric.WithDescription("Ingests by outcome: indexed (the content stored and indexed), unchanged (already indexed as is), failed (an error answered; a document saved before the failure is finished later: agentmesh.indexer.ingests.finished)."))
	finished, _ := meter.Int64Counter("agentmesh.indexer.ingests.finished",
		metric.WithUnit("{document}"),
		metric.WithDescription("Interrupted ingests finished after the fact, by what finished them: reconciliation (at start), retry (this process's own ingest that failed after its first write), sweep (with many writers, an ingest whose claim lapsed: its replica died or was stopped, or it failed and the sweep came before the retry)."))
	return counters{ingests: ingests, finished: finished}
}

// What finished an interrupted ingest (agentmesh.indexer.ingests.finished).
const (
	byReconciliation = "reconciliation"
	byRetry          = "retry"
	bySweep          = "sweep"
)

// countIngest counts an ingest's outcome.
func (s *Service) countIngest(ctx context.Context, res IngestResult, err error) {
	outcome := "indexed"
	switch {
	case err != nil:
		outcome = "failed"
	case res.Unchanged:
		outcome = "unchanged"
	}
	s.counters.ingests.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
}

// countFinished counts an interrupted ingest finished by by.
func (s *Service) countFinished(ctx context.Context, by string) {
	s.counters.finished.Add(ctx, 1, metric.WithAttributes(attribute.String("by", by)))
}
