package statemachine

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentmesh/agentmesh/services/classifier/internal/runevents"
)

// Config holds the limits and sizes of runs.
type Config struct {
	// MaxModelCalls bounds the model calls of a run.
	MaxModelCalls int
	// MaxPlans bounds the plans of a run, refused ones included.
	MaxPlans int
	// MaxBatch bounds the conversations one fetch returns.
	MaxBatch int
	// BatchSize is how many conversations one classification call takes
	// (at most MaxBatch).
	BatchSize int
	// ChunkSize is the size of the *.delta pieces of streamed texts.
	ChunkSize int
}

// Validate reports an unusable configuration, naming the field.
func (c Config) Validate() error {
	switch {
	case c.MaxModelCalls < 1:
		return errors.New("MaxModelCalls must be at least 1")
	case c.MaxPlans < 1:
		return errors.New("MaxPlans must be at least 1")
	case c.MaxBatch < 1:
		return errors.New("MaxBatch must be at least 1")
	case c.BatchSize < 1 || c.BatchSize > c.MaxBatch:
		return fmt.Errorf("BatchSize must be between 1 and MaxBatch (%d)", c.MaxBatch)
	case c.ChunkSize < 1:
		return errors.New("ChunkSize must be at least 1")
	}
	return nil
}

// Machine applies the rules with one configuration. It is a value with no
// state of its own; use it from any goroutine.
type Machine struct {
	cfg Config
}

// New returns a machine for cfg (see Config.Validate).
func New(cfg Config) (Machine, error) {
	if err := cfg.Validate(); err != nil {
		return Machine{}, fmt.Errorf("statemachine: %w", err)
	}
	return Machine{cfg: cfg}, nil
}

// Config returns the machine's configuration.
func (m Machine) Config() Config { return m.cfg }

// Transition is the outcome of one step: the new run context and the events
// to emit with it, checkpointed together.
type Transition struct {
	// Run is the new context.
	Run Run
	// Events are emitted in order, in the same write as Run.
	Events []runevents.Event
}

func (t *Transition) emit(typ, log string, data any) {
	t.Events = append(t.Events, runevents.Event{Type: typ, LogMessage: log, Data: data})
}

func begin(r Run) Transition { return Transition{Run: r.clone()} }

// Start creates a run in Planning.
func (m Machine) Start(id, tenantID, projectID, instruction string) Transition {
	t := Transition{Run: Run{ID: id, TenantID: tenantID, ProjectID: projectID, Instruction: instruction, State: Planning}}
	t.emit(runevents.RunStarted, "Classification agent started successfully", map[string]any{"runId": id, "instruction": instruction})
	t.emit(runevents.PlanningStarted, "Creating classification plan...", map[string]any{"planNumber": 1, "maxPlans": m.cfg.MaxPlans})
	return t
}

// Resumed emits agent.run.resumed for a run picked up from its checkpoint;
// a run waiting for a human gets its approval request again, so a
// reconnecting client sees what it must decide.
func (m Machine) Resumed(r Run) (Transition, error) {
	if r.State.Finished() {
		return Transition{}, &StateError{What: "resume", State: r.State}
	}
	t := begin(r)
	t.emit(runevents.RunResumed, "Agent resumed from checkpoint", map[string]any{"runId": r.ID, "state": string(r.State)})
	switch r.State {
	case AwaitingFetchApproval:
		m.emitAwaitingFetch(&t)
	case AwaitingBatchApproval:
		m.emitAwaitingBatch(&t)
	}
	return t, nil
}

// LimitStop returns the transition to Stopped when making one more model
// call would exceed MaxModelCalls.
func (m Machine) LimitStop(r Run) (Transition, bool) {
	if r.ModelCalls >= m.cfg.MaxModelCalls {
		return m.Stop(r, fmt.Sprintf("model call limit reached (%d of %d calls used)", r.ModelCalls, m.cfg.MaxModelCalls)), true
	}
	return Transition{}, false
}

// PlanLimitStop returns the transition to Stopped when making one more plan
// would exceed MaxPlans.
func (m Machine) PlanLimitStop(r Run) (Transition, bool) {
	if len(r.Plans) >= m.cfg.MaxPlans {
		reason := fmt.Sprintf("plan limit reached (%d of %d plans made)", len(r.Plans), m.cfg.MaxPlans)
		if r.ReplanReason != "" {
			reason += "; last problem: " + r.ReplanReason
		}
		return m.Stop(r, reason), true
	}
	return Transition{}, false
}

