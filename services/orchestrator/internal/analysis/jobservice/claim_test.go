package jobservice_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobstore"
)

// A job that runs many claim TTLs (tool calls held 5 s, claims of 1.5 s,
// renewed every 0.5 s: one may be late by a second on a loaded machine)
// keeps its claim by renewing it: no check for lapsed claims — of this
// engine or, with many writers, of a second replica — takes it over, and
// each tool runs once.
func TestLongJobKeepsItsClaim(t *testing.T) {
	t.Parallel()
	eachWriterMode(t, func(t *testing.T, single bool) {
		e := newEnvIn(t, single)
		e.scriptBHPPlan()
		e.scriptSynthesis(stockAnswer)
		e.cfg.ClaimTTL, e.cfg.ToolTimeout = 1500*time.Millisecond, 20*time.Second
		// Requests wait for a third that never comes, up to the market's
		// 5 s limit, and then answer.
		e.market.set(func(m *market) { m.barrier = 3 })
		e.start(analysis.Hooks{})
		if !single {
			e.start(analysis.Hooks{}) // a second replica checking for lapsed claims
		}
		root := e.submit("Analyse BHP for investment", "stock_analysis")
		final := e.waitStatus(root.GetId(), complete, 40*time.Second)
		for _, j := range childrenOf(final, typeTool) {
			took := j.GetEndTime().AsTime().Sub(j.GetStartTime().AsTime())
			if j.GetStatus() != complete || j.GetAttempts() != 1 || took < 4*time.Second {
				t.Errorf("tool %s: %s after %d attempts, ran %s (want complete, 1 attempt, over 2 claim TTLs)",
					j.GetTitle(), j.GetStatus(), j.GetAttempts(), took)
			}
		}
		for k, n := range e.market.snapshot() {
			if n != 1 {
				t.Errorf("%s executed %d times, want once", k, n)
			}
		}
	})
}

// A worker whose claim was taken from it — here written over in the
// database, as a replica taking over a lapsed claim would — stops its
// execution at its next renewal and records nothing.
func TestLostClaimStopsTheExecution(t *testing.T) {
	t.Parallel()
	e := newEnvIn(t, false) // the test writes to the database beside the service
	e.scriptBHPPlan()
	e.scriptSynthesis(stockAnswer)
	e.cfg.ClaimTTL, e.cfg.ToolTimeout = time.Second, time.Minute
	e.market.set(func(m *market) { m.hang = true })
	e.start(analysis.Hooks{})
	root := e.submit("Analyse BHP for investment", "stock_analysis")
	testkit.Eventually(t, 20*time.Second, func() bool { return e.market.inFlight() == 2 }, "both tool calls to be in flight")
	tool := childrenOf(e.get(root.GetId()), typeTool)[0]

	until := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	res, err := e.db.Collection(jobstore.Collection).UpdateOne(context.Background(), bson.D{{Key: "_id", Value: tool.GetId()}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lease_owner", Value: "another worker"}, {Key: "lease_until", Value: until}}},
			{Key: "$inc", Value: bson.D{{Key: "version", Value: 1}}}})
	if err != nil || res.MatchedCount != 1 {
		t.Fatalf("take the claim: %v, %+v", err, res)
	}
	taken := time.Now()
	testkit.Eventually(t, 5*time.Second, func() bool { return e.market.inFlight() == 1 }, "the execution whose claim was taken to stop")
	t.Logf("execution stopped %s after its claim was taken (claim TTL 1s)", time.Since(taken).Round(10*time.Millisecond))
	var j analysis.Job
	if err := e.db.Collection(jobstore.Collection).FindOne(context.Background(), bson.D{{Key: "_id", Value: tool.GetId()}}).Decode(&j); err != nil {
		t.Fatal(err)
	}
	if j.Status != analysis.StatusRunning || j.LeaseOwner != "another worker" || j.OutputJSON != "" || j.Error != "" {
		t.Errorf("the job after its claim was taken: %s owned by %q, output %q, error %q; want it as the new owner left it",
			j.Status, j.LeaseOwner, j.OutputJSON, j.Error)
	}
}
