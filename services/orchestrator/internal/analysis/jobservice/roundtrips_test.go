package jobservice_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobservice"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobstore"
)

// TestAnalysisRoundTrips holds one analysis (planning, its tool jobs,
// synthesis, then the move to the archive) to its budget of database round
// trips, counted from submission until the tree is archived and the relay
// is done with it (the relay's periodic sweeps, once per 5 s, may fall in
// the window: they are not counted), with a plan of 2 tool jobs and one of
// 16: each tool job adds at most a fixed number (the engine reads an
// analysis's children after each child ends, in one read, not one per
// child, which grew with the square of the plan). A single writer makes
// only exact-_id operations and inserts: none grows with the analyses
// stored. The test watches the database through a client of its own, so
// its polling is not counted.
func TestAnalysisRoundTrips(t *testing.T) {
	t.Parallel()
	// Many writers, single writer: measured 74-75 and 12 with 2 tools (no
	// removal written to a job archived by then, each claim written with
	// its result, the tool jobs inserted together), about 12 and 1 more for
	// each further tool job: 242 and 26 with 16. Before the children were
	// read in one go, the claim's job settled without reading it again and
	// a tree archived in one read and one delete, many writers made 94-103
	// with 2 tools and 662 with 16.
	budgets := map[bool]int{false: 85, true: 13}
	perTool := map[bool]int{false: 13, true: 2} // single writer: 1, and a claim held back past LazyDelay on a busy machine is written alone
	eachWriterMode(t, func(t *testing.T, single bool) {
		e := newEnvCounted(t, single)
		tickers := []string{"BHP", "RIO", "FMG", "WDS", "CBA", "NAB", "WBC", "ANZ",
			"CSL", "WES", "WOW", "TLS", "MQG", "GMG", "TCL", "ALL"} // planner.MaxCalls
		plan := e.sim.When(providersim.Match{WithTools: true, LastRole: "user", LastUserContains: "sixteen"}).Named("plan of 16")
		for _, tk := range tickers {
			plan.ToolCall("get_stock_price", map[string]any{"ticker": tk})
		}
		e.scriptBHPPlan()
		e.scriptSynthesis(stockAnswer)
		// Recovery sweeps and checks for lapsed claims are not an
		// analysis's cost (and no job of it runs long enough to renew
		// its claim at the default ANALYSIS_CLAIM_TTL).
		e.cfg.SweepInterval, e.cfg.ClaimTTL = time.Hour, time.Hour
		e.start(analysis.Hooks{})
		// The archiver's questions to JetStream: whether a job's last
		// event is stored (the last message on its subject).
		nc, err := nats.Connect(e.nats.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		var msgGets atomic.Int64
		for _, subj := range []string{"$JS.API.STREAM.MSG.GET.>", "$JS.API.DIRECT.GET.>"} {
			if _, err := nc.Subscribe(subj, func(*nats.Msg) { msgGets.Add(1) }); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
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
		count := func(query string, tools int) int {
			e.rt.Reset()
			msgGets.Store(0)
			root := e.submit(query, "stock_analysis")
			testkit.Eventually(t, 20*time.Second, func() bool {
				n, err := archive.CountDocuments(context.Background(), bson.D{{Key: "_id", Value: root.GetId()}})
				m, err2 := live.CountDocuments(context.Background(), bson.D{})
				return err == nil && err2 == nil && n == 1 && m == 0
			}, "the analysis to be archived")
			if got := len(childrenOf(e.get(root.GetId()), typeTool)); got != tools {
				t.Fatalf("the analysis ran %d tool jobs, want %d", got, tools)
			}
			// The relay's removals (of the jobs not gone by then) follow
			// the writes by its removal delay.
			time.Sleep(jobservice.RelayRemovalDelay)
			last := -1
			testkit.Eventually(t, 10*time.Second, func() bool {
				n := e.rt.Total()
				settled := n == last
				last = n
				time.Sleep(600 * time.Millisecond)
				return settled
			}, "round trips to settle")
			// The relay's periodic sweeps (a find on pending outbox
			// entries, every 5 s) are not the analysis's: how many fall
			// in the window depends on how long the analysis took on a
			// busy machine.
			sweeps := 0
			for _, q := range e.rt.NotExact() {
				if isRelaySweep(q) {
					sweeps++
				}
			}
			n := e.rt.Total() - sweeps
			t.Logf("one analysis (%d tools) made %d round trips, besides %d of the relay's sweeps: %s; %d requests for a stored message",
				tools, n, sweeps, e.rt, msgGets.Load())
			// A single writer's relay tells the store which entries are
			// stored (Store.Published): the archiver asks JetStream only
			// while a job's final event is not reported yet — on a busy
			// machine its first tries (25 ms after the analysis ends,
			// then twice as long each time) may come before the relay
			// has published it, a question a try — not once for every
			// job, as it did (5 and 19 here).
			if single && msgGets.Load() > 3 {
				t.Errorf("single writer: the archiver asked JetStream %d times for a job's last event, want at most 3", msgGets.Load())
			}
			// FerretDB reads and parses the whole collection for any
			// other filter, {_id: {$in: ids}} included.
			if scans := e.rt.NotExact(); single && len(scans) > 0 {
				t.Errorf("single writer: statements not by exact _id: %q", scans)
			}
			// A single writer's archiver deletes the tree's live jobs in
			// one statement on the embedded server's SQLite file, not in
			// a delete command (FerretDB reads and parses each job first).
			if d, c := e.rt.Count("delete "+jobstore.Collection+" (sqlite)"), e.rt.Count("delete "+jobstore.Collection); single && (d != 1 || c != 0) {
				t.Errorf("single writer: %d deletes beneath the driver and %d delete commands, want 1 and 0", d, c)
			}
			// Its mirror knows each job's document, so its updates, the
			// relay's removals included, write the whole document beneath
			// the driver (FerretDB reads, decodes and encodes it again).
			if c := e.rt.Count("update " + jobstore.Collection); single && c != 0 {
				t.Errorf("single writer: %d update commands, want every update beneath the driver", c)
			}
			return n
		}
		two := count("Analyse BHP for investment", 2)
		if two > budgets[single] {
			t.Errorf("one analysis of 2 tool jobs made %d round trips, budget %d", two, budgets[single])
		}
		sixteen := count("Analyse sixteen listed companies", len(tickers))
		if limit := two + 14*perTool[single]; sixteen > limit {
			t.Errorf("one analysis of 16 tool jobs made %d round trips, budget %d (%d for 2 tool jobs, %d for each further one)",
				sixteen, limit, two, perTool[single])
		}
	})
}

// isRelaySweep reports whether statement q is an outbox relay's sweep: a
// find of the documents with pending outbox entries.
func isRelaySweep(q string) bool { return strings.Contains(q, `"outbox.0"`) }

// TestLongJobsRenewWithoutReading: with many writers, a job that runs for
// several claim renewals writes each renewal and its result from the copy
// it last stored, reading the job again only if another write came between:
// the renewals add writes, not reads.
func TestLongJobsRenewWithoutReading(t *testing.T) {
	t.Parallel()
	e := newEnvCounted(t, false)
	e.scriptBHPPlan()
	e.scriptSynthesis(stockAnswer)
	// Renewals every 333 ms; each tool job runs 2 s. No recovery sweep.
	e.cfg.SweepInterval, e.cfg.ClaimTTL = time.Hour, time.Second
	e.start(analysis.Hooks{BeforeExecute: func(j *analysis.Job) {
		if j.Type == analysis.TypeTool {
			time.Sleep(2 * time.Second)
		}
	}})
	// Watched through a client of its own: its polling is not counted.
	archive := testkit.Uncounted(t, e.db).Collection(jobstore.ArchiveCollection)
	e.rt.Reset()
	root := e.submit("Analyse BHP for investment", "stock_analysis")
	testkit.Eventually(t, 20*time.Second, func() bool {
		n, err := archive.CountDocuments(context.Background(), bson.D{{Key: "_id", Value: root.GetId()}})
		return err == nil && n == 1
	}, "the analysis to be archived")
	notExact := 0 // the checks for lapsed claims, every 333 ms
	for _, q := range e.rt.NotExact() {
		if strings.HasPrefix(q, "find "+jobstore.Collection+" ") {
			notExact++
		}
	}
	reads := e.rt.Count("find "+jobstore.Collection) - notExact
	writes := e.rt.Count("update " + jobstore.Collection)
	t.Logf("reads by _id %d, updates %d: %s", reads, writes, e.rt)
	// Two tool jobs of 2 s: about 12 renewals. Measured 37-38 reads; 51
	// when each renewal read the job and the result, written from the
	// claim's copy, missed and read it again.
	if writes < 18 {
		t.Fatalf("%d updates: the tool jobs' claims were not renewed as the test needs", writes)
	}
	if reads > 42 {
		t.Errorf("the analysis read its jobs %d times by _id with %d updates, want at most 42: renewals read the job", reads, writes)
	}
}
