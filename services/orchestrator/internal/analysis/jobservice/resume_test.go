package jobservice_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobservice"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobstore"
)

// resumeChildEnv makes TestResumeChild run (besides the crash child's
// environment).
const resumeChildEnv = "AM_ANALYSIS_RESUME_CHILD"

// resumeConfig is the production configuration of claims, work queues and
// sweeps (their defaults), with job timeouts far beyond the test: nothing
// but the claim can bring a job of a killed worker back in time.
func resumeConfig(market string) jobservice.Config {
	cfg := testConfig(market)
	cfg.ClaimTTL, cfg.AckWait, cfg.SweepInterval, cfg.StaleAfter = 0, 0, 0, 0
	cfg.ToolTimeout, cfg.ModelTimeout = 10*time.Minute, 10*time.Minute
	return cfg
}

// TestResumeChild is the orchestrator process that
// TestKilledWorkersJobResumesWithinSeconds kills: it runs the analysis
// service with resumeConfig and reports every job it claims.
func TestResumeChild(t *testing.T) {
	if os.Getenv(resumeChildEnv) == "" {
		t.Skip("runs only as the child process of TestKilledWorkersJobResumesWithinSeconds")
	}
	serveChild(t, resumeConfig(os.Getenv(childMarketURL)), analysis.Hooks{BeforeExecute: func(j *analysis.Job) {
		fmt.Printf("CLAIMED %s %s\n", j.ID, j.Type)
	}})
}

