package jobservice_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

// A planner that answers instead of calling tools fails planning; nothing
// is synthesised.
func TestPlanningWithoutToolCallsFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.sim.When(providersim.Match{WithTools: true}).Text("BHP is a great company, buy it.")
	synth := e.scriptSynthesis(stockAnswer)
	e.start(analysis.Hooks{})

	root := e.submit("Analyse BHP for investment", "stock_analysis")
	final := e.waitStatus(root.GetId(), failed, 20*time.Second)
	if final.GetError() != "planning failed: no tool calls returned" {
		t.Errorf("analysis error %q", final.GetError())
	}
	kids := final.GetChildren()
	if len(kids) != 1 || kids[0].GetType() != typePlanning || kids[0].GetStatus() != failed ||
		kids[0].GetError() != "planning failed: no tool calls returned" {
		t.Fatalf("children %v", kids)
	}
	if synth.Hits() != 0 || e.sim.Count() != 1 || len(e.market.snapshot()) != 0 {
		t.Errorf("synthesis calls %d, model calls %d, tool calls %v", synth.Hits(), e.sim.Count(), e.market.snapshot())
	}
}

// Unknown tools and invalid arguments are fed back once; a corrected plan
// runs, a plan still invalid fails with the details.
func TestInvalidToolCallsFedBackOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		correct bool
	}{{"corrected", true}, {"still invalid", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			second := e.sim.When(providersim.Match{WithTools: true, LastUserContains: "COMPLETE corrected list"})
			if tc.correct {
				second.ToolCall("get_stock_price", map[string]any{"ticker": "BHP"})
			} else {
				second.ToolCall("get_stock_price", map[string]any{"ticker": "BHP", "period": "10y"})
			}
			e.sim.When(providersim.Match{WithTools: true, LastUserContains: "BHP"}).
				ToolCall("get_weather", map[string]any{"city": "Perth"}).
				ToolCall("get_stock_price", map[string]any{"ticker": "BHP", "period": "10y"})
			e.scriptSynthesis(stockAnswer)
			e.start(analysis.Hooks{})

			root := e.submit("Analyse BHP for investment", "stock_analysis")
			want := complete
			if !tc.correct {
				want = failed
			}
			final := e.waitStatus(root.GetId(), want, 20*time.Second)
			reqs := e.sim.ChatRequests()
			if len(reqs) < 2 {
				t.Fatalf("model saw %d requests", len(reqs))
			}
			feedback := reqs[1]
			var toolResults []string
			for _, m := range feedback.Messages {
				if m.Role == "tool" {
					toolResults = append(toolResults, m.Content)
				}
			}
			if len(toolResults) != 2 || !strings.Contains(toolResults[0], `unknown tool "get_weather"`) ||
				!strings.Contains(toolResults[1], "/period") || feedback.ToolChoice != "required" {
				t.Errorf("feedback tool results %q (tool_choice %v)", toolResults, feedback.ToolChoice)
			}
			planning := childrenOf(final, typePlanning)[0]
			if tc.correct {
				tools := childrenOf(final, typeTool)
				if len(tools) != 1 || tools[0].GetTitle() != `get_stock_price {ticker: "BHP"}` || len(reqs) != 3 {
					t.Errorf("tools %v after %d model calls", tools, len(reqs))
				}
				if fb, _ := planning.GetOutput().AsMap()["feedback"].([]any); len(fb) != 2 {
					t.Errorf("planning output %v does not record the feedback", planning.GetOutput().AsMap())
				}
				return
			}
			if len(reqs) != 2 || len(final.GetChildren()) != 1 {
				t.Errorf("%d model calls, children %v", len(reqs), final.GetChildren())
			}
			if !strings.HasPrefix(planning.GetError(), "planning failed: invalid tool calls after feedback: call 1: get_stock_price") ||
				!strings.Contains(planning.GetError(), "/period") || final.GetError() != planning.GetError() {
				t.Errorf("planning error %q, analysis error %q", planning.GetError(), final.GetError())
			}
		})
	}
}