// Planned records a plan made in Planning (one model call). A plan whose
// query was refused (refusal non-nil) is recorded with the reason and the
// run replans on its own; an accepted plan moves to Fetching.
func (m Machine) Planned(r Run, p Plan, refusal error) (Transition, error) {
	if r.State != Planning {
		return Transition{}, &StateError{What: "plan", State: r.State}
	}
	t := begin(r)
	t.Run.ModelCalls++
	if refusal == nil && p.TargetSampleSize < 1 {
		refusal = fmt.Errorf("targetSampleSize must be at least 1, got %d", p.TargetSampleSize)
	}
	if refusal != nil {
		p.Refused = refusal.Error()
		t.Run.Plans = append(t.Run.Plans, p)
		t.Run.ReplanReason = "the plan was refused: " + p.Refused
		m.emitReplanning(&t, "Plan refused - creating new plan automatically")
		return t, nil
	}
	t.Run.Plans = append(t.Run.Plans, p)
	t.Run.State = Fetching
	t.Run.ReplanReason = ""
	t.Run.FetchedIDs, t.Run.FetchSample, t.Run.ContinuationFetch = nil, nil, false
	t.Run.BatchIDs, t.Run.PendingBatch = nil, nil
	t.emit(runevents.PlanningCompleted, "Plan created successfully", planData(&p))
	t.Events = append(t.Events, runevents.Stream("agent.run.plan_summary", "Generating plan summary...",
		"Plan summary generation completed", p.DetailsMarkdown, m.cfg.ChunkSize)...)
	m.emitFetching(&t)
	return t, nil
}

// FetchLimit is how many conversations the next fetch may return: at most
// MaxBatch, and no more than the target still needs.
func (m Machine) FetchLimit(r Run) int {
	need := r.Target() - len(r.LabelledIDs)
	return max(1, min(m.cfg.MaxBatch, need))
}

func (m Machine) emitFetching(t *Transition) {
	n := m.FetchLimit(t.Run)
	t.emit(runevents.FetchingStarted, fmt.Sprintf("Fetching up to %d conversations...", n), map[string]any{"limit": n})
}

func (m Machine) emitReplanning(t *Transition, log string) {
	t.Run.State = Planning
	t.emit(runevents.Replanning, log, map[string]any{
		"reason": t.Run.ReplanReason, "plansMade": len(t.Run.Plans), "maxPlans": m.cfg.MaxPlans,
	})
	t.emit(runevents.PlanningStarted, "Creating classification plan...", map[string]any{
		"planNumber": len(t.Run.Plans) + 1, "maxPlans": m.cfg.MaxPlans, "reason": t.Run.ReplanReason,
	})
}

// Fetched records the result of Fetching. A failed or empty fetch of a new
// plan goes back to Planning with the reason ("replanning"); an empty
// further page of an accepted plan means its query is exhausted, and the
// run summarises what it labelled (or replans if it labelled nothing).
func (m Machine) Fetched(r Run, ids []string, sample *Sample, fetchErr error) (Transition, error) {
	if r.State != Fetching {
		return Transition{}, &StateError{What: "fetch", State: r.State}
	}
	t := begin(r)
	if fetchErr != nil {
		t.Run.ReplanReason = "the fetch failed: " + fetchErr.Error()
		t.Run.FetchedIDs, t.Run.FetchSample = nil, nil
		m.emitReplanning(&t, "Fetch failed - creating new plan automatically")
		return t, nil
	}
	if len(ids) == 0 {
		t.Run.FetchedIDs, t.Run.FetchSample = nil, nil
		if r.ContinuationFetch && len(r.LabelledIDs) > 0 {
			t.emit(runevents.FetchingCompleted, "Fetched 0 conversations: the plan's query has no more matches",
				map[string]any{"conversationCount": 0, "conversationIds": []string{}})
			m.enterSummarizing(&t)
			return t, nil
		}
		t.Run.ReplanReason = "the plan's query matched no conversation that is not labelled yet"
		m.emitReplanning(&t, "Fetch returned no conversations - creating new plan automatically")
		return t, nil
	}
	if limit := m.FetchLimit(r); len(ids) > limit {
		// The store bounds every fetch, so this guards the limit itself.
		return m.Stop(r, fmt.Sprintf("batch limit exceeded (a fetch returned %d conversations, the limit is %d)", len(ids), limit)), nil
	}
	t.Run.State = AwaitingFetchApproval
	t.Run.FetchedIDs = slices.Clone(ids)
	t.Run.FetchSample = sample
	t.Run.ContinuationFetch = false
	t.emit(runevents.FetchingCompleted, fmt.Sprintf("Fetched %d conversations successfully", len(ids)),
		map[string]any{"conversationCount": len(ids), "conversationIds": ids})
	m.emitAwaitingFetch(&t)
	return t, nil
}

