package jobservice_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

// transitions reads agentmesh.orchestrator.job.transitions as
// "type→to" → count.
func transitions(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	return testkit.CounterSums(t, r, "agentmesh.orchestrator.job.transitions", func(a *attribute.Set) string {
		typ, _ := a.Value(attribute.Key("type"))
		to, _ := a.Value(attribute.Key("to"))
		return typ.AsString() + "→" + to.AsString()
	})
}

// TestJobTransitionsCountedOnce: an analysis counts each job's statuses
// once (created pending, running, waiting, complete) however many times
// its running jobs' claims are renewed, and a work item delivered again
// for a job that already finished — as JetStream does after a worker dies
// before its acknowledgement — counts nothing.
//
// Not parallel: the counter lives on the global meter provider, which this
// test installs; the package's parallel tests wait until it has ended.
func TestJobTransitionsCountedOnce(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	before := transitions(t, reader)

	e := newEnv(t)
	e.scriptBHPPlan()
	e.scriptSynthesis(stockAnswer)
	// The tools' requests wait for a third that never comes (5 s): their
	// workers renew their claims meanwhile, writes that leave the status
	// as it is and so count nothing.
	e.market.set(func(m *market) { m.barrier = 3 })
	e.cfg.ToolTimeout = 15 * time.Second
	e.start(analysis.Hooks{})
	root := e.submit("Analyse BHP for investment", "stock_analysis")
	final := e.waitStatus(root.GetId(), orchestratorv1.JobStatus_JOB_STATUS_COMPLETE, 30*time.Second)
	tools := childrenOf(final, orchestratorv1.JobType_JOB_TYPE_TOOL_EXECUTION)
	if len(tools) != 2 {
		t.Fatalf("tool jobs %v", tools)
	}

	delta := func() map[string]int64 {
		now := transitions(t, reader)
		for k, v := range before {
			now[k] -= v
			if now[k] == 0 {
				delete(now, k)
			}
		}
		return now
	}
	want := map[string]int64{
		"analysis_request→pending": 1, "analysis_request→waiting_for_children": 1, "analysis_request→complete": 1,
		"planning_call→pending": 1, "planning_call→running": 1, "planning_call→complete": 1,
		"tool_execution→pending": 2, "tool_execution→running": 2, "tool_execution→complete": 2,
		"synthesis→pending": 1, "synthesis→running": 1, "synthesis→complete": 1,
	}
	// The root may run before it waits; count what the store saw.
	got := delta()
	if n := got["analysis_request→running"]; n > 0 {
		want["analysis_request→running"] = n
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("transitions after one analysis:\n got %v\nwant %v", got, want)
	}

	// The first tool job's work item again, under a new event id so that
	// JetStream does not drop it as a duplicate.
	tool := tools[0]
	ev, err := events.NewEvent("analysis.work.tool_execution", analysis.Source, final.GetScope(), root.GetId(),
		&orchestratorv1.JobEvent{Job: &orchestratorv1.Job{Id: tool.GetId(), Type: tool.GetType(), Scope: &commonv1.Scope{TenantId: final.GetScope().GetTenantId(), ProjectId: final.GetScope().GetProjectId()}}, RootId: root.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	seq, err := e.bus.Publish(e.ctx(5*time.Second), events.WorkSubject(analysis.QueueTool), ev)
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := e.bus.JetStream().Consumer(e.ctx(5*time.Second), events.StreamWork, "analysis-tool")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		info, err := consumer.Info(context.Background())
		return err == nil && info.AckFloor.Stream >= seq
	}, "the redelivered work item (stream sequence %d) to be acknowledged", seq)
	if again := delta(); fmt.Sprint(again) != fmt.Sprint(got) {
		t.Fatalf("a work item delivered again changed the counts:\n got %v\nwant %v", again, got)
	}
}
