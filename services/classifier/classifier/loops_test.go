package classifier

import (
	"slices"
	"strings"
	"testing"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	"github.com/agentmesh/agentmesh/services/classifier/internal/meshtest"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runevents"
)

// channelIDs returns the sample ids of one channel, in id order.
func channelIDs(t *testing.T, all []string, channel string) []string {
	t.Helper()
	byChannel := map[string]string{}
	for _, c := range sampleConversations(t) {
		byChannel[c.ID] = c.Channel
	}
	var out []string
	for _, id := range all {
		if byChannel[id] == channel {
			out = append(out, id)
		}
	}
	return out
}

// RejectFetch sends the human's feedback to the next planning call, and
// the new plan's data is fetched for approval.
func TestRejectFetchFeedbackReachesNextPlan(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	s := startService(t, in, nil, nil)
	ids := importSample(t, s.client)
	emails := channelIDs(t, ids, "email")
	in.models.ScriptPlans(meshtest.NewPlan(4, nil), meshtest.NewPlan(4, map[string]any{"channel": "email"}))

	runID, _ := startRun(t, s.client, "Classify conversations")
	const feedback = "Only email conversations, please"
	evs := mustCommand(t, s.client, runID, classifierv1.CommandType_COMMAND_TYPE_REJECT_FETCH, feedback)
	if got := types(evs); got[0] != runevents.PlanningStarted || got[len(got)-1] != runevents.AwaitingFetchApproval {
		t.Fatalf("reject fetch stream %v", got)
	}
	if got := field(t, data(evs[0]), "feedback"); got != feedback {
		t.Errorf("planning.started feedback %v", got)
	}
	calls := in.models.Calls()
	if len(calls.Plans) != 2 {
		t.Fatalf("%d planning calls, want 2", len(calls.Plans))
	}
	if strings.Contains(calls.Plans[0].LastUserText(), feedback) {
		t.Error("the first plan prompt already had the feedback")
	}
	if !strings.Contains(calls.Plans[1].LastUserText(), feedback) {
		t.Errorf("second plan prompt lacks the feedback:\n%s", calls.Plans[1].LastUserText())
	}
	got := field(t, data(last(t, evs, runevents.AwaitingFetchApproval)), "fetchedData", "conversationIds")
	if !slices.Equal(anyStrings(got), emails[:4]) {
		t.Errorf("fetched %v after replanning, want the first emails %v", got, emails[:4])
	}
	r := getRun(t, s.client, runID)
	if r.GetPlanCount() != 2 || r.GetFeedback() != feedback || r.GetState() != classifierv1.RunState_RUN_STATE_AWAITING_FETCH_APPROVAL {
		t.Errorf("run %v", r)
	}
}

// RejectBatch discards the batch (nothing saved), replans with the
// feedback, and the run completes with the new plan's labels only.
func TestRejectBatchFeedbackReachesNextPlan(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	s := startService(t, in, map[string]string{"CLASSIFIER_MAX_BATCH": "2"}, nil)
	ids := importSample(t, s.client)
	truth := sampleLabels(ids)
	chats := channelIDs(t, ids, "chat")
	in.models.ScriptPlans(meshtest.NewPlan(2, nil), meshtest.NewPlan(2, map[string]any{"channel": "chat", "id": map[string]any{"$nin": ids[:2]}}))
	in.models.ScriptClassifications(ids, 2, truth)
	in.models.ScriptClassifications(chats, 2, truth)
	in.models.ScriptSummary("done")

	runID, _ := startRun(t, s.client, "Classify conversations")
	mustCommand(t, s.client, runID, classifierv1.CommandType_COMMAND_TYPE_APPROVE_FETCH, "")
	const feedback = "These labels ignore refunds still pending; prefer chat conversations"
	evs := mustCommand(t, s.client, runID, classifierv1.CommandType_COMMAND_TYPE_REJECT_BATCH, feedback)
	if n := labelDocs(t, in.db, runID); n != 0 {
		t.Fatalf("%d labels saved from a rejected batch", n)
	}
	if got := types(evs); got[0] != runevents.PlanningStarted || got[len(got)-1] != runevents.AwaitingFetchApproval {
		t.Fatalf("reject batch stream %v", got)
	}
	calls := in.models.Calls()
	if len(calls.Plans) != 2 || !strings.Contains(calls.Plans[1].LastUserText(), feedback) {
		t.Fatalf("second plan prompt lacks the feedback (%d plans)", len(calls.Plans))
	}
	// The new plan fetched chats that were not in the rejected batch.
	var want []string
	for _, id := range chats {
		if !slices.Contains(ids[:2], id) {
			want = append(want, id)
		}
	}
	want = want[:2]
	got := anyStrings(field(t, data(last(t, evs, runevents.AwaitingFetchApproval)), "fetchedData", "conversationIds"))
	if !slices.Equal(got, want) {
		t.Fatalf("fetched %v, want %v", got, want)
	}
	mustCommand(t, s.client, runID, classifierv1.CommandType_COMMAND_TYPE_APPROVE_FETCH, "")
	evs = mustCommand(t, s.client, runID, classifierv1.CommandType_COMMAND_TYPE_APPROVE_BATCH, "")
	if !has(evs, runevents.RunCompleted) {
		t.Fatalf("run did not complete: %v", types(evs))
	}
	wantLabels := map[string]string{want[0]: truth[want[0]], want[1]: truth[want[1]]}
	if got := savedLabels(t, in.db, runID); !mapsEqual(got, wantLabels) {
		t.Errorf("labels %v, want %v", got, wantLabels)
	}
}

