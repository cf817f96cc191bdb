package jobservice_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgatewaytest"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobservice"
)

// market is a local market-data endpoint (the external boundary) that
// counts executions per (path, query) and can hold requests until several
// are in flight, which proves tool jobs overlap.
type market struct {
	*httptest.Server

	mu       sync.Mutex
	counts   map[string]int // guarded by mu: "path?query" → requests served
	inflight int            // guarded by mu
	maxIn    int            // guarded by mu: most requests in flight at once
	barrier  int            // guarded by mu: hold requests until this many are in flight
	status   map[string]int // guarded by mu: URL path → forced HTTP status
	hang     bool           // guarded by mu: hold every request until the client gives up
	arrived  *sync.Cond
}

func newMarket(t testing.TB) *market {
	m := &market{counts: map[string]int{}, status: map[string]int{}}
	m.arrived = sync.NewCond(&m.mu)
	m.Server = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.Close)
	return m
}

func (m *market) serve(w http.ResponseWriter, r *http.Request) {
	ticker := r.URL.Query().Get("ticker")
	m.mu.Lock()
	m.counts[r.URL.Path+"?"+r.URL.RawQuery]++
	m.inflight++
	m.maxIn = max(m.maxIn, m.inflight)
	m.arrived.Broadcast()
	deadline := time.Now().Add(5 * time.Second)
	for m.barrier > 0 && m.maxIn < m.barrier && time.Now().Before(deadline) {
		// Woken by the next arrival or the timer below.
		timer := time.AfterFunc(50*time.Millisecond, m.arrived.Broadcast)
		m.arrived.Wait()
		timer.Stop()
	}
	status, hang, held := m.status[r.URL.Path], m.hang, m.barrier > 0
	m.mu.Unlock()
	if held {
		// Job times are stored to the millisecond: answering a little
		// after the barrier opens keeps every job that waited at it
		// running into a millisecond after the others started.
		time.Sleep(2 * time.Millisecond)
	}
	if hang {
		<-r.Context().Done()
	}
	m.mu.Lock()
	m.inflight--
	m.mu.Unlock()

	if status != 0 {
		http.Error(w, "exchange feed unavailable", status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/quote":
		fmt.Fprintf(w, `{"ticker":%q,"price":45.1,"currency":"AUD","as_of":"2025-03-14T06:00:00Z"}`, ticker)
	case "/v1/financials":
		fmt.Fprintf(w, `{"ticker":%q,"report_type":%q,"pe_ratio":11.2,"market_cap":230000000000,"dividend_yield":0.051}`,
			ticker, r.URL.Query().Get("report_type"))
	default:
		http.NotFound(w, r)
	}
}

// snapshot returns the execution counts.
func (m *market) snapshot() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int, len(m.counts))
	for k, v := range m.counts {
		out[k] = v
	}
	return out
}

func (m *market) inFlight() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inflight
}

func (m *market) maxInflight() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.maxIn
}

func (m *market) set(f func(m *market)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}

// startGateway runs the real model gateway in-process in front of sim,
// serving the logical models "planner" and "chat" from it.
func startGateway(t testing.TB, sim *providersim.Server) string {
	t.Helper()
	routing := fmt.Sprintf(`
providers:
  sim: {type: openai, base_url: %q}
models:
  planner:
    - {provider: sim, model: plan-model}
  chat:
    - {provider: sim, model: chat-model}
`, sim.URL)
	return modelgatewaytest.Start(t, routing, map[string]string{
		"MODELGATEWAY_RETRY_BASE_DELAY": "10ms",
		"MODELGATEWAY_RETRY_MAX_DELAY":  "50ms",
		"MODELGATEWAY_PROBE_INTERVAL":   "1s",
		"OLLAMA_HOST":                   "http://127.0.0.1:1",
	})
}

