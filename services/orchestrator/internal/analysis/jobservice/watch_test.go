package jobservice_test

import (
	"slices"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/events"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

// Events of different jobs reach the stream in no fixed order across
// processes: a relay that retries after a NATS fault publishes the
// analysis's "pending" event after its children's events. A watch from the
// start must still begin at the tree's first event. The analysis's pending
// event is removed from the stream here, which is what a watch sees while
// that event is still on its way.
func TestWatchStartsAtTheTreesFirstEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.scriptBHPPlan()
	e.scriptSynthesis(stockAnswer)
	e.start(analysis.Hooks{})

	root := e.submit("Analyse BHP for investment", "stock_analysis")
	final := e.waitStatus(root.GetId(), complete, 30*time.Second)

	ctx := e.ctx(10 * time.Second)
	stream, err := e.bus.JetStream().Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	pendingSubject := events.EventSubject(e.scope.GetTenantId(), "job", root.GetId(), "pending")
	msg, err := stream.GetLastMsgForSubject(ctx, pendingSubject)
	if err != nil {
		t.Fatalf("the analysis's pending event: %v", err)
	}
	if err := stream.DeleteMsg(ctx, msg.Sequence); err != nil {
		t.Fatal(err)
	}

	got, err := e.watch(root.GetId(), 0)()
	if err != nil {
		t.Fatal(err)
	}
	byJob := statusesByJob(got)
	want := map[string][]orchestratorv1.JobStatus{root.GetId(): {waiting, complete}}
	for _, k := range final.GetChildren() {
		want[k.GetId()] = []orchestratorv1.JobStatus{pending, running, complete}
	}
	if len(byJob) != len(want) {
		t.Errorf("events of %d jobs, want %d: %v", len(byJob), len(want), got)
	}
	for id, w := range want {
		if !slices.Equal(byJob[id], w) {
			t.Errorf("events of %s: %v, want %v", id, byJob[id], w)
		}
	}
}
