package jobservice_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/grpc"

	"github.com/agentmesh/agentmesh/libs/events"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobservice"
)

// Environment of the crash child process.
const (
	childEnv       = "AM_ANALYSIS_CRASH_CHILD"
	childMongoURI  = "AM_ANALYSIS_MONGO_URI"
	childMongoDB   = "AM_ANALYSIS_MONGO_DB"
	childNATS      = "AM_ANALYSIS_NATS_URL"
	childGateway   = "AM_ANALYSIS_GATEWAY"
	childMarketURL = "AM_ANALYSIS_MARKET_URL"
	// childSingleWriter makes the child the database's only writer.
	childSingleWriter = "AM_ANALYSIS_SINGLE_WRITER"
)

// TestCrashChild is the orchestrator process that TestKillDuringToolPhase
// kills: it runs the analysis service with one tool worker and, right after
// the first tool result is stored and before its work item is acknowledged,
// reports the job and freezes until it is killed with SIGKILL.
func TestCrashChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("runs only as the child process of TestKillDuringToolPhase")
	}
	cfg := testConfig(os.Getenv(childMarketURL))
	cfg.ToolParallelism = 1
	serveChild(t, cfg, analysis.Hooks{AfterSettle: func(j *analysis.Job) {
		if j.Type == analysis.TypeTool {
			fmt.Printf("SETTLED %s\n", j.ID)
			select {} // frozen between "result stored" and "work item acknowledged"
		}
	}})
}

// serveChild runs, in a child process, the analysis service with cfg and
// hooks on the database, NATS and model gateway its environment names,
// prints "ADDR <address>" of its gRPC server and blocks until the process
// is killed. With childSingleWriter set, it is the database's only writer.
func serveChild(t *testing.T, cfg jobservice.Config, hooks analysis.Hooks) {
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv(childMongoURI)))
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv(childSingleWriter) != "" {
		mongox.MarkSingleWriter(client)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	svc, err := jobservice.Start(ctx, cfg, jobservice.Deps{
		DB: client.Database(os.Getenv(childMongoDB)), Bus: connectBus(t, os.Getenv(childNATS)),
		ModelGateway: dial(t, os.Getenv(childGateway)), Logger: testLogger(), Hooks: hooks,
	})
	if err != nil {
		t.Fatal(err)
	}
	lis := testkit.Listen(t)
	srv := grpc.NewServer()
	svc.Register(srv)
	go func() { _ = srv.Serve(lis) }()
	fmt.Printf("ADDR %s\n", lis.Addr())
	select {} // until killed
}

// kill -9 of the orchestrator during the tool phase, then a restart: the
// analysis completes and no tool executor ran twice for the same key.
func TestKillDuringToolPhase(t *testing.T) {
	t.Parallel()
	nats := testkit.NewNATS(t)
	uri, dbName := testkit.MongoURI(t)
	sim := providersim.Start(t, providersim.Options{})
	gwAddr := startGateway(t, sim)
	mkt := newMarket(t)
	e := &env{t: t, sim: sim, market: mkt}
	e.scriptBHPPlan()
	e.scriptSynthesis(stockAnswer)

	// 1. The child process takes the analysis into the tool phase.
	c := testkit.StartChild(t, "TestCrashChild", childEnv+"=1", childMongoURI+"="+uri, childMongoDB+"="+dbName,
		childNATS+"="+nats.URL(), childGateway+"="+gwAddr, childMarketURL+"="+mkt.URL)
	addr := c.Next("ADDR ")
	scope := e.scopeOrDefault()
	resp, err := orchestratorv1.NewJobServiceClient(dial(t, addr)).SubmitAnalysis(e.ctx(20*time.Second),
		&orchestratorv1.SubmitAnalysisRequest{Scope: scope, Query: "Analyse BHP for investment", ResponseType: "stock_analysis"})
	if err != nil {
		t.Fatalf("SubmitAnalysis: %v", err)
	}
	rootID := resp.GetJob().GetId()
	settledID := c.Next("SETTLED ")
	c.Kill()
	atCrash := mkt.snapshot()
	if total := sum(atCrash); total != 1 {
		t.Fatalf("tool executions at the crash: %v, want exactly one", atCrash)
	}

	// 2. Restart in this process against the same database and NATS.
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	e.db = client.Database(dbName)
	e.bus = connectBus(t, nats.URL())
	e.gwAddr = gwAddr
	e.cfg = testConfig(mkt.URL)
	e.scope = scope
	e.start(analysis.Hooks{})

	final := e.waitStatus(rootID, complete, 30*time.Second)
	// Every work item is eventually acknowledged — including the one the
	// killed process never acknowledged, redelivered after AckWait to a
	// worker that must see the job complete and not run it again.
	work, err := e.bus.JetStream().Stream(e.ctx(5*time.Second), events.StreamWork)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() bool {
		info, err := work.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	}, "work queue to drain")

	counts := mkt.snapshot()
	if len(counts) != 2 {
		t.Fatalf("executions %v, want the two planned calls", counts)
	}
	for _, k := range sortedKeys(counts) {
		if counts[k] != 1 {
			t.Errorf("%s executed %d times, want once", k, counts[k])
		}
	}
	for _, c := range childrenOf(final, typeTool) {
		if c.GetStatus() != complete {
			t.Errorf("tool %s is %s", c.GetTitle(), c.GetStatus())
		}
		if c.GetId() == settledID && c.GetAttempts() != 1 {
			t.Errorf("the tool settled before the crash was claimed %d times", c.GetAttempts())
		}
	}
	if out := outputMap(final); mustJSON(out["data_sources"]) != `["get_stock_price","get_financials"]` {
		t.Errorf("data_sources %v", out["data_sources"])
	}
}

// scopeOrDefault returns the test scope.
func (e *env) scopeOrDefault() *commonScope {
	if e.scope == nil {
		e.scope = &commonScope{TenantId: "acme", ProjectId: "research"}
	}
	return e.scope
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
