package classifier

import (
	"context"
	"strings"
	"testing"
	"time"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/classifier/internal/meshtest"
	"github.com/agentmesh/agentmesh/services/classifier/internal/modelcalls"
)

// TestModelOutputOfARunIsBounded: a model steered by the conversations it
// classifies answers at length. A batch whose reasons are 5 MiB each made
// a 32 MB checkpoint and 20,977 events that held up every run of the
// process; a 9 MiB summary a 29 MB one. Now a reason past its schema's
// 2,000 characters is refused by the model gateway (the run stops saying
// so, nothing saved) and the summary is cut to 20,000 bytes.
func TestModelOutputOfARunIsBounded(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	s := startService(t, in, nil, nil)
	ids := importSample(t, s.client)
	sim := in.models.Sim
	isPlan := func(r *providersim.Request) bool { return strings.Contains(r.AllText(), modelcalls.PlanMarker) }
	isBatch := func(r *providersim.Request) bool {
		return !isPlan(r) && !strings.Contains(r.AllText(), modelcalls.SummarizeMarker)
	}
	item := func(id, label, reason string) map[string]any {
		return map[string]any{"id": id, "label": label, "reason": reason}
	}
	run := func(reason, summary string) *classifierv1.Run {
		t.Helper()
		sim.Reset()
		sim.When(providersim.Match{Func: isPlan}).JSON(meshtest.NewPlan(2, nil)).Times(1)
		sim.When(providersim.Match{Func: isBatch}).JSON(map[string]any{"classifications": []any{item(ids[0], "RESOLVED", reason), item(ids[1], "UNRESOLVED", reason)}})
		sim.When(providersim.Match{LastUserContains: modelcalls.SummarizeMarker}).Text(summary)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		st, err := s.client.StartRun(ctx, &classifierv1.StartRunRequest{Scope: testScope, Instruction: "Classify conversations"})
		if err != nil {
			t.Fatal(err)
		}
		evs, err := drain(st)
		if err != nil || len(evs) == 0 {
			t.Fatalf("start: %d events, %v", len(evs), err)
		}
		runID := evs[0].GetRunId()
		for _, c := range []classifierv1.CommandType{classifierv1.CommandType_COMMAND_TYPE_APPROVE_FETCH, classifierv1.CommandType_COMMAND_TYPE_APPROVE_BATCH} {
			if _, err := command(s.client, ctx, runID, c, ""); err != nil {
				break // the run stopped
			}
		}
		got, err := s.client.GetRun(ctx, &classifierv1.GetRunRequest{Scope: testScope, RunId: runID})
		if err != nil {
			t.Fatal(err)
		}
		return got.GetRun()
	}

	r := run(strings.Repeat("R", 5<<20), "ok")
	if r.GetLabelledCount() != 0 || r.GetStopReason() == "" {
		t.Errorf("a batch with 5 MiB reasons: %d labelled, stop reason %q; want it refused, nothing saved", r.GetLabelledCount(), r.GetStopReason())
	}
	r = run("fixed", strings.Repeat("S", 9<<20))
	if n := len(r.GetSummary()); r.GetLabelledCount() != 2 || n == 0 || n > 20_100 {
		t.Errorf("a 9 MiB summary: %d labelled, summary of %d bytes; want 2 and the summary cut to 20,000", r.GetLabelledCount(), n)
	}
}