func (m Machine) emitAwaitingFetch(t *Transition) {
	r := &t.Run
	fetched := map[string]any{"conversationCount": len(r.FetchedIDs), "conversationIds": r.FetchedIDs}
	if s := r.FetchSample; s != nil {
		fetched["sampleConversation"] = map[string]any{"id": s.ID, "messageCount": s.MessageCount, "summary": s.Summary}
	}
	t.emit(runevents.AwaitingFetchApproval,
		fmt.Sprintf("Waiting for approval of fetched data (%d conversations)", len(r.FetchedIDs)),
		map[string]any{"plan": planData(r.CurrentPlan()), "fetchedData": fetched})
}

// planData is a plan as the original agent's events show it.
func planData(p *Plan) map[string]any {
	if p == nil {
		return nil
	}
	return map[string]any{
		"targetSampleSize":       p.TargetSampleSize,
		"strategy":               p.Strategy,
		"planDetails":            p.DetailsMarkdown,
		"additionalInstructions": p.AdditionalInstructions,
		"query":                  rawJSON(p.QueryJSON),
	}
}

// Command applies a human command. Stop applies in every unfinished state;
// the approvals and rejections only in their awaiting state. Errors are
// *StateError.
func (m Machine) Command(r Run, c Command, feedback string) (Transition, error) {
	if r.State.Finished() {
		return Transition{}, &StateError{What: string(c), State: r.State}
	}
	feedback = strings.TrimSpace(feedback)
	switch c {
	case Stop:
		return m.Stop(r, "stopped by user"), nil
	case ApproveFetch:
		if r.State != AwaitingFetchApproval {
			break
		}
		t := begin(r)
		m.enterClassifying(&t)
		return t, nil
	case ApproveBatch:
		if r.State != AwaitingBatchApproval {
			break
		}
		t := begin(r)
		t.Run.State = Saving
		t.emit(runevents.SavingStarted, "Saving classification results...", map[string]any{"count": len(r.PendingBatch)})
		return t, nil
	case RejectFetch, RejectBatch:
		if (c == RejectFetch && r.State != AwaitingFetchApproval) || (c == RejectBatch && r.State != AwaitingBatchApproval) {
			break
		}
		t := begin(r)
		t.Run.State = Planning
		t.Run.Feedback = feedback
		t.Run.ReplanReason = ""
		t.Run.FetchedIDs, t.Run.FetchSample, t.Run.BatchIDs, t.Run.PendingBatch = nil, nil, nil, nil
		what := "fetched data"
		if c == RejectBatch {
			what = "batch"
		}
		t.emit(runevents.PlanningStarted, fmt.Sprintf("The %s was rejected - creating a new classification plan with your feedback...", what),
			map[string]any{"planNumber": len(r.Plans) + 1, "maxPlans": m.cfg.MaxPlans, "feedback": feedback})
		return t, nil
	default:
		return Transition{}, fmt.Errorf("%w: unknown command %q", ErrWrongState, c)
	}
	return Transition{}, &StateError{What: string(c), State: r.State}
}

// enterClassifying picks the next batch: the first BatchSize fetched
// conversations not labelled yet.
func (m Machine) enterClassifying(t *Transition) {
	r := &t.Run
	var batch []string
	for _, id := range r.FetchedIDs {
		if len(batch) == m.cfg.BatchSize {
			break
		}
		if !r.Labelled(id) {
			batch = append(batch, id)
		}
	}
	r.State = Classifying
	r.BatchIDs = batch
	r.PendingBatch = nil
	t.emit(runevents.ClassifyingStarted, fmt.Sprintf("Classifying %d conversations...", len(batch)),
		map[string]any{"conversationIds": batch})
}