// An empty fetch replans on its own, with the reason in the next prompt,
// without stopping for the human.
func TestEmptyFetchReplansAutomatically(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	s := startService(t, in, nil, nil)
	ids := importSample(t, s.client)
	in.models.ScriptPlans(meshtest.NewPlan(3, map[string]any{"channel": "fax"}), meshtest.NewPlan(3, nil))

	runID, evs := startRun(t, s.client, "Classify fax conversations")
	rp := last(t, evs, runevents.Replanning)
	if rp.GetLogMessage() != "Fetch returned no conversations - creating new plan automatically" {
		t.Errorf("replanning log %q", rp.GetLogMessage())
	}
	if got := field(t, data(rp), "plansMade"); got != 1.0 {
		t.Errorf("replanning plansMade %v", got)
	}
	if got := types(evs); got[len(got)-1] != runevents.AwaitingFetchApproval {
		t.Fatalf("start stream did not reach the approval: %v", got)
	}
	calls := in.models.Calls()
	if len(calls.Plans) != 2 || !strings.Contains(calls.Plans[1].LastUserText(), "matched no conversation") {
		t.Fatalf("second plan prompt lacks the reason (%d plans)", len(calls.Plans))
	}
	got := anyStrings(field(t, data(last(t, evs, runevents.AwaitingFetchApproval)), "fetchedData", "conversationIds"))
	if !slices.Equal(got, ids[:3]) {
		t.Errorf("fetched %v", got)
	}
	if r := getRun(t, s.client, runID); r.GetPlanCount() != 2 {
		t.Errorf("plan count %d", r.GetPlanCount())
	}
}

// A plan whose query is not on the allow-list never runs: the run replans
// with the refusal in the prompt.
func TestInvalidQueryPlanIsRefused(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	s := startService(t, in, nil, nil)
	importSample(t, s.client)
	in.models.ScriptPlans(
		meshtest.NewPlan(3, map[string]any{"$where": "function() { sleep(10000); return true }"}),
		meshtest.NewPlan(3, map[string]any{"messages.text": map[string]any{"$function": map[string]any{"body": "x"}}}),
		meshtest.NewPlan(3, map[string]any{"channel": "chat"}),
	)
	runID, evs := startRun(t, s.client, "Classify")
	var replans []*classifierv1.RunEvent
	for _, e := range evs {
		if e.GetType() == runevents.Replanning {
			replans = append(replans, e)
		}
		if e.GetType() == runevents.FetchingStarted && len(replans) < 2 {
			t.Fatalf("a refused plan reached Fetching: %v", types(evs))
		}
	}
	if len(replans) != 2 {
		t.Fatalf("%d replanning events, want 2: %v", len(replans), types(evs))
	}
	for i, op := range []string{"$where", "$function"} {
		if reason := field(t, data(replans[i]), "reason").(string); !strings.Contains(reason, op) {
			t.Errorf("replanning %d reason %q does not name %s", i, reason, op)
		}
	}
	calls := in.models.Calls()
	if len(calls.Plans) != 3 || !strings.Contains(calls.Plans[1].LastUserText(), "REFUSED") || !strings.Contains(calls.Plans[1].LastUserText(), "$where") {
		t.Fatalf("planning prompts do not report the refusal (%d plans)", len(calls.Plans))
	}
	r := getRun(t, s.client, runID)
	if r.GetState() != classifierv1.RunState_RUN_STATE_AWAITING_FETCH_APPROVAL || r.GetPlanCount() != 3 {
		t.Errorf("run %v", r)
	}
	if got := r.GetPlans()[0].GetQuery().AsMap(); got["$where"] == nil {
		t.Errorf("refused plan's query not kept for inspection: %v", got)
	}
}