// dial connects to a gRPC address, closed in t.Cleanup.
func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// dialMesh connects to a service of the mesh as the service binaries do
// (grpcx.Dial: the mesh's retries and interceptors), closed in t.Cleanup.
func dialMesh(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpcx.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// testConfig is a configuration with short timings for tests.
func testConfig(market string) jobservice.Config {
	return jobservice.Config{
		ToolParallelism: 4, ModelParallelism: 2,
		ToolTimeout: 3 * time.Second, ModelTimeout: 20 * time.Second,
		ClaimTTL: 3 * time.Second, SweepInterval: 200 * time.Millisecond, StaleAfter: 3 * time.Second,
		AckWait: time.Second, PlannerModel: "planner", SynthesisModel: "chat",
		MarketDataURL: market, LiveTrees: 10 * time.Second,
	}
}

// env is one test's mesh: FerretDB, NATS, the model gateway over a scripted
// simulator, a market-data server, and the analysis service under test.
type env struct {
	t       testing.TB
	db      *mongo.Database
	rt      *testkit.RoundTrips // counts db's commands (newEnvCounted)
	nats    *testkit.NATS
	bus     *events.Bus
	sim     *providersim.Server
	gwAddr  string
	market  *market
	svc     *jobservice.Service
	client  orchestratorv1.JobServiceClient
	scope   *commonv1.Scope
	cfg     jobservice.Config
	started bool
}

// newEnv starts the dependencies; call start to run the service.
func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvIn(t, false)
}

// newEnvIn is newEnv with the database's writers chosen: many (the default
// of the service binary) or this process alone (agentmesh up).
func newEnvIn(t testing.TB, singleWriter bool) *env {
	t.Helper()
	return newEnvWith(t, singleWriter, false)
}

// newEnvCounted is newEnvIn with the service's database commands counted
// in e.rt.
func newEnvCounted(t testing.TB, singleWriter bool) *env {
	t.Helper()
	return newEnvWith(t, singleWriter, true)
}

func newEnvWith(t testing.TB, singleWriter, counted bool) *env {
	t.Helper()
	e := &env{t: t, nats: testkit.NewNATS(t), sim: providersim.Start(t, providersim.Options{}), market: newMarket(t),
		scope: &commonv1.Scope{TenantId: "acme", ProjectId: "research"}}
	if counted {
		e.db, e.rt = testkit.MongoDBCounted(t)
	} else {
		e.db = testkit.MongoDB(t)
	}
	if singleWriter {
		mongox.MarkSingleWriter(e.db.Client())
	}
	e.bus = connectBus(t, e.nats.URL())
	e.gwAddr = startGateway(t, e.sim)
	e.cfg = testConfig(e.market.URL)
	return e
}

// eachWriterMode runs body as a parallel subtest for each writer mode.
func eachWriterMode(t *testing.T, body func(t *testing.T, singleWriter bool)) {
	for _, single := range []bool{false, true} {
		name := "many writers"
		if single {
			name = "single writer"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body(t, single)
		})
	}
}

func connectBus(t testing.TB, url string) *events.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bus, err := events.Connect(ctx, url, "analysis-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	return bus
}

// start runs the analysis service and its gRPC server.
func (e *env) start(hooks analysis.Hooks) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	svc, err := jobservice.Start(ctx, e.cfg, jobservice.Deps{
		DB: e.db, Bus: e.bus, ModelGateway: dialMesh(e.t, e.gwAddr), Hooks: hooks,
		Logger: testLogger(),
	})
	if err != nil {
		e.t.Fatalf("jobservice.Start: %v", err)
	}
	e.t.Cleanup(svc.Stop)
	e.svc = svc
	conn := testkit.StartGRPC(e.t, func(s *grpc.Server) { svc.Register(s) })
	e.client = orchestratorv1.NewJobServiceClient(conn)
}

func (e *env) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	e.t.Cleanup(cancel)
	return ctx
}

// scriptBHPPlan makes the planner answer with the two tool calls.
func (e *env) scriptBHPPlan() {
	e.sim.When(providersim.Match{WithTools: true, LastRole: "user", LastUserContains: "BHP"}).Named("plan").
		ToolCall("get_stock_price", map[string]any{"ticker": "BHP"}).
		ToolCall("get_financials", `{"ticker": "BHP", "report_type": "quarterly"}`)
}

// stockAnswer is what the scripted synthesis model returns.
var stockAnswer = map[string]any{
	"ticker":        "BHP",
	"summary":       "BHP trades at 45.10 AUD with a P/E of 11.2 and a 5.1% dividend yield.",
	"current_price": map[string]any{"value": 45.1, "currency": "AUD", "as_of": "2025-03-14T06:00:00Z"},
	"metrics":       map[string]any{"pe_ratio": 11.2, "market_cap": 2.3e11, "dividend_yield": 0.051},
}

