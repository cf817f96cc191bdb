package classifier

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint"
	"github.com/agentmesh/agentmesh/services/classifier/internal/meshtest"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runevents"
)

const summaryText = "## Classification Run Summary\n\n- 6 conversations classified: 4 RESOLVED, 2 UNRESOLVED.\n- Unresolved ones wait on escalations.\n"

// The full happy path: plan, fetch, approval, batches with approvals,
// a further page of the plan, summary, completion — with every event the
// original agent emitted, labels saved once each, and the events replayable
// from JetStream.
func TestHappyPath(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	s := startService(t, in, nil, nil)
	ids := importSample(t, s.client)
	truth := sampleLabels(ids)
	in.models.ScriptPlans(meshtest.NewPlan(6, nil))
	in.models.ScriptClassifications(ids, 2, truth)
	in.models.ScriptSummary(summaryText)

	runID, evs := startRun(t, s.client, "Classify last week's support conversations")
	wantStart := []string{
		runevents.RunStarted, runevents.PlanningStarted, runevents.PlanningCompleted, runevents.PlanSummaryStarted,
	}
	if got := types(evs); !slices.Equal(got[:4], wantStart) || got[len(got)-1] != runevents.AwaitingFetchApproval {
		t.Fatalf("start stream %v", got)
	}
	// Events are numbered within their run: 1, 2, 3...
	for i, e := range evs {
		if e.GetRunId() != runID || e.GetSequence() != uint64(i)+1 || e.GetTime() == nil {
			t.Fatalf("event %d %s: run %q seq %d time %v", i, e.GetType(), e.GetRunId(), e.GetSequence(), e.GetTime())
		}
	}
	// The plan details stream in deltas that add up to the plan's markdown.
	var details strings.Builder
	for _, e := range evs {
		if e.GetType() == runevents.PlanSummaryDelta {
			details.WriteString(e.GetData().GetStringValue())
		}
	}
	if want := meshtest.NewPlan(6, nil).PlanDetails; details.String() != want {
		t.Errorf("plan_summary deltas %q, want %q", details.String(), want)
	}
	if got := last(t, evs, runevents.FetchingStarted).GetLogMessage(); got != "Fetching up to 4 conversations..." {
		t.Errorf("fetching.started log %q", got)
	}
	await := last(t, evs, runevents.AwaitingFetchApproval)
	if got := await.GetLogMessage(); got != "Waiting for approval of fetched data (4 conversations)" {
		t.Errorf("awaiting log %q", got)
	}
	d := data(await)
	if got := field(t, d, "plan", "targetSampleSize"); got != 6.0 {
		t.Errorf("plan.targetSampleSize %v", got)
	}
	if got := field(t, d, "plan", "additionalInstructions"); got != meshtest.NewPlan(6, nil).AdditionalInstructions {
		t.Errorf("plan.additionalInstructions %v", got)
	}
	if got := field(t, d, "fetchedData", "conversationCount"); got != 4.0 {
		t.Errorf("fetchedData.conversationCount %v", got)
	}
	if got := field(t, d, "fetchedData", "conversationIds"); !slices.Equal(anyStrings(got), ids[:4]) {
		t.Errorf("fetchedData.conversationIds %v, want %v", got, ids[:4])
	}
	sample := field(t, d, "fetchedData", "sampleConversation")
	if field(t, sample, "id") != ids[0] || field(t, sample, "messageCount") != 5.0 ||
		!strings.HasPrefix(field(t, sample, "summary").(string), "Hi, I was charged twice") {
		t.Errorf("sampleConversation %v", sample)
	}
	if r := getRun(t, s.client, runID); r.GetState() != classifierv1.RunState_RUN_STATE_AWAITING_FETCH_APPROVAL || len(r.GetFetchedIds()) != 4 {
		t.Fatalf("run after start: %v", r)
	}
	all := append([]*classifierv1.RunEvent(nil), evs...)

	// First batch.
	evs = mustCommand(t, s.client, runID, classifierv1.CommandType_COMMAND_TYPE_APPROVE_FETCH, "")
	all = append(all, evs...)
	wantBatch := []string{runevents.ClassifyingStarted, runevents.ClassifyingCompleted, runevents.BatchSummaryStarted}
	if got := types(evs); !slices.Equal(got[:3], wantBatch) || got[len(got)-1] != runevents.AwaitingBatchApproval {
		t.Fatalf("approve fetch stream %v", got)
	}
	if got := last(t, evs, runevents.ClassifyingCompleted).GetLogMessage(); got != "Successfully classified 2 conversations (33% complete)" {
		t.Errorf("classifying.completed log %q", got)
	}
	preview := data(last(t, evs, runevents.AwaitingBatchApproval)).([]any)
	if len(preview) != 2 || field(t, preview, "0", "id") != ids[0] || field(t, preview, "0", "label") != truth[ids[0]] {
		t.Errorf("batch preview %v", preview)
	}

	// Approve batches until the run completes: 2 batches of the first page,
	// then a further page of 2 (approved again), then the summary.
	var sawSecondFetch bool
	for step := 0; step < 10; step++ {
		evs = mustCommand(t, s.client, runID, classifierv1.CommandType_COMMAND_TYPE_APPROVE_BATCH, "")
		all = append(all, evs...)
		if has(evs, runevents.AwaitingFetchApproval) {
			sawSecondFetch = true
			if got := field(t, data(last(t, evs, runevents.AwaitingFetchApproval)), "fetchedData", "conversationIds"); !slices.Equal(anyStrings(got), ids[4:6]) {
				t.Errorf("second page %v, want %v", got, ids[4:6])
			}
			evs = mustCommand(t, s.client, runID, classifierv1.CommandType_COMMAND_TYPE_APPROVE_FETCH, "")
			all = append(all, evs...)
		}
		if has(evs, runevents.RunCompleted) {
			break
		}
	}
	if !sawSecondFetch {
		t.Error("the run never fetched a further page for approval")
	}
	// The streams of one run, one after the other, number its events
	// without a gap or a repeat.
	for i, e := range all {
		if e.GetSequence() != uint64(i)+1 {
			t.Fatalf("event %d (%s) has sequence %d", i, e.GetType(), e.GetSequence())
		}
	}
	done := last(t, all, runevents.RunCompleted)
	if done.GetLogMessage() != "Classification completed! 6 conversations classified." {
		t.Errorf("completed log %q", done.GetLogMessage())
	}
	final := data(last(t, all, runevents.FinalData))
	if !slices.Equal(anyStrings(field(t, final, "allConversationIds")), ids[:6]) || field(t, final, "totalClassified") != 6.0 || field(t, final, "runId") != runID {
		t.Errorf("final_data %v", final)
	}
	batchData := data(last(t, all, runevents.BatchData))
	if field(t, batchData, "progress") != 100.0 || len(field(t, batchData, "classifications").([]any)) != 2 {
		t.Errorf("last batch_data %v", batchData)
	}
	var summary strings.Builder
	for _, e := range all {
		if e.GetType() == runevents.SummaryDelta {
			summary.WriteString(e.GetData().GetStringValue())
		}
	}
	if summary.String() != strings.TrimSpace(summaryText) {
		t.Errorf("summary deltas %q", summary.String())
	}
	for _, e := range all {
		if e.GetLogMessage() == "" && !strings.HasSuffix(e.GetType(), ".delta") && e.GetType() != runevents.BatchData && e.GetType() != runevents.FinalData {
			t.Errorf("%s has no logMessage", e.GetType())
		}
	}

	// Labels: exactly the six, as the model gave them, once each.
	want := map[string]string{}
	for _, id := range ids[:6] {
		want[id] = truth[id]
	}
	if got := savedLabels(t, in.db, runID); !mapsEqual(got, want) {
		t.Errorf("saved labels %v, want %v", got, want)
	}
	if n := labelDocs(t, in.db, runID); n != 6 {
		t.Errorf("%d label documents, want 6", n)
	}
	calls := in.models.Calls()
	wantBatches := [][]string{ids[0:2], ids[2:4], ids[4:6]}
	if len(calls.Plans) != 1 || len(calls.Summaries) != 1 || !slices.EqualFunc(calls.Batches, wantBatches, slices.Equal[[]string]) {
		t.Errorf("model calls: %d plans, batches %v, %d summaries", len(calls.Plans), calls.Batches, len(calls.Summaries))
	}
	r := getRun(t, s.client, runID)
	if r.GetState() != classifierv1.RunState_RUN_STATE_COMPLETED || r.GetLabelledCount() != 6 || r.GetModelCalls() != 5 ||
		r.GetSummary() != strings.TrimSpace(summaryText) || r.GetSchemaVersion() != 1 || r.GetVersion() < 10 || r.GetPlanCount() != 1 {
		t.Errorf("final run %v", r)
	}

	// Once its events are out, the finished run leaves the live collection
	// and is still read from the archive.
	testkit.Eventually(t, 10*time.Second, func() bool {
		n, err := in.db.Collection(checkpoint.Collection).CountDocuments(testCtx(t), bson.D{{Key: "_id", Value: runID}})
		return err == nil && n == 0
	}, "run archived")
	if r := getRun(t, s.client, runID); r.GetState() != classifierv1.RunState_RUN_STATE_COMPLETED || r.GetLabelledCount() != 6 {
		t.Errorf("archived run %v", r)
	}

	// A client that reconnects replays the same events from JetStream.
	replayed := replayAll(t, in, runID, 0, len(all))
	for i := range all {
		if replayed[i].GetType() != all[i].GetType() || replayed[i].GetSequence() != all[i].GetSequence() ||
			replayed[i].GetLogMessage() != all[i].GetLogMessage() {
			t.Fatalf("replayed event %d = %s/%d, streamed %s/%d", i, replayed[i].GetType(), replayed[i].GetSequence(), all[i].GetType(), all[i].GetSequence())
		}
	}
	// JetStream keeps state for every subject: the run's events share four.
	prefix := "am.evt." + testScope.GetTenantId() + ".classifier." + runID + "."
	wantSubjects := map[string]uint64{}
	for _, e := range all {
		switch e.GetType() {
		case runevents.RunStarted:
			wantSubjects[prefix+"started"]++
		case runevents.AwaitingFetchApproval, runevents.AwaitingBatchApproval:
			wantSubjects[prefix+"awaiting"]++
		case runevents.RunCompleted:
			wantSubjects[prefix+"ended"]++
		default:
			wantSubjects[prefix+"event"]++
		}
	}
	if got := runSubjects(t, in, runID); !maps.Equal(got, wantSubjects) {
		t.Errorf("the run's %d events are stored on subjects %v, want %v", len(all), got, wantSubjects)
	}
}

func anyStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestResumeReplaysAfterSequence: a client that lost its stream resumes
// with the last sequence it saw and gets the run's later events first; with
// none it gets only what happens from then on; a sequence past the stream's
// end is refused, naming the field.
func TestResumeReplaysAfterSequence(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	s := startService(t, in, nil, nil)
	ids := importSample(t, s.client)
	in.models.ScriptPlans(meshtest.NewPlan(6, nil))
	in.models.ScriptClassifications(ids, 2, sampleLabels(ids))
	in.models.ScriptSummary(summaryText)
	runID, evs := startRun(t, s.client, "Classify last week's support conversations")
	if len(evs) < 4 {
		t.Fatalf("start stream %v", types(evs))
	}

	resumeFrom := func(after uint64) ([]*classifierv1.RunEvent, error) {
		st, err := s.client.ResumeRun(testCtx(t), &classifierv1.ResumeRunRequest{Scope: testScope, RunId: runID, AfterSequence: after})
		if err != nil {
			return nil, err
		}
		return drain(st)
	}
	got, err := resumeFrom(evs[1].GetSequence())
	if err != nil {
		t.Fatalf("ResumeRun after %d: %v", evs[1].GetSequence(), err)
	}
	missed := evs[2:]
	if len(got) < len(missed) {
		t.Fatalf("resumed stream %v, want it to start with the missed %v", types(got), types(missed))
	}
	for i, e := range missed {
		if got[i].GetSequence() != e.GetSequence() || got[i].GetType() != e.GetType() {
			t.Fatalf("resumed event %d: %s #%d, want the missed %s #%d", i, got[i].GetType(), got[i].GetSequence(), e.GetType(), e.GetSequence())
		}
	}

	fresh, err := resumeFrom(0)
	if err != nil {
		t.Fatalf("ResumeRun: %v", err)
	}
	newest := got[len(got)-1].GetSequence()
	for _, e := range fresh {
		if e.GetSequence() <= newest {
			t.Fatalf("ResumeRun without after_sequence replayed %s #%d", e.GetType(), e.GetSequence())
		}
	}

	_, err = resumeFrom(1 << 40)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "after_sequence") {
		t.Fatalf("after_sequence past the end: err = %v, want InvalidArgument naming it", err)
	}
}