// Each limit stops the run with the reason.
func TestLimits(t *testing.T) {
	t.Parallel()
	t.Run("max plans", func(t *testing.T) {
		t.Parallel()
		in := newInfra(t)
		s := startService(t, in, map[string]string{"CLASSIFIER_MAX_PLANS": "2"}, nil)
		importSample(t, s.client)
		fax := meshtest.NewPlan(3, map[string]any{"channel": "fax"})
		in.models.ScriptPlans(fax, fax, fax)
		runID, evs := startRun(t, s.client, "Classify fax")
		stopped := last(t, evs, runevents.RunStopped)
		if reason := field(t, data(stopped), "reason").(string); !strings.HasPrefix(reason, "plan limit reached (2 of 2 plans made)") {
			t.Errorf("stop reason %q", reason)
		}
		if n := len(in.models.Calls().Plans); n != 2 {
			t.Errorf("%d planning calls, want 2", n)
		}
		if r := getRun(t, s.client, runID); r.GetState() != classifierv1.RunState_RUN_STATE_STOPPED || !strings.Contains(r.GetStopReason(), "plan limit") {
			t.Errorf("run %v", r)
		}
	})
	t.Run("max model calls", func(t *testing.T) {
		t.Parallel()
		in := newInfra(t)
		s := startService(t, in, map[string]string{"CLASSIFIER_MAX_MODEL_CALLS": "2"}, nil)
		ids := importSample(t, s.client)
		in.models.ScriptPlans(meshtest.NewPlan(4, nil))
		in.models.ScriptClassifications(ids, 2, sampleLabels(ids))
		runID, _ := startRun(t, s.client, "Classify")
		mustCommand(t, s.client, runID, classifierv1.CommandType_COMMAND_TYPE_APPROVE_FETCH, "")
		evs := mustCommand(t, s.client, runID, classifierv1.CommandType_COMMAND_TYPE_APPROVE_BATCH, "")
		stopped := last(t, evs, runevents.RunStopped)
		if reason := field(t, data(stopped), "reason"); reason != "model call limit reached (2 of 2 calls used)" {
			t.Errorf("stop reason %q", reason)
		}
		if n := in.models.Calls().Total(); n != 2 {
			t.Errorf("%d model calls, want 2", n)
		}
		if n := labelDocs(t, in.db, runID); n != 2 {
			t.Errorf("%d labels, want the approved 2", n)
		}
		if r := getRun(t, s.client, runID); r.GetState() != classifierv1.RunState_RUN_STATE_STOPPED || r.GetModelCalls() != 2 {
			t.Errorf("run %v", r)
		}
	})
	t.Run("max batch", func(t *testing.T) {
		t.Parallel()
		in := newInfra(t)
		s := startService(t, in, map[string]string{"CLASSIFIER_MAX_BATCH": "3", "CLASSIFIER_BATCH_SIZE": "3"}, nil)
		ids := importSample(t, s.client)
		in.models.ScriptPlans(meshtest.NewPlan(25, nil))
		_, evs := startRun(t, s.client, "Classify 25")
		if got := last(t, evs, runevents.FetchingStarted).GetLogMessage(); got != "Fetching up to 3 conversations..." {
			t.Errorf("fetching.started %q", got)
		}
		got := anyStrings(field(t, data(last(t, evs, runevents.AwaitingFetchApproval)), "fetchedData", "conversationIds"))
		if !slices.Equal(got, ids[:3]) {
			t.Errorf("fetched %v, want 3", got)
		}
	})
}