func (e *env) scriptSynthesis(answer map[string]any) *providersim.Rule {
	return e.sim.When(providersim.Match{JSON: true}).Named("synthesis").JSON(answer)
}

func (e *env) submit(query, responseType string) *orchestratorv1.Job {
	e.t.Helper()
	resp, err := e.client.SubmitAnalysis(e.ctx(10*time.Second), &orchestratorv1.SubmitAnalysisRequest{
		Scope: e.scope, Query: query, ResponseType: responseType,
	})
	if err != nil {
		e.t.Fatalf("SubmitAnalysis: %v", err)
	}
	return resp.GetJob()
}

func (e *env) get(id string) *orchestratorv1.Job {
	e.t.Helper()
	resp, err := e.client.GetJob(e.ctx(10*time.Second), &orchestratorv1.GetJobRequest{Scope: e.scope, JobId: id})
	if err != nil {
		e.t.Fatalf("GetJob: %v", err)
	}
	return resp.GetJob()
}

// waitStatus polls GetJob until the job has status.
func (e *env) waitStatus(id string, st orchestratorv1.JobStatus, within time.Duration) *orchestratorv1.Job {
	e.t.Helper()
	var j *orchestratorv1.Job
	testkit.Eventually(e.t, within, func() bool {
		j = e.get(id)
		return j.GetStatus() == st
	}, "job %s to become %s (last: %s %s)", id, st, func() string { return j.GetStatus().String() }(), j.GetError())
	return j
}

// watched is one event received through WatchJob.
type watched struct {
	seq    uint64 // its event id, as the API gives it (what a resume takes)
	stream uint64 // its AM_EVENTS sequence (the id mapped back)
	id     string
	typ    orchestratorv1.JobType
	status orchestratorv1.JobStatus
}

// watch collects WatchJob events in the background until the stream ends.
func (e *env) watch(rootID string, after uint64) func() ([]watched, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	stream, err := e.client.WatchJob(ctx, &orchestratorv1.WatchJobRequest{Scope: e.scope, JobId: rootID, AfterSequence: after})
	if err != nil {
		cancel()
		e.t.Fatalf("WatchJob: %v", err)
	}
	ids, err := e.bus.EventIDs(ctx)
	if err != nil {
		cancel()
		e.t.Fatalf("event ids: %v", err)
	}
	var (
		got  []watched
		werr error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			m, err := stream.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					werr = err
				}
				return
			}
			j := m.GetEvent().GetJob()
			if m.GetEvent().GetRootId() != rootID {
				werr = fmt.Errorf("event of root %s in watch of %s", m.GetEvent().GetRootId(), rootID)
			}
			got = append(got, watched{seq: m.GetSequence(), stream: ids.Seq(m.GetSequence()), id: j.GetId(), typ: j.GetType(), status: j.GetStatus()})
		}
	}()
	e.t.Cleanup(cancel)
	return func() ([]watched, error) {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cancel()
			<-done
			return got, fmt.Errorf("watch did not end within 30s (got %d events)", len(got))
		}
		return got, werr
	}
}

// statusesByJob groups watched statuses per job, in stream order.
func statusesByJob(ev []watched) map[string][]orchestratorv1.JobStatus {
	out := map[string][]orchestratorv1.JobStatus{}
	for _, w := range ev {
		out[w.id] = append(out[w.id], w.status)
	}
	return out
}

// childrenOf returns the children of a tree by type.
func childrenOf(root *orchestratorv1.Job, typ orchestratorv1.JobType) []*orchestratorv1.Job {
	var out []*orchestratorv1.Job
	for _, c := range root.GetChildren() {
		if c.GetType() == typ {
			out = append(out, c)
		}
	}
	return out
}

// outputMap decodes a job's output.
func outputMap(j *orchestratorv1.Job) map[string]any { return j.GetOutput().AsMap() }

// sortedKeys is for stable failure messages.
func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// mustJSON is for messages.
func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// testLogger logs to stderr when AM_TEST_LOG is set, else nowhere.
func testLogger() *slog.Logger {
	if os.Getenv("AM_TEST_LOG") == "" {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// commonScope shortens the scope type in helpers.
type commonScope = commonv1.Scope
