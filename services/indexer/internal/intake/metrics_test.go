package intake_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intake"
)

// counts reads the counter name of r as attribute key's value → count.
func counts(t *testing.T, r *sdkmetric.ManualReader, name, key string) map[string]int64 {
	t.Helper()
	return testkit.CounterSums(t, r, name, func(a *attribute.Set) string {
		v, _ := a.Value(attribute.Key(key))
		return v.AsString()
	})
}

// TestIngestsAreCounted: every ingest counts its outcome once (indexed,
// unchanged, failed), and each interrupted ingest finished after the fact
// counts what finished it: the process's own retry of its failed ingest,
// another replica's sweep, the start's reconciliation.
//
// Not parallel: the counters live on the global meter provider, which this
// test installs; the package's parallel tests wait until it has ended.
func TestIngestsAreCounted(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	ingests := func() map[string]int64 { return counts(t, reader, "agentmesh.indexer.ingests", "outcome") }
	finished := func() map[string]int64 { return counts(t, reader, "agentmesh.indexer.ingests.finished", "by") }
	delta := func(before, now map[string]int64) map[string]int64 {
		out := map[string]int64{}
		for k, v := range now {
			if d := v - before[k]; d != 0 {
				out[k] = d
			}
		}
		return out
	}
	ingestsBefore, finishedBefore := ingests(), finished()

	db := testkit.MongoDB(t) // many writers
	const ttl = 600 * time.Millisecond
	svc, docs := newService(t, db, intake.Config{JobLeaseTTL: ttl, IngestGrace: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sc := document.Scope{Tenant: "acme"}
	in := func(text string) intake.IngestInput {
		return intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, RawContent: text}
	}
	if _, err := svc.Ingest(ctx, in("Drain the queue before a deploy.")); err != nil {
		t.Fatal(err)
	}
	if res, err := svc.Ingest(ctx, in("Drain the queue before a deploy.")); err != nil || !res.Unchanged {
		t.Fatalf("the same content again: %+v, %v", res, err)
	}
	// Failed after its first write: the process's retry finishes it.
	killed := errors.New("failed after the first write")
	intake.SetAfterSave(svc, func(string) error { return killed })
	if _, err := svc.Ingest(ctx, in("Page the on-call when the ledger lags.")); !errors.Is(err, killed) {
		t.Fatalf("ingest: %v, want it failed", err)
	}
	intake.SetAfterSave(svc, nil)
	background(t, svc.FinishFailedIngests)
	testkit.Eventually(t, 15*time.Second, func() bool {
		return maps.Equal(delta(finishedBefore, finished()), map[string]int64{"retry": 1})
	}, "the failed ingest retried")
	// Another replica's, dead: the sweep finishes it.
	now := time.Now().UTC().Truncate(time.Millisecond)
	firstWrite(t, docs, sc, "swept", now, now.Add(ttl))
	background(t, svc.FinishDeadIngests)
	testkit.Eventually(t, 15*time.Second, func() bool {
		return maps.Equal(delta(finishedBefore, finished()), map[string]int64{"retry": 1, "sweep": 1})
	}, "the dead ingest swept")
	cancel()
	// Left by a process before this one: the start's reconciliation.
	firstWrite(t, docs, sc, "reconciled", now.Add(-time.Minute), now.Add(-time.Second))
	if err := svc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}

	if got, want := delta(ingestsBefore, ingests()), map[string]int64{"indexed": 1, "unchanged": 1, "failed": 1}; !maps.Equal(got, want) {
		t.Errorf("ingests by outcome: %v, want %v", got, want)
	}
	if got, want := delta(finishedBefore, finished()), map[string]int64{"retry": 1, "sweep": 1, "reconciliation": 1}; !maps.Equal(got, want) {
		t.Errorf("interrupted ingests finished, by what: %v, want %v", got, want)
	}
}