// Classified records a batch's classifications (one model call). They must
// cover exactly the batch, once each, with valid labels; otherwise the error
// matches ErrInvalidResult and the caller fails the run.
func (m Machine) Classified(r Run, cls []Classification) (Transition, error) {
	if r.State != Classifying {
		return Transition{}, &StateError{What: "classify", State: r.State}
	}
	byID := map[string]Classification{}
	for _, c := range cls {
		if !slices.Contains(r.BatchIDs, c.ConversationID) {
			return Transition{}, fmt.Errorf("%w: classification of %q, which is not in the batch", ErrInvalidResult, c.ConversationID)
		}
		if _, dup := byID[c.ConversationID]; dup {
			return Transition{}, fmt.Errorf("%w: %q classified twice", ErrInvalidResult, c.ConversationID)
		}
		if !c.Label.Valid() {
			return Transition{}, fmt.Errorf("%w: label %q of %q is not RESOLVED or UNRESOLVED", ErrInvalidResult, c.Label, c.ConversationID)
		}
		byID[c.ConversationID] = c
	}
	for _, id := range r.BatchIDs {
		if _, ok := byID[id]; !ok {
			return Transition{}, fmt.Errorf("%w: conversation %q of the batch was not classified", ErrInvalidResult, id)
		}
	}
	t := begin(r)
	t.Run.ModelCalls++
	t.Run.State = AwaitingBatchApproval
	t.Run.PendingBatch = make([]Classification, 0, len(r.BatchIDs))
	for _, id := range r.BatchIDs {
		t.Run.PendingBatch = append(t.Run.PendingBatch, byID[id])
	}
	progress := percent(len(r.LabelledIDs)+len(r.BatchIDs), r.Target())
	t.emit(runevents.ClassifyingCompleted, fmt.Sprintf("Successfully classified %d conversations (%d%% complete)", len(cls), progress),
		map[string]any{"classified": len(cls), "progress": progress, "totalClassified": len(r.LabelledIDs), "target": r.Target()})
	t.Events = append(t.Events, runevents.Stream("agent.run.batch_summary", "Generating batch summary...",
		"Batch summary generation completed", batchSummary(t.Run.PendingBatch), m.cfg.ChunkSize)...)
	m.emitAwaitingBatch(&t)
	return t, nil
}

func (m Machine) emitAwaitingBatch(t *Transition) {
	r := &t.Run
	preview := []map[string]any{}
	for _, c := range r.PendingBatch[:min(5, len(r.PendingBatch))] {
		preview = append(preview, map[string]any{"id": c.ConversationID, "label": string(c.Label)})
	}
	progress := percent(len(r.LabelledIDs)+len(r.PendingBatch), r.Target())
	t.emit(runevents.AwaitingBatchApproval,
		fmt.Sprintf("Waiting for batch approval (%d conversations classified, %d%% complete)", len(r.PendingBatch), progress),
		preview)
}