// A failing tool is recorded with its error and listed in data_gaps, and
// synthesis still runs; RetryJob re-runs it and synthesis again.
func TestFailingToolIsADataGapAndRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.scriptBHPPlan()
	synth := e.scriptSynthesis(stockAnswer)
	e.market.set(func(m *market) { m.status["/v1/financials"] = 503 })
	e.start(analysis.Hooks{})

	root := e.submit("Analyse BHP for investment", "stock_analysis")
	final := e.waitStatus(root.GetId(), complete, 20*time.Second)
	tools := childrenOf(final, typeTool)
	fin := tools[1]
	if fin.GetStatus() != failed || fin.GetError() != "market data returned HTTP 503: exchange feed unavailable" {
		t.Fatalf("financials job %s %q", fin.GetStatus(), fin.GetError())
	}
	if len(childrenOf(final, typeSynthesis)) != 1 || synth.Hits() != 1 {
		t.Fatalf("synthesis did not run once (%d)", synth.Hits())
	}
	out := outputMap(final)
	wantGap := `get_financials {ticker: "BHP", report_type: "quarterly"}: failed: market data returned HTTP 503: exchange feed unavailable`
	if mustJSON(out["data_sources"]) != `["get_stock_price"]` || mustJSON(out["data_gaps"]) != mustJSON([]string{wantGap}) {
		t.Errorf("data_sources %v data_gaps %v", out["data_sources"], out["data_gaps"])
	}
	if last := e.sim.ChatRequests()[1]; !strings.Contains(last.AllText(), "Missing data") || !strings.Contains(last.AllText(), "HTTP 503") {
		t.Errorf("synthesis prompt does not report the gap: %q", last.AllText())
	}

	// Only failed tool or synthesis jobs can be retried.
	_, err := e.client.RetryJob(e.ctx(5*time.Second), &orchestratorv1.RetryJobRequest{Scope: e.scope, JobId: tools[0].GetId()})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("RetryJob(complete tool) = %v, want FailedPrecondition", err)
	}

	// The feed recovers; retry the failed tool.
	e.market.set(func(m *market) { delete(m.status, "/v1/financials") })
	before := final.GetEndTime().AsTime()
	resp, err := e.client.RetryJob(e.ctx(5*time.Second), &orchestratorv1.RetryJobRequest{Scope: e.scope, JobId: fin.GetId()})
	if err != nil {
		t.Fatalf("RetryJob: %v", err)
	}
	if resp.GetJob().GetId() != fin.GetId() || resp.GetJob().GetStatus() != pending {
		t.Errorf("retried job %v", resp.GetJob())
	}
	var again *orchestratorv1.Job
	testkit.Eventually(t, 20*time.Second, func() bool {
		again = e.get(root.GetId())
		return again.GetStatus() == complete && again.GetEndTime().AsTime().After(before)
	}, "analysis to complete again after the retry")
	out = outputMap(again)
	if mustJSON(out["data_sources"]) != `["get_stock_price","get_financials"]` || mustJSON(out["data_gaps"]) != `[]` {
		t.Errorf("after retry: data_sources %v data_gaps %v", out["data_sources"], out["data_gaps"])
	}
	tools = childrenOf(again, typeTool)
	if tools[1].GetStatus() != complete || tools[1].GetAttempts() != 2 || tools[0].GetAttempts() != 1 {
		t.Errorf("tool attempts %d and %d", tools[0].GetAttempts(), tools[1].GetAttempts())
	}
	if len(childrenOf(again, typeSynthesis)) != 1 || synth.Hits() != 2 {
		t.Errorf("synthesis jobs %d, synthesis calls %d", len(childrenOf(again, typeSynthesis)), synth.Hits())
	}
	counts := e.market.snapshot()
	if counts["/v1/quote?ticker=BHP"] != 1 || counts["/v1/financials?report_type=quarterly&ticker=BHP"] != 2 {
		t.Errorf("executions %v", counts)
	}
	// Watching the finished tree replays its whole history, retry included,
	// and ends.
	events, err := e.watch(root.GetId(), 0)()
	if err != nil {
		t.Fatal(err)
	}
	byJob := statusesByJob(events)
	if got := byJob[root.GetId()]; mustJSON(got) != mustJSON([]orchestratorv1.JobStatus{pending, waiting, complete, waiting, complete}) {
		t.Errorf("analysis events %v", got)
	}
	if got := byJob[fin.GetId()]; mustJSON(got) != mustJSON([]orchestratorv1.JobStatus{pending, running, failed, pending, running, complete}) {
		t.Errorf("retried tool events %v", got)
	}
}