// A worker killed with SIGKILL in the middle of a job — a planning call the
// model never answers, tool calls the market never answers — leaves the
// job claimed; another worker (a replica running all along, or the single
// writer restarted) runs it again within seconds, not after the job's
// timeout: within two claim TTLs and a check for lapsed claims of the kill
// at most, with the production defaults; the single writer at its
// restart, without waiting for the claims to lapse. The analysis then
// completes.
func TestKilledWorkersJobResumesWithinSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		typ    analysis.Type
		single bool
	}{
		{"planning mid model call, a replica takes over", analysis.TypePlanning, false},
		{"tools mid execution, a replica takes over", analysis.TypeTool, false},
		{"planning mid model call, the single writer restarts", analysis.TypePlanning, true},
		{"tools mid execution, the single writer restarts", analysis.TypeTool, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nats := testkit.NewNATS(t)
			uri, dbName := testkit.MongoURI(t)
			e := &env{t: t, sim: providersim.Start(t, providersim.Options{}), market: newMarket(t),
				scope: &commonv1.Scope{TenantId: "acme", ProjectId: "research"}}
			e.gwAddr = startGateway(t, e.sim)
			switch tc.typ {
			case analysis.TypePlanning: // the first planning call is never answered
				e.sim.When(providersim.Match{WithTools: true, LastRole: "user", LastUserContains: "BHP"}).
					Named("hung plan").Hang().Times(1)
			case analysis.TypeTool: // the market answers nothing until the kill
				e.market.set(func(m *market) { m.hang = true })
			}
			e.scriptBHPPlan()
			e.scriptSynthesis(stockAnswer)

			env := []string{resumeChildEnv + "=1", childMongoURI + "=" + uri, childMongoDB + "=" + dbName,
				childNATS + "=" + nats.URL(), childGateway + "=" + e.gwAddr, childMarketURL + "=" + e.market.URL}
			if tc.single {
				env = append(env, childSingleWriter+"=1")
			}
			c := testkit.StartChild(t, "TestResumeChild", env...)
			addr := c.Next("ADDR ")
			resp, err := orchestratorv1.NewJobServiceClient(dial(t, addr)).SubmitAnalysis(e.ctx(20*time.Second),
				&orchestratorv1.SubmitAnalysisRequest{Scope: e.scope, Query: "Analyse BHP for investment", ResponseType: "stock_analysis"})
			if err != nil {
				t.Fatalf("SubmitAnalysis: %v", err)
			}
			rootID := resp.GetJob().GetId()
			want := map[analysis.Type]int{analysis.TypePlanning: 1, analysis.TypeTool: 2}[tc.typ]
			var ids []string
			for len(ids) < want {
				id, typ, _ := strings.Cut(c.Next("CLAIMED "), " ")
				if analysis.Type(typ) == tc.typ {
					ids = append(ids, id)
				}
			}
			// The child is stuck in the calls, and renews its claims.
			testkit.Eventually(t, 10*time.Second, func() bool {
				if tc.typ == analysis.TypePlanning {
					return e.sim.Count() >= 1
				}
				return e.market.inFlight() == want
			}, "the child's calls to hang")
			observer := observe(t, uri, dbName)
			for _, id := range ids {
				poll(t, 20*time.Second, func() bool { return observer(id).Version >= 3 }, "two renewals of the claim of %s", id)
			}

			client, err := mongo.Connect(options.Client().ApplyURI(uri))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
			if tc.single {
				mongox.MarkSingleWriter(client)
			}
			e.db = client.Database(dbName)
			e.bus = connectBus(t, nats.URL())
			e.cfg = resumeConfig(e.market.URL)
			if !tc.single {
				e.start(analysis.Hooks{}) // a replica, up before the crash
			}
			c.Kill()
			killed := time.Now()
			var left time.Duration // the longest a claim had to run at the kill
			for _, id := range ids {
				left = max(left, observer(id).LeaseUntil.Sub(killed))
			}
			e.market.set(func(m *market) { m.hang = false })
			if tc.single {
				e.start(analysis.Hooks{}) // the only writer comes back
			}
			cfg := e.svc.Engine().Config()
			bound, why := 2*cfg.ClaimTTL+cfg.ClaimTTL/3, "two claim TTLs and a check"
			if tc.single {
				// The only writer's start takes every claim it finds for a
				// dead process's: it does not wait for them to lapse.
				bound, why = cfg.ClaimTTL/3, "a third of a claim TTL: the restart, not the claims' lapse"
			}

			var resumed time.Duration
			for _, id := range ids {
				poll(t, bound+10*time.Second, func() bool { return e.get(id).GetAttempts() >= 2 }, "job %s to be claimed again", id)
				resumed = time.Since(killed)
			}
			t.Logf("%s: %d %s job(s) resumed %s after the kill, their claims having %s to run (claim TTL %s, model timeout %s, tool timeout %s, ack wait %s)",
				tc.name, len(ids), tc.typ, resumed.Round(10*time.Millisecond), left.Round(10*time.Millisecond),
				cfg.ClaimTTL, cfg.ModelTimeout, cfg.ToolTimeout, cfg.AckWait)
			if resumed > bound {
				t.Errorf("resumed %s after the kill, want at most %s (%s)", resumed, bound, why)
			}
			final := e.waitStatus(rootID, complete, 30*time.Second)
			for _, j := range childrenOf(final, typeTool) {
				if j.GetStatus() != complete {
					t.Errorf("tool %s is %s: %s", j.GetTitle(), j.GetStatus(), j.GetError())
				}
			}
		})
	}
}

// observe returns a function reading a live job of database dbName on
// uri, through a client of the test's own (which writes nothing).
func observe(t *testing.T, uri, dbName string) func(id string) *analysis.Job {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	live := client.Database(dbName).Collection(jobstore.Collection)
	return func(id string) *analysis.Job {
		t.Helper()
		var j analysis.Job
		if err := live.FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&j); err != nil {
			t.Fatalf("read job %s: %v", id, err)
		}
		return &j
	}
}

// poll checks cond every 50ms until it holds, failing the test after
// timeout: a gentler Eventually for conditions that cost a database read.
func poll(t *testing.T, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: "+format, append([]any{timeout}, args...)...)
		}
		<-tick.C
	}
}
