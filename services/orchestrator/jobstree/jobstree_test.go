package jobstree

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

var t0 = time.Date(2025, 3, 14, 6, 0, 0, 0, time.UTC)

func at(ms int) *timestamppb.Timestamp {
	return timestamppb.New(t0.Add(time.Duration(ms) * time.Millisecond))
}

func child(typ orchestratorv1.JobType, title string, st orchestratorv1.JobStatus, start, end int) *orchestratorv1.Job {
	j := &orchestratorv1.Job{Type: typ, Title: title, Status: st, CreateTime: at(0), StartTime: at(start)}
	if end >= 0 {
		j.EndTime = at(end)
	}
	return j
}

func TestPrintMatchesIssueExample(t *testing.T) {
	t.Parallel()
	planOut, err := structpb.NewStruct(map[string]any{"tool_calls": []any{
		map[string]any{"name": "get_stock_price", "arguments": map[string]any{"ticker": "BHP"}},
		map[string]any{"name": "get_financials", "arguments": map[string]any{"ticker": "BHP", "report_type": "quarterly"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	const done = orchestratorv1.JobStatus_JOB_STATUS_COMPLETE
	planning := child(orchestratorv1.JobType_JOB_TYPE_PLANNING_CALL, "Planning", done, 0, 800)
	planning.Output = planOut
	root := &orchestratorv1.Job{
		Type: orchestratorv1.JobType_JOB_TYPE_ANALYSIS_REQUEST, Title: "Analyse BHP for investment",
		Status: done, CreateTime: at(0), StartTime: at(0), EndTime: at(2300),
		Children: []*orchestratorv1.Job{
			planning,
			child(orchestratorv1.JobType_JOB_TYPE_TOOL_EXECUTION, `get_stock_price {ticker: "BHP"}`, done, 800, 1200),
			child(orchestratorv1.JobType_JOB_TYPE_TOOL_EXECUTION, `get_financials {ticker: "BHP", report_type: "quarterly"}`, done, 800, 1400),
			child(orchestratorv1.JobType_JOB_TYPE_SYNTHESIS, "Synthesis", done, 1800, 2300),
		},
	}
	var b strings.Builder
	if err := Print(&b, root); err != nil {
		t.Fatal(err)
	}
	want := `▼ Analysis: "Analyse BHP for investment" [complete] 2.3s
  ├─ Planning [complete] 0.8s  → get_stock_price, get_financials
  ├─ Tool: get_stock_price {ticker: "BHP"} [complete] 0.4s
  ├─ Tool: get_financials {ticker: "BHP", report_type: "quarterly"} [complete] 0.6s
  └─ Synthesis [complete] 0.5s
`
	if b.String() != want {
		t.Errorf("Print:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestPrintFailuresAndUnfinished(t *testing.T) {
	t.Parallel()
	root := &orchestratorv1.Job{
		Type: orchestratorv1.JobType_JOB_TYPE_ANALYSIS_REQUEST, Title: "line one\nline two",
		Status: orchestratorv1.JobStatus_JOB_STATUS_WAITING_FOR_CHILDREN, CreateTime: at(0),
		Children: []*orchestratorv1.Job{
			{Type: orchestratorv1.JobType_JOB_TYPE_PLANNING_CALL, Status: orchestratorv1.JobStatus_JOB_STATUS_FAILED,
				StartTime: at(0), EndTime: at(300), Error: "planning failed: no tool calls returned"},
			{Type: orchestratorv1.JobType_JOB_TYPE_TOOL_EXECUTION, ToolName: "get_financials", Status: orchestratorv1.JobStatus_JOB_STATUS_PENDING},
			child(orchestratorv1.JobType_JOB_TYPE_TOOL_EXECUTION, "slow", orchestratorv1.JobStatus_JOB_STATUS_RUNNING, 0, -1),
		},
	}
	var b strings.Builder
	if err := render(&b, root, t0.Add(90*time.Second)); err != nil {
		t.Fatal(err)
	}
	want := `▼ Analysis: "line one line two" [waiting_for_children] 1m30s
  ├─ Planning [failed] 0.3s  ✗ planning failed: no tool calls returned
  ├─ Tool: get_financials [pending]
  └─ Tool: slow [running] 1m30s
`
	if b.String() != want {
		t.Errorf("render:\n%s\nwant:\n%s", b.String(), want)
	}
}