// Cancel stops running tool jobs, cancels the tree and synthesises nothing.
func TestCancelStopsChildren(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.scriptBHPPlan()
	synth := e.scriptSynthesis(stockAnswer)
	e.market.set(func(m *market) { m.hang = true })
	e.cfg.ToolTimeout = 20 * time.Second
	e.start(analysis.Hooks{})

	root := e.submit("Analyse BHP for investment", "stock_analysis")
	collect := e.watch(root.GetId(), 0)
	testkit.Eventually(t, 20*time.Second, func() bool {
		tools := childrenOf(e.get(root.GetId()), typeTool)
		return len(tools) == 2 && tools[0].GetStatus() == running && tools[1].GetStatus() == running && e.market.inFlight() == 2
	}, "both tools running")

	start := time.Now()
	resp, err := e.client.CancelJob(e.ctx(5*time.Second), &orchestratorv1.CancelJobRequest{Scope: e.scope, JobId: root.GetId()})
	if err != nil {
		t.Fatalf("CancelJob: %v", err)
	}
	if resp.GetJob().GetStatus() != cancelled {
		t.Errorf("CancelJob returned %v", resp.GetJob().GetStatus())
	}
	// The executors were interrupted: the tool requests ended long before
	// the 20s tool timeout.
	testkit.Eventually(t, 5*time.Second, func() bool { return e.market.inFlight() == 0 }, "tool requests to be abandoned")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("tools stopped after %v", d)
	}
	final := e.get(root.GetId())
	for _, c := range final.GetChildren() {
		want := cancelled
		if c.GetType() == typePlanning {
			want = complete
		}
		if c.GetStatus() != want {
			t.Errorf("child %s is %s, want %s", c.GetTitle(), c.GetStatus(), want)
		}
	}
	if len(childrenOf(final, typeSynthesis)) != 0 || synth.Hits() != 0 {
		t.Errorf("synthesis after cancel: %d jobs, %d calls", len(childrenOf(final, typeSynthesis)), synth.Hits())
	}
	events, err := collect()
	if err != nil {
		t.Fatal(err)
	}
	byJob := statusesByJob(events)
	for _, c := range childrenOf(final, typeTool) {
		if got := byJob[c.GetId()]; mustJSON(got) != mustJSON([]orchestratorv1.JobStatus{pending, running, cancelled}) {
			t.Errorf("tool events %v", got)
		}
	}
	// Nothing more can be done with the cancelled analysis.
	if _, err := e.client.CancelJob(e.ctx(5*time.Second), &orchestratorv1.CancelJobRequest{Scope: e.scope, JobId: root.GetId()}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("second CancelJob = %v", err)
	}
	tool := childrenOf(final, typeTool)[0]
	if _, err := e.client.RetryJob(e.ctx(5*time.Second), &orchestratorv1.RetryJobRequest{Scope: e.scope, JobId: tool.GetId()}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("RetryJob in a cancelled analysis = %v", err)
	}
	// Another tenant sees nothing.
	other := &commonv1.Scope{TenantId: "globex", ProjectId: e.scope.GetProjectId()}
	if _, err := e.client.GetJob(e.ctx(5*time.Second), &orchestratorv1.GetJobRequest{Scope: other, JobId: root.GetId()}); status.Code(err) != codes.NotFound {
		t.Errorf("GetJob from another tenant = %v", err)
	}
}
