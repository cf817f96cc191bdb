package classifier

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/meshtest"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runevents"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runner"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

const (
	approveFetch = classifierv1.CommandType_COMMAND_TYPE_APPROVE_FETCH
	approveBatch = classifierv1.CommandType_COMMAND_TYPE_APPROVE_BATCH
	stopCommand  = classifierv1.CommandType_COMMAND_TYPE_STOP
)

// Stop works in every state: the run ends Stopped with the state it was
// in, and nothing of that state's work happens afterwards.
func TestStopFromEveryState(t *testing.T) {
	t.Parallel()
	cases := []struct {
		state statemachine.State
		// commands after StartRun that bring the run into state.
		commands []classifierv1.CommandType
		// scriptClassify: answer classifications (else every answer is
		// unusable and fails the run, which is how Error is reached).
		scriptClassify bool
	}{
		{state: statemachine.Planning},
		{state: statemachine.Fetching},
		{state: statemachine.AwaitingFetchApproval},
		{state: statemachine.Classifying, commands: []classifierv1.CommandType{approveFetch}},
		{state: statemachine.AwaitingBatchApproval, commands: []classifierv1.CommandType{approveFetch}, scriptClassify: true},
		{state: statemachine.Saving, commands: []classifierv1.CommandType{approveFetch, approveBatch}, scriptClassify: true},
		{state: statemachine.Summarizing, commands: []classifierv1.CommandType{approveFetch, approveBatch}, scriptClassify: true},
		{state: statemachine.Error, commands: []classifierv1.CommandType{approveFetch}},
	}
	for _, tc := range cases {
		t.Run(string(tc.state), func(t *testing.T) {
			t.Parallel()
			in := newInfra(t)
			var hook runner.Hook
			var entered <-chan string
			var release chan<- struct{}
			waiting := tc.state.Waiting()
			if !waiting {
				hook, entered, release = holdHook(tc.state)
			}
			s := startService(t, in, map[string]string{"CLASSIFIER_MAX_BATCH": "2"}, hook)
			ids := importSample(t, s.client)
			in.models.ScriptPlans(meshtest.NewPlan(2, nil))
			if tc.scriptClassify {
				in.models.ScriptClassifications(ids, 2, sampleLabels(ids))
			} else {
				in.models.ScriptUnusableClassifications()
			}
			in.models.ScriptSummary("summary")

			// Drive the run into the state; the request that enters it is
			// held there by the hook (waiting states hold by themselves).
			type result struct {
				runID string
				evs   []*classifierv1.RunEvent
				err   error
			}
			done := make(chan result, 1)
			ctx := testCtx(t)
			go func() {
				st, err := s.client.StartRun(ctx, &classifierv1.StartRunRequest{Scope: testScope, Instruction: "classify"})
				if err != nil {
					done <- result{err: err}
					return
				}
				evs, err := drain(st)
				res := result{evs: evs, err: err}
				if len(evs) > 0 {
					res.runID = evs[0].GetRunId()
				}
				for _, c := range tc.commands {
					if err != nil {
						break
					}
					res.evs, res.err = command(s.client, ctx, res.runID, c, "")
					err = res.err
				}
				done <- res
			}()
			var runID string
			var driven result
			if waiting {
				driven = <-done
				if driven.err != nil {
					t.Fatalf("driving to %s: %v", tc.state, driven.err)
				}
				runID = driven.runID
			} else {
				select {
				case runID = <-entered:
				case res := <-done:
					t.Fatalf("run never held in %s: %v %v", tc.state, types(res.evs), res.err)
				case <-time.After(30 * time.Second):
					t.Fatalf("run never entered %s", tc.state)
				}
			}
			if r := getRun(t, s.client, runID); r.GetState() != stateToProto(tc.state) {
				t.Fatalf("run is %s, want %s", r.GetState(), tc.state)
			}
			callsAtStop := in.models.Calls()
			labelsAtStop := labelDocs(t, in.db, runID)

			evs := mustCommand(t, s.client, runID, stopCommand, "")
			stopped := last(t, evs, runevents.RunStopped)
			if got := field(t, data(stopped), "state"); got != string(tc.state) {
				t.Errorf("stopped event state %v, want %s", got, tc.state)
			}
			if got := field(t, data(stopped), "reason"); got != "stopped by user" {
				t.Errorf("stopped reason %v", got)
			}

			if !waiting {
				close(release)
				driven = <-done
				if driven.err != nil {
					t.Errorf("the held request ended with %v", driven.err)
				}
				if !has(driven.evs, runevents.RunStopped) {
					t.Errorf("the held request's stream does not show the stop: %v", types(driven.evs))
				}
			}
			r := getRun(t, s.client, runID)
			if r.GetState() != classifierv1.RunState_RUN_STATE_STOPPED || r.GetStopReason() != "stopped by user" {
				t.Errorf("run %s / %q", r.GetState(), r.GetStopReason())
			}
			// Nothing of the state's work happened after the stop.
			if after := in.models.Calls(); after.Total() != callsAtStop.Total() {
				t.Errorf("model calls went from %d to %d after the stop", callsAtStop.Total(), after.Total())
			}
			if n := labelDocs(t, in.db, runID); n != labelsAtStop {
				t.Errorf("labels went from %d to %d after the stop", labelsAtStop, n)
			}
			// The stop is the run's last event.
			all := replayUntil(t, in, runID, runevents.RunStopped)
			if got := all[len(all)-1].GetType(); got != runevents.RunStopped {
				t.Errorf("last event %s", got)
			}
			// And a stopped run stays stopped.
			_, err := command(s.client, testCtx(t), runID, stopCommand, "")
			expectCode(t, err, codes.FailedPrecondition, "RUN_FINISHED")
			_, err = resume(s.client, testCtx(t), runID)
			expectCode(t, err, codes.FailedPrecondition, "RUN_FINISHED")
		})
	}
}

func stateToProto(s statemachine.State) classifierv1.RunState {
	return classifierv1.RunState(classifierv1.RunState_value["RUN_STATE_"+map[statemachine.State]string{
		statemachine.Planning: "PLANNING", statemachine.Fetching: "FETCHING", statemachine.AwaitingFetchApproval: "AWAITING_FETCH_APPROVAL",
		statemachine.Classifying: "CLASSIFYING", statemachine.AwaitingBatchApproval: "AWAITING_BATCH_APPROVAL", statemachine.Saving: "SAVING",
		statemachine.Summarizing: "SUMMARIZING", statemachine.Completed: "COMPLETED", statemachine.Stopped: "STOPPED", statemachine.Error: "ERROR",
	}[s]])
}

// replayUntil replays a run's events from the start until one of type typ
// and whatever follows it within a short grace, so a stray later event
// would show.
func replayUntil(t *testing.T, in *infra, runID, typ string) []*classifierv1.RunEvent {
	t.Helper()
	// Count first, then read exactly that many: the relay has published
	// everything once GetRun reflects the stop and the outbox is empty.
	testkit.Eventually(t, 10*time.Second, func() bool { return pendingOutbox(t, in, runID) == 0 }, "outbox of run %s published", runID)
	all := replayAll(t, in, runID, 0, countEvents(t, in, runID))
	if !has(all, typ) {
		t.Fatalf("no %s in %v", typ, types(all))
	}
	return all
}

// expectCode checks a gRPC error's code and ErrorInfo reason.
func expectCode(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("error %v, want code %s", err, code)
	}
	if reason == "" {
		return
	}
	if grpcx.Reason(err) != reason {
		t.Errorf("error %v lacks reason %s", err, reason)
	}
}
