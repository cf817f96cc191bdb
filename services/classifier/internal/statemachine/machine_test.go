package statemachine

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/classifier/internal/runevents"
)

func machine(t *testing.T) Machine {
	t.Helper()
	m, err := New(Config{MaxModelCalls: 10, MaxPlans: 3, MaxBatch: 4, BatchSize: 2, ChunkSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func evTypes(t Transition) []string {
	out := make([]string, len(t.Events))
	for i, e := range t.Events {
		out[i] = e.Type
	}
	return out
}

// mustT returns a checker for a transition result: mustT(t)(m.Saved(r)).
func mustT(t *testing.T) func(Transition, error) Transition {
	return func(tr Transition, err error) Transition {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
}

// planned returns a run in AwaitingFetchApproval with ids fetched.
func awaitingFetch(t *testing.T, m Machine, target int, ids ...string) Run {
	t.Helper()
	r := m.Start("r1", "acme", "", "classify").Run
	r = mustT(t)(m.Planned(r, Plan{TargetSampleSize: target, DetailsMarkdown: "details", QueryJSON: `{}`}, nil)).Run
	return mustT(t)(m.Fetched(r, ids, &Sample{ID: ids[0], MessageCount: 3, Summary: "s"}, nil)).Run
}

func classify(ids []string, label Label) []Classification {
	var out []Classification
	for _, id := range ids {
		out = append(out, Classification{ConversationID: id, Label: label, Reason: "r"})
	}
	return out
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{
		{MaxModelCalls: 0, MaxPlans: 1, MaxBatch: 1, BatchSize: 1, ChunkSize: 1},
		{MaxModelCalls: 1, MaxPlans: 1, MaxBatch: 2, BatchSize: 3, ChunkSize: 1},
		{MaxModelCalls: 1, MaxPlans: 1, MaxBatch: 1, BatchSize: 1, ChunkSize: 0},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}

// A whole run, transition by transition: states, batches, counters and the
// events each transition emits.
func TestTransitionsOfARun(t *testing.T) {
	t.Parallel()
	m := machine(t)
	start := m.Start("r1", "acme", "p", "classify")
	if start.Run.State != Planning || !slices.Equal(evTypes(start), []string{runevents.RunStarted, runevents.PlanningStarted}) {
		t.Fatalf("start: %s %v", start.Run.State, evTypes(start))
	}
	pl := mustT(t)(m.Planned(start.Run, Plan{TargetSampleSize: 5, DetailsMarkdown: strings.Repeat("d", 40), QueryJSON: `{"channel":"chat"}`}, nil))
	want := []string{runevents.PlanningCompleted, runevents.PlanSummaryStarted, runevents.PlanSummaryDelta, runevents.PlanSummaryDelta,
		runevents.PlanSummaryDelta, runevents.PlanSummaryDone, runevents.FetchingStarted}
	if pl.Run.State != Fetching || pl.Run.ModelCalls != 1 || !slices.Equal(evTypes(pl), want) {
		t.Fatalf("planned: %s calls %d %v", pl.Run.State, pl.Run.ModelCalls, evTypes(pl))
	}
	if m.FetchLimit(pl.Run) != 4 {
		t.Errorf("fetch limit %d, want MaxBatch 4", m.FetchLimit(pl.Run))
	}
	if over := mustT(t)(m.Fetched(pl.Run, []string{"a", "b", "c", "d", "e"}, nil, nil)); over.Run.State != Stopped ||
		over.Run.StopReason != "batch limit exceeded (a fetch returned 5 conversations, the limit is 4)" {
		t.Errorf("a fetch over the limit: %s %q", over.Run.State, over.Run.StopReason)
	}
	f := mustT(t)(m.Fetched(pl.Run, []string{"a", "b", "c", "d"}, &Sample{ID: "a"}, nil))
	if f.Run.State != AwaitingFetchApproval || f.Events[len(f.Events)-1].Type != runevents.AwaitingFetchApproval {
		t.Fatalf("fetched: %s %v", f.Run.State, evTypes(f))
	}
	c := mustT(t)(m.Command(f.Run, ApproveFetch, ""))
	if c.Run.State != Classifying || !slices.Equal(c.Run.BatchIDs, []string{"a", "b"}) {
		t.Fatalf("approve fetch: %s batch %v", c.Run.State, c.Run.BatchIDs)
	}
	b := mustT(t)(m.Classified(c.Run, []Classification{
		{ConversationID: "b", Label: Unresolved, Reason: "pending"}, {ConversationID: "a", Label: Resolved, Reason: "fixed"}}))
	if b.Run.State != AwaitingBatchApproval || b.Run.ModelCalls != 2 || b.Run.PendingBatch[0].ConversationID != "a" {
		t.Fatalf("classified: %s %+v", b.Run.State, b.Run.PendingBatch)
	}
	if got := b.Events[0].LogMessage; got != "Successfully classified 2 conversations (40% complete)" {
		t.Errorf("classifying.completed log %q", got)
	}
	s := mustT(t)(m.Command(b.Run, ApproveBatch, ""))
	if s.Run.State != Saving {
		t.Fatalf("approve batch: %s", s.Run.State)
	}
	// After saving, the rest of the fetched conversations are classified.
	n := mustT(t)(m.Saved(s.Run))
	if n.Run.State != Classifying || !slices.Equal(n.Run.BatchIDs, []string{"c", "d"}) || n.Run.Resolved != 1 || n.Run.Unresolved != 1 {
		t.Fatalf("saved 1: %s batch %v counts %d/%d", n.Run.State, n.Run.BatchIDs, n.Run.Resolved, n.Run.Unresolved)
	}
	if got := n.Events[0].LogMessage; got != "Saved 2 classifications. Total progress: 2/5 (40%)" {
		t.Errorf("saving.completed log %q", got)
	}
	n = mustT(t)(m.Classified(n.Run, classify([]string{"c", "d"}, Resolved)))
	n = mustT(t)(m.Command(n.Run, ApproveBatch, ""))
	// Everything fetched is labelled but the target is not reached: the
	// next page of the same plan is fetched, for one more conversation.
	n = mustT(t)(m.Saved(n.Run))
	if n.Run.State != Fetching || !n.Run.ContinuationFetch || m.FetchLimit(n.Run) != 1 {
		t.Fatalf("saved 2: %s continuation %v limit %d", n.Run.State, n.Run.ContinuationFetch, m.FetchLimit(n.Run))
	}
	n = mustT(t)(m.Fetched(n.Run, []string{"e"}, &Sample{ID: "e"}, nil))
	n = mustT(t)(m.Command(n.Run, ApproveFetch, ""))
	n = mustT(t)(m.Classified(n.Run, classify([]string{"e"}, Unresolved)))
	n = mustT(t)(m.Command(n.Run, ApproveBatch, ""))
	n = mustT(t)(m.Saved(n.Run))
	if n.Run.State != Summarizing || n.Run.Progress() != 100 {
		t.Fatalf("saved 3: %s progress %d", n.Run.State, n.Run.Progress())
	}
	done := mustT(t)(m.Summarized(n.Run, "a summary of the run"))
	want = []string{runevents.SummaryDelta, runevents.SummaryDelta, runevents.SummaryDone, runevents.FinalData, runevents.RunCompleted}
	if done.Run.State != Completed || done.Run.ModelCalls != 5 || !slices.Equal(evTypes(done), want) {
		t.Fatalf("summarized: %s calls %d %v", done.Run.State, done.Run.ModelCalls, evTypes(done))
	}
	if !slices.Equal(done.Run.LabelledIDs, []string{"a", "b", "c", "d", "e"}) || done.Run.Resolved != 3 || done.Run.Unresolved != 2 {
		t.Errorf("labelled %v %d/%d", done.Run.LabelledIDs, done.Run.Resolved, done.Run.Unresolved)
	}
}

func TestTransitionsDoNotAliasTheirInput(t *testing.T) {
	t.Parallel()
	m := machine(t)
	r := awaitingFetch(t, m, 4, "a", "b")
	before := slices.Clone(r.FetchedIDs)
	next := mustT(t)(m.Command(r, RejectFetch, "no"))
	if !slices.Equal(r.FetchedIDs, before) || r.State != AwaitingFetchApproval || next.Run.FetchedIDs != nil {
		t.Errorf("input changed: %+v", r)
	}
}

func TestSavedCountsALabelOnce(t *testing.T) {
	t.Parallel()
	m := machine(t)
	r := awaitingFetch(t, m, 4, "a", "b", "c")
	r = mustT(t)(m.Command(r, ApproveFetch, "")).Run
	r = mustT(t)(m.Classified(r, classify([]string{"a", "b"}, Resolved))).Run
	r = mustT(t)(m.Command(r, ApproveBatch, "")).Run
	r.LabelledIDs = []string{"a"} // as if a label had been recorded before
	r.Resolved = 1
	n := mustT(t)(m.Saved(r))
	if !slices.Equal(n.Run.LabelledIDs, []string{"a", "b"}) || n.Run.Resolved != 2 {
		t.Errorf("labelled %v resolved %d", n.Run.LabelledIDs, n.Run.Resolved)
	}
}

func TestCommandsPerState(t *testing.T) {
	t.Parallel()
	m := machine(t)
	runs := map[State]Run{}
	r := m.Start("r", "t", "", "i").Run
	runs[Planning] = r
	r = mustT(t)(m.Planned(r, Plan{TargetSampleSize: 2, QueryJSON: "{}"}, nil)).Run
	runs[Fetching] = r
	r = mustT(t)(m.Fetched(r, []string{"a", "b"}, nil, nil)).Run
	runs[AwaitingFetchApproval] = r
	r = mustT(t)(m.Command(r, ApproveFetch, "")).Run
	runs[Classifying] = r
	r = mustT(t)(m.Classified(r, classify([]string{"a", "b"}, Resolved))).Run
	runs[AwaitingBatchApproval] = r
	r = mustT(t)(m.Command(r, ApproveBatch, "")).Run
	runs[Saving] = r
	r = mustT(t)(m.Saved(r)).Run
	runs[Summarizing] = r
	runs[Error] = m.Fail(runs[Classifying], errors.New("boom"), true).Run
	runs[Completed] = mustT(t)(m.Summarized(r, "s")).Run
	runs[Stopped] = m.Stop(runs[Planning], "x").Run

	allowed := map[Command][]State{
		ApproveFetch: {AwaitingFetchApproval}, RejectFetch: {AwaitingFetchApproval},
		ApproveBatch: {AwaitingBatchApproval}, RejectBatch: {AwaitingBatchApproval},
		Stop: {Planning, Fetching, AwaitingFetchApproval, Classifying, AwaitingBatchApproval, Saving, Summarizing, Error},
	}
	for cmd, ok := range allowed {
		for _, s := range States {
			run, have := runs[s]
			if !have {
				t.Fatalf("no run in %s", s)
			}
			_, err := m.Command(run, cmd, "feedback")
			switch {
			case slices.Contains(ok, s) && err != nil:
				t.Errorf("%s in %s: %v", cmd, s, err)
			case !slices.Contains(ok, s) && err == nil:
				t.Errorf("%s in %s was accepted", cmd, s)
			case !slices.Contains(ok, s) && s.Finished() && !errors.Is(err, ErrFinished):
				t.Errorf("%s in %s: %v, want ErrFinished", cmd, s, err)
			case !slices.Contains(ok, s) && !s.Finished() && !errors.Is(err, ErrWrongState):
				t.Errorf("%s in %s: %v, want ErrWrongState", cmd, s, err)
			}
		}
	}
	// Stop records where the run was.
	st := mustT(t)(m.Command(runs[Saving], Stop, ""))
	if st.Run.State != Stopped || st.Run.StopReason != "stopped by user" || st.Events[0].Data.(map[string]any)["state"] != "Saving" {
		t.Errorf("stop: %+v %+v", st.Run, st.Events)
	}
	// Error → Stopped.
	es := mustT(t)(m.StopAfterError(runs[Error]))
	if es.Run.State != Stopped || !strings.Contains(es.Run.StopReason, "boom") || runs[Error].ModelCalls != runs[Classifying].ModelCalls+1 {
		t.Errorf("stop after error: %+v", es.Run)
	}
}

func TestRejectionsReplanWithFeedback(t *testing.T) {
	t.Parallel()
	m := machine(t)
	r := awaitingFetch(t, m, 2, "a", "b")
	rf := mustT(t)(m.Command(r, RejectFetch, "  wrong channel "))
	if rf.Run.State != Planning || rf.Run.Feedback != "wrong channel" || rf.Run.FetchedIDs != nil {
		t.Errorf("reject fetch: %+v", rf.Run)
	}
	r = mustT(t)(m.Command(r, ApproveFetch, "")).Run
	r = mustT(t)(m.Classified(r, classify([]string{"a", "b"}, Resolved))).Run
	rb := mustT(t)(m.Command(r, RejectBatch, "too lenient"))
	if rb.Run.State != Planning || rb.Run.Feedback != "too lenient" || rb.Run.PendingBatch != nil || len(rb.Run.LabelledIDs) != 0 {
		t.Errorf("reject batch: %+v", rb.Run)
	}
}

func TestReplanningAndLimits(t *testing.T) {
	t.Parallel()
	m := machine(t)
	r := m.Start("r", "t", "", "i").Run
	// A refused plan is recorded and the run replans.
	rp := mustT(t)(m.Planned(r, Plan{TargetSampleSize: 2, QueryJSON: `{"$where":"1"}`}, errors.New("query.$where: not allowed")))
	if rp.Run.State != Planning || len(rp.Run.Plans) != 1 || rp.Run.Plans[0].Refused == "" || rp.Events[0].Type != runevents.Replanning {
		t.Fatalf("refused: %+v %v", rp.Run, evTypes(rp))
	}
	if rp.Run.Target() != 0 {
		t.Errorf("a refused plan sets target %d", rp.Run.Target())
	}
	// So is a plan without a usable target.
	zero := mustT(t)(m.Planned(r, Plan{TargetSampleSize: 0, QueryJSON: `{}`}, nil))
	if zero.Run.State != Planning || !strings.Contains(zero.Run.ReplanReason, "targetSampleSize") {
		t.Errorf("zero target: %+v", zero.Run)
	}
	// An empty or failed fetch replans.
	f := mustT(t)(m.Planned(rp.Run, Plan{TargetSampleSize: 2, QueryJSON: `{}`}, nil)).Run
	e := mustT(t)(m.Fetched(f, nil, nil, nil))
	if e.Run.State != Planning || e.Events[0].LogMessage != "Fetch returned no conversations - creating new plan automatically" {
		t.Errorf("empty fetch: %s %v", e.Run.State, e.Events[0])
	}
	fe := mustT(t)(m.Fetched(f, nil, nil, errors.New("db down")))
	if fe.Run.State != Planning || !strings.Contains(fe.Run.ReplanReason, "db down") {
		t.Errorf("failed fetch: %+v", fe.Run)
	}
	// The third plan is the last allowed one.
	if _, stop := m.PlanLimitStop(e.Run); stop {
		t.Error("stopped with 2 of 3 plans made")
	}
	third := mustT(t)(m.Planned(e.Run, Plan{TargetSampleSize: 2, QueryJSON: `{}`}, nil)).Run
	third = mustT(t)(m.Fetched(third, nil, nil, nil)).Run
	st, stop := m.PlanLimitStop(third)
	if !stop || st.Run.State != Stopped || !strings.HasPrefix(st.Run.StopReason, "plan limit reached (3 of 3 plans made)") {
		t.Errorf("plan limit: %v %+v", stop, st.Run)
	}
	third.ModelCalls = 10
	mc, stop := m.LimitStop(third)
	if !stop || mc.Run.StopReason != "model call limit reached (10 of 10 calls used)" {
		t.Errorf("model call limit: %v %q", stop, mc.Run.StopReason)
	}
}

func TestClassifiedValidatesTheAnswer(t *testing.T) {
	t.Parallel()
	m := machine(t)
	r := mustT(t)(m.Command(awaitingFetch(t, m, 2, "a", "b"), ApproveFetch, "")).Run
	for name, cls := range map[string][]Classification{
		"missing one":   classify([]string{"a"}, Resolved),
		"outside batch": classify([]string{"a", "b", "z"}, Resolved),
		"twice":         classify([]string{"a", "a", "b"}, Resolved),
		"bad label":     {{ConversationID: "a", Label: Resolved}, {ConversationID: "b", Label: "MAYBE"}},
	} {
		if _, err := m.Classified(r, cls); !errors.Is(err, ErrInvalidResult) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestResumedReemitsTheApprovalRequest(t *testing.T) {
	t.Parallel()
	m := machine(t)
	r := awaitingFetch(t, m, 2, "a", "b")
	tr := mustT(t)(m.Resumed(r))
	if !slices.Equal(evTypes(tr), []string{runevents.RunResumed, runevents.AwaitingFetchApproval}) {
		t.Errorf("resume waiting: %v", evTypes(tr))
	}
	if _, err := m.Resumed(m.Stop(r, "x").Run); !errors.Is(err, ErrFinished) {
		t.Errorf("resume stopped: %v", err)
	}
}

func TestEmptyContinuationSummarises(t *testing.T) {
	t.Parallel()
	m := machine(t)
	r := mustT(t)(m.Command(awaitingFetch(t, m, 10, "a", "b"), ApproveFetch, "")).Run
	r = mustT(t)(m.Classified(r, classify([]string{"a", "b"}, Resolved))).Run
	r = mustT(t)(m.Command(r, ApproveBatch, "")).Run
	r = mustT(t)(m.Saved(r)).Run
	if r.State != Fetching || !r.ContinuationFetch {
		t.Fatalf("after saving everything fetched: %s", r.State)
	}
	n := mustT(t)(m.Fetched(r, nil, nil, nil))
	if n.Run.State != Summarizing {
		t.Errorf("an exhausted plan goes to %s, want Summarizing", n.Run.State)
	}
}