// batchSummary describes a classified batch in a few lines.
func batchSummary(cls []Classification) string {
	res := 0
	for _, c := range cls {
		if c.Label == Resolved {
			res++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Successfully processed %d conversations: %d RESOLVED, %d UNRESOLVED.\n", len(cls), res, len(cls)-res)
	for _, c := range cls {
		fmt.Fprintf(&b, "- %s: %s — %s\n", c.ConversationID, c.Label, c.Reason)
	}
	return b.String()
}

// Saved records that the pending batch's labels were written. The run goes
// on with the next fetched batch, the next page of the plan, or — once the
// target is reached — Summarizing. Labels already recorded are not counted
// twice.
func (m Machine) Saved(r Run) (Transition, error) {
	if r.State != Saving {
		return Transition{}, &StateError{What: "save", State: r.State}
	}
	t := begin(r)
	saved := make([]map[string]any, 0, len(r.PendingBatch))
	ids := make([]string, 0, len(r.PendingBatch))
	for _, c := range r.PendingBatch {
		ids = append(ids, c.ConversationID)
		saved = append(saved, map[string]any{"id": c.ConversationID, "label": string(c.Label)})
		if t.Run.Labelled(c.ConversationID) {
			continue
		}
		t.Run.LabelledIDs = append(t.Run.LabelledIDs, c.ConversationID)
		if c.Label == Resolved {
			t.Run.Resolved++
		} else {
			t.Run.Unresolved++
		}
	}
	t.Run.PendingBatch, t.Run.BatchIDs = nil, nil
	total, target := len(t.Run.LabelledIDs), t.Run.Target()
	progress := t.Run.Progress()
	t.emit(runevents.SavingCompleted, fmt.Sprintf("Saved %d classifications. Total progress: %d/%d (%d%%)", len(ids), total, target, progress),
		map[string]any{"saved": len(ids), "totalClassified": total, "target": target, "progress": progress})
	t.emit(runevents.BatchData, "", map[string]any{"conversationIds": ids, "classifications": saved, "progress": progress})
	switch {
	case total >= target:
		m.enterSummarizing(&t)
	case slices.ContainsFunc(t.Run.FetchedIDs, func(id string) bool { return !t.Run.Labelled(id) }):
		m.enterClassifying(&t)
	default:
		t.Run.State = Fetching
		t.Run.FetchedIDs, t.Run.FetchSample = nil, nil
		t.Run.ContinuationFetch = true
		m.emitFetching(&t)
	}
	return t, nil
}

func (m Machine) enterSummarizing(t *Transition) {
	t.Run.State = Summarizing
	t.emit(runevents.SummaryStarted, "Generating run summary...", nil)
}

// Summarized records the final summary (one model call) and completes the
// run.
func (m Machine) Summarized(r Run, summary string) (Transition, error) {
	if r.State != Summarizing {
		return Transition{}, &StateError{What: "summarize", State: r.State}
	}
	t := begin(r)
	t.Run.ModelCalls++
	t.Run.Summary = summary
	t.Run.State = Completed
	for _, c := range runevents.Chunks(summary, m.cfg.ChunkSize) {
		t.emit(runevents.SummaryDelta, "", c)
	}
	t.emit(runevents.SummaryDone, "Summary generation completed", nil)
	total := len(r.LabelledIDs)
	t.emit(runevents.FinalData, "", map[string]any{"allConversationIds": r.LabelledIDs, "totalClassified": total, "runId": r.ID})
	t.emit(runevents.RunCompleted, fmt.Sprintf("Classification completed! %d conversations classified.", total),
		map[string]any{"runId": r.ID, "totalClassified": total, "resolved": r.Resolved, "unresolved": r.Unresolved, "modelCalls": t.Run.ModelCalls})
	return t, nil
}

// Stop moves an unfinished run to Stopped with reason. A finished run is
// returned unchanged with no events.
func (m Machine) Stop(r Run, reason string) Transition {
	t := begin(r)
	if r.State.Finished() {
		return t
	}
	t.Run.State = Stopped
	t.Run.StopReason = reason
	t.emit(runevents.RunStopped, "Agent execution stopped: "+reason,
		map[string]any{"reason": reason, "state": string(r.State), "totalClassified": len(r.LabelledIDs)})
	return t
}

// Fail moves an unfinished run to Error; the runner then stops it with
// StopAfterError. usedModelCall counts a model call that was made before
// the failure (its result was unusable).
func (m Machine) Fail(r Run, cause error, usedModelCall bool) Transition {
	t := begin(r)
	if r.State.Finished() {
		return t
	}
	if usedModelCall {
		t.Run.ModelCalls++
	}
	t.Run.State = Error
	t.Run.ErrorMessage = fmt.Sprintf("%s: %v", r.State, cause)
	t.emit(runevents.RunError, "Error occurred: "+t.Run.ErrorMessage,
		map[string]any{"message": t.Run.ErrorMessage, "state": string(r.State)})
	return t
}

// StopAfterError moves a run in Error to Stopped.
func (m Machine) StopAfterError(r Run) (Transition, error) {
	if r.State != Error {
		return Transition{}, &StateError{What: "stop after error", State: r.State}
	}
	return m.Stop(r, "error: "+r.ErrorMessage), nil
}

// Corrupt is the transition of a run whose checkpoint cannot be decoded:
// straight to Stopped with the reason, from whatever the header says.
func (m Machine) Corrupt(id string, state State, cause error) Transition {
	t := Transition{Run: Run{ID: id, State: Stopped, StopReason: "checkpoint cannot be decoded: " + cause.Error()}}
	t.emit(runevents.RunError, "Error occurred: the run's checkpoint cannot be decoded; it will not be resumed from an empty state",
		map[string]any{"message": cause.Error(), "state": string(state)})
	t.emit(runevents.RunStopped, "Agent execution stopped: "+t.Run.StopReason,
		map[string]any{"reason": t.Run.StopReason, "state": string(state)})
	return t
}

// rawJSON decodes JSON text for event data; text that is not JSON is kept
// as a string, so an event still shows what the model wrote.
func rawJSON(text string) any {
	if strings.TrimSpace(text) == "" {
		return map[string]any{}
	}
	var v any
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return text
	}
	return v
}
