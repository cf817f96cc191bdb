package jobservice_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/jobstree"
)

const (
	pending   = orchestratorv1.JobStatus_JOB_STATUS_PENDING
	running   = orchestratorv1.JobStatus_JOB_STATUS_RUNNING
	waiting   = orchestratorv1.JobStatus_JOB_STATUS_WAITING_FOR_CHILDREN
	complete  = orchestratorv1.JobStatus_JOB_STATUS_COMPLETE
	failed    = orchestratorv1.JobStatus_JOB_STATUS_FAILED
	cancelled = orchestratorv1.JobStatus_JOB_STATUS_CANCELLED

	typePlanning  = orchestratorv1.JobType_JOB_TYPE_PLANNING_CALL
	typeTool      = orchestratorv1.JobType_JOB_TYPE_TOOL_EXECUTION
	typeSynthesis = orchestratorv1.JobType_JOB_TYPE_SYNTHESIS
)

// The acceptance: submit → planning (two tool calls) → two tool
// jobs that overlap in time → synthesis validating against the schema →
// the tree and the event sequence as expected.
func TestAnalysisEndToEnd(t *testing.T) {
	t.Parallel()
	eachWriterMode(t, testAnalysisEndToEnd)
}

func testAnalysisEndToEnd(t *testing.T, singleWriter bool) {
	e := newEnvIn(t, singleWriter)
	e.scriptBHPPlan()
	e.scriptSynthesis(stockAnswer)
	e.market.set(func(m *market) { m.barrier = 2 }) // each request waits for the other
	e.start(analysis.Hooks{})

	root := e.submit("Analyse BHP for investment", "stock_analysis")
	if root.GetType() != orchestratorv1.JobType_JOB_TYPE_ANALYSIS_REQUEST || root.GetTitle() != "Analyse BHP for investment" {
		t.Fatalf("submitted job %v", root)
	}
	collect := e.watch(root.GetId(), 0)
	final := e.waitStatus(root.GetId(), complete, 30*time.Second)

	// The tree: planning, the two tools in plan order, synthesis.
	kids := final.GetChildren()
	if len(kids) != 4 || kids[0].GetType() != typePlanning || kids[1].GetType() != typeTool ||
		kids[2].GetType() != typeTool || kids[3].GetType() != typeSynthesis {
		t.Fatalf("children %v", kids)
	}
	for _, k := range kids {
		if k.GetStatus() != complete || k.GetParentId() != root.GetId() || k.GetAttempts() != 1 {
			t.Errorf("child %s %s: status %s parent %s attempts %d", k.GetType(), k.GetTitle(), k.GetStatus(), k.GetParentId(), k.GetAttempts())
		}
	}
	stock, fin := kids[1], kids[2]
	if stock.GetToolName() != "get_stock_price" || stock.GetTitle() != `get_stock_price {ticker: "BHP"}` ||
		fin.GetTitle() != `get_financials {ticker: "BHP", report_type: "quarterly"}` {
		t.Errorf("tool jobs %q %q", stock.GetTitle(), fin.GetTitle())
	}
	if fin.GetInput().AsMap()["report_type"] != "quarterly" {
		t.Errorf("tool input %v", fin.GetInput().AsMap())
	}
	if !strings.HasPrefix(stock.GetIdempotencyKey(), root.GetId()+"/get_stock_price/") || stock.GetIdempotencyKey() == fin.GetIdempotencyKey() {
		t.Errorf("idempotency keys %q %q", stock.GetIdempotencyKey(), fin.GetIdempotencyKey())
	}
	// Overlap: both requests were in flight at once, and the job times say so.
	if got := e.market.maxInflight(); got != 2 {
		t.Errorf("market data saw at most %d requests at once, want 2", got)
	}
	if !stock.GetStartTime().AsTime().Before(fin.GetEndTime().AsTime()) || !fin.GetStartTime().AsTime().Before(stock.GetEndTime().AsTime()) {
		t.Errorf("tool jobs did not overlap: %v–%v and %v–%v", stock.GetStartTime().AsTime(), stock.GetEndTime().AsTime(),
			fin.GetStartTime().AsTime(), fin.GetEndTime().AsTime())
	}
	if d := stock.GetOutput().AsMap()["data"].(map[string]any); d["price"] != 45.1 {
		t.Errorf("stock output %v", d)
	}

	// The answer: the model's fields, our data_sources and data_gaps.
	out := outputMap(final)
	if out["ticker"] != "BHP" || out["summary"] != stockAnswer["summary"] {
		t.Errorf("answer %v", out)
	}
	if got := out["data_sources"]; mustJSON(got) != `["get_stock_price","get_financials"]` {
		t.Errorf("data_sources = %v", got)
	}
	if got := out["data_gaps"]; mustJSON(got) != `[]` {
		t.Errorf("data_gaps = %v", got)
	}
	if mustJSON(outputMap(kids[3])) != mustJSON(out) {
		t.Errorf("synthesis output %v differs from the analysis output", outputMap(kids[3]))
	}

	// What the model saw: planning with tools and tool choice required and
	// the no-memory prompt; synthesis with a JSON schema that does not ask
	// for the computed fields (it declares them as the service's to set) and
	// the tool results in the prompt.
	reqs := e.sim.ChatRequests()
	if len(reqs) != 2 {
		t.Fatalf("model saw %d requests, want planning + synthesis", len(reqs))
	}
	plan, synth := reqs[0], reqs[1]
	if plan.ToolChoice != "required" || !slices.Equal(plan.Tools, []string{"get_stock_price", "get_financials"}) ||
		plan.Model != "plan-model" || !strings.Contains(plan.Messages[0].Content, "cannot answer from memory") {
		t.Errorf("planning request: tool_choice %v tools %v model %s system %q", plan.ToolChoice, plan.Tools, plan.Model, plan.Messages[0].Content)
	}
	if synth.Model != "chat-model" || len(synth.Tools) != 0 || synth.JSONMode == "" {
		t.Errorf("synthesis request: model %s tools %v json %q", synth.Model, synth.Tools, synth.JSONMode)
	}
	if slices.Contains(synth.Schema["required"].([]any), any("data_gaps")) || !strings.Contains(synth.AllText(), `"price": 45.1`) {
		t.Errorf("synthesis schema %v / prompt %q", synth.Schema, synth.AllText())
	}

	// The events: every job's own sequence, in increasing stream order,
	// each under an event id that is not the sequence.
	events, err := collect()
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(events); i++ {
		if events[i].stream <= events[i-1].stream || events[i].seq == events[i].stream {
			t.Fatalf("sequences not increasing: %v", events)
		}
	}
	byJob := statusesByJob(events)
	want := map[string][]orchestratorv1.JobStatus{
		root.GetId():    {pending, waiting, complete},
		kids[0].GetId(): {pending, running, complete},
		stock.GetId():   {pending, running, complete},
		fin.GetId():     {pending, running, complete},
		kids[3].GetId(): {pending, running, complete},
	}
	if len(byJob) != len(want) || len(events) != 15 {
		t.Errorf("got %d events of %d jobs: %v", len(events), len(byJob), events)
	}
	for id, w := range want {
		if !slices.Equal(byJob[id], w) {
			t.Errorf("events of %s: %v, want %v", id, byJob[id], w)
		}
	}

	// Replay from the middle (SSE Last-Event-ID) returns exactly the rest.
	mid := events[6].seq
	rest, err := e.watch(root.GetId(), mid)()
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != len(events)-7 || rest[0].seq != events[7].seq {
		t.Errorf("replay after %d: %d events starting %v, want %d starting %d", mid, len(rest), rest, len(events)-7, events[7].seq)
	}

	// A client whose stream was cut after the last event, before the stream
	// ended, resumes with that event's id: nothing is left to send, and the
	// watch ends at once instead of waiting for events that never come.
	start := time.Now()
	tail, err := e.watch(root.GetId(), events[len(events)-1].seq)()
	if err != nil || len(tail) != 0 {
		t.Errorf("resume after the last event: %v, %d events %v; want an empty stream that ends", err, len(tail), tail)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("resume after the last event took %v to end", took)
	}

	// The tree as `agentmesh jobs tree` prints it.
	var b strings.Builder
	if err := jobstree.Print(&b, final); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	patterns := []string{
		`^▼ Analysis: "Analyse BHP for investment" \[complete\] \d+\.\ds$`,
		`^  ├─ Planning \[complete\] \d+\.\ds  → get_stock_price, get_financials$`,
		`^  ├─ Tool: get_stock_price \{ticker: "BHP"\} \[complete\] \d+\.\ds$`,
		`^  ├─ Tool: get_financials \{ticker: "BHP", report_type: "quarterly"\} \[complete\] \d+\.\ds$`,
		`^  └─ Synthesis \[complete\] \d+\.\ds$`,
	}
	if len(lines) != len(patterns) {
		t.Fatalf("tree:\n%s", b.String())
	}
	for i, p := range patterns {
		if !regexp.MustCompile(p).MatchString(lines[i]) {
			t.Errorf("tree line %d %q does not match %s", i, lines[i], p)
		}
	}
}
