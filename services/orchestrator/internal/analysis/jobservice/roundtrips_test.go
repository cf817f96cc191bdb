package jobservice_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobservice"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobstore"
)

// TestAnalysisRoundTrips holds one analysis (planning, two tool jobs,
// synthesis, then the move to the archive) to its budget of database round
// trips, counted from submission until the tree is archived and the relay
// is done with it (the relay's periodic sweeps, once per 5 s, may fall in
// the window: they are not counted). Only exact-_id operations and
// inserts: none grows with the analyses stored. The test watches the database through a client of
// its own, so its polling is not counted.
func TestAnalysisRoundTrips(t *testing.T) {
	t.Parallel()
	budgets := map[bool]int{false: 100, true: 13} // many writers, single writer (measured 95-97 and 12: no removal written to a job archived by then, each claim written with its result, the tool jobs inserted together)
	eachWriterMode(t, func(t *testing.T, single bool) {
		e := newEnvCounted(t, single)
		e.scriptBHPPlan()
		e.scriptSynthesis(stockAnswer)
		// Recovery sweeps and checks for lapsed claims are not an
		// analysis's cost (and no job of it runs long enough to renew
		// its claim at the default ANALYSIS_CLAIM_TTL).
		e.cfg.SweepInterval, e.cfg.ClaimTTL = time.Hour, time.Hour
		e.start(analysis.Hooks{})
		observer := testkit.Uncounted(t, e.db)
		archive := observer.Collection(jobstore.ArchiveCollection)
		live := observer.Collection(jobstore.Collection)

		if single {
			// The relay's start-up sweep (a single writer's only one) is
			// not the analysis's: wait for it before counting.
			testkit.Eventually(t, 10*time.Second, func() bool {
				return slices.ContainsFunc(e.rt.NotExact(), isRelaySweep)
			}, "the relay's start-up sweep")
		}
		e.rt.Reset()
		root := e.submit("Analyse BHP for investment", "stock_analysis")
		testkit.Eventually(t, 20*time.Second, func() bool {
			n, err := archive.CountDocuments(context.Background(), bson.D{{Key: "_id", Value: root.GetId()}})
			m, err2 := live.CountDocuments(context.Background(), bson.D{})
			return err == nil && err2 == nil && n == 1 && m == 0
		}, "the analysis to be archived")
		// The relay's removals (of the jobs not gone by then) follow the
		// writes by its removal delay.
		time.Sleep(jobservice.RelayRemovalDelay)
		last := -1
		testkit.Eventually(t, 10*time.Second, func() bool {
			n := e.rt.Total()
			settled := n == last
			last = n
			time.Sleep(600 * time.Millisecond)
			return settled
		}, "round trips to settle")
		// The relay's periodic sweeps (a find on pending outbox entries,
		// every 5 s) are not the analysis's: how many fall in the window
		// depends on how long the analysis took on a busy machine.
		sweeps := 0
		for _, q := range e.rt.NotExact() {
			if isRelaySweep(q) {
				sweeps++
			}
		}
		n := e.rt.Total() - sweeps
		t.Logf("one analysis (2 tools) made %d round trips, besides %d of the relay's sweeps: %s", n, sweeps, e.rt)
		if n > budgets[single] {
			t.Errorf("one analysis made %d round trips (besides %d of the relay's sweeps), budget %d: %s", n, sweeps, budgets[single], e.rt)
		}
		// FerretDB reads and parses the whole collection for any other
		// filter, {_id: {$in: ids}} included.
		if scans := e.rt.NotExact(); single && len(scans) > 0 {
			t.Errorf("single writer: statements not by exact _id: %q", scans)
		}
	})
}

// isRelaySweep reports whether statement q is an outbox relay's sweep: a
// find of the documents with pending outbox entries.
func isRelaySweep(q string) bool { return strings.Contains(q, `"outbox.0"`) }
