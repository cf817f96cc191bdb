package analysis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/libs/priority"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/schemas"
)

// MaxQueryLength bounds an analysis query, in characters.
const MaxQueryLength = 8000

// SubmitRequest is a new analysis.
type SubmitRequest struct {
	// Tenant and Project scope it. Tenant is required.
	Tenant, Project string
	// Query is the question. Required.
	Query string
	// ResponseType names a registered output schema; default
	// generic_analysis.
	ResponseType string
	// OutputSchema is a caller-supplied JSON schema; the analysis's
	// response type is then schemas.Custom, and ResponseType must be
	// empty or that.
	OutputSchema string
	// AllowedTools restricts the planner; empty means every tool.
	AllowedTools []string
	// ID, when set, names the analysis: a caller that must start it once
	// however often it asks (a redelivered event) derives it, and a
	// Submit of an id that exists starts nothing and returns that job.
	ID string
	// RequestID, when set (and ID is not), is the client's id of this
	// submission: the analysis id is derived from it and the scope
	// (RequestJobID), so a repeat returns the analysis the first created,
	// and a repeat that asks for something else fails with
	// ErrRequestReused.
	RequestID string
	// Input adds fields to the job's input, e.g. the document it is
	// about; it does not override query, response_type or allowed_tools.
	Input map[string]any
}

// Submit validates req, stores the analysis and its planning job, and
// returns the analysis job. Invalid requests fail with a *FieldError.
func (e *Engine) Submit(ctx context.Context, req SubmitRequest) (*Job, error) {
	query := strings.TrimSpace(req.Query)
	switch {
	case query == "":
		return nil, &FieldError{Field: "query", Reason: "is required"}
	case utf8.RuneCountInString(query) > MaxQueryLength:
		return nil, &FieldError{Field: "query", Reason: fmt.Sprintf("is longer than %d characters", MaxQueryLength)}
	}
	if req.OutputSchema != "" && req.ResponseType != "" && req.ResponseType != schemas.Custom {
		// Two answers to one question: refuse rather than silently
		// drop the response type the caller named.
		return nil, &FieldError{Field: "response_type", Reason: fmt.Sprintf(
			"is %q, but output_json_schema is set too: send a registered response_type, or your own output_json_schema with response_type empty (or %q), not both",
			req.ResponseType, schemas.Custom)}
	}
	out, err := e.schemas.Resolve(req.ResponseType, req.OutputSchema)
	if err != nil {
		field := "response_type"
		if req.OutputSchema != "" {
			field = "output_json_schema"
		}
		return nil, &FieldError{Field: field, Reason: err.Error()}
	}
	if reg := e.toolsFor(ctx, req.Tenant); len(req.AllowedTools) > 0 {
		if _, err := reg.Definitions(req.AllowedTools); err != nil {
			return nil, &FieldError{Field: "allowed_tools", Reason: fmt.Sprintf("%v (known tools: %s)", err, strings.Join(reg.Names(), ", "))}
		}
	}
	now := e.now()
	id := req.ID
	if id == "" && req.RequestID != "" {
		id = RequestJobID(req.Tenant, req.Project, req.RequestID)
	}
	// same reports whether an analysis found under id is this request's.
	same := func(j *Job) error {
		switch {
		case j.Type != TypeAnalysis:
			return &FieldError{Field: "id", Reason: "names a job that is not an analysis"}
		case req.ID == "" && (j.Query != query || j.ResponseType != out.Name() || j.OutputSchema != req.OutputSchema || !slices.Equal(j.AllowedTools, req.AllowedTools)):
			return fmt.Errorf("%w (analysis %s asked %q)", ErrRequestReused, j.ID, j.Query)
		}
		return nil
	}
	if id == "" {
		id = uuid.Must(uuid.NewV7()).String()
	} else {
		// Looked up first: a finished analysis may have left the live set
		// (archived), where the insert's unique id does not reach.
		existing, err := e.store.Get(ctx, req.Tenant, req.Project, id)
		switch {
		case err == nil:
			if err := same(existing); err != nil {
				return nil, err
			}
			return existing, nil
		case !errors.Is(err, ErrNotFound):
			return nil, err
		}
	}
	input := map[string]any{"query": query, "response_type": out.Name()}
	if len(req.AllowedTools) > 0 {
		input["allowed_tools"] = req.AllowedTools
	}
	for k, v := range req.Input {
		if _, taken := input[k]; !taken {
			input[k] = v
		}
	}
	root := &Job{
		ID:           id,
		RootID:       id,
		Type:         TypeAnalysis,
		Status:       StatusPending,
		Tenant:       req.Tenant,
		Project:      req.Project,
		Title:        query,
		InputJSON:    mustJSON(input),
		CreateTime:   now,
		Query:        query,
		ResponseType: out.Name(),
		OutputSchema: req.OutputSchema,
		AllowedTools: req.AllowedTools,
	}
	created, err := e.insert(ctx, root, false)
	if err != nil {
		return nil, err
	}
	if created {
		// Stored, with its first event: the caller has its answer, and
		// the planning job is created behind it (recovery advances the
		// analysis if this process stops first).
		e.advanceAfterSubmit(ctx, root)
		return root, nil
	}
	// Submitted before under this id: that job, advanced again
	// (idempotent) in case the first Submit stopped before it.
	existing, err := e.store.Get(ctx, root.Tenant, root.Project, id)
	if err != nil {
		return nil, err
	}
	if err := same(existing); err != nil {
		return nil, err
	}
	if err := e.advance(ctx, root.Tenant, root.Project, root.ID); err != nil {
		// The analysis is stored; recovery will advance it.
		e.log.Warn("advance after submit failed", "job_id", id, "error", err)
	}
	if j, err := e.store.Get(ctx, root.Tenant, root.Project, id); err == nil {
		return j, nil
	}
	return root, nil
}

// advanceAfterSubmit advances a just-stored analysis in the background:
// its first step (the planning job) costs a submission several more round
// trips to the store, which the caller need not wait for. Stop waits for
// it.
func (e *Engine) advanceAfterSubmit(ctx context.Context, root *Job) {
	e.submitMu.Lock()
	defer e.submitMu.Unlock()
	if e.stopping {
		return // stopping: recovery advances it at the next start
	}
	ctx, cancel := context.WithTimeout(priority.Background(context.WithoutCancel(ctx)), submitAdvanceTimeout)
	e.submits.Add(1)
	go func() {
		defer e.submits.Done()
		defer cancel()
		if err := e.advance(ctx, root.Tenant, root.Project, root.ID); err != nil {
			// The analysis is stored; recovery will advance it.
			e.log.Warn("advance after submit failed", "job_id", root.ID, "error", err)
		}
	}()
}

// submitAdvanceTimeout bounds advanceAfterSubmit.
const submitAdvanceTimeout = 30 * time.Second

// requestNamespace derives analysis ids from clients' request ids.
var requestNamespace = uuid.MustParse("6f1d0a52-3c47-4b8e-9e21-7a5c3d9f0b14")

// RequestJobID is the id of the analysis a client's submission with
// request id requestID creates in the scope: the same in every replica,
// and different in another scope.
func RequestJobID(tenant, project, requestID string) string {
	return uuid.NewSHA1(requestNamespace, []byte(tenant+"\x00"+project+"\x00"+requestID)).String()
}

// advance brings an analysis one step closer to done from what its children
// say, idempotently: it may create the planning job, the planned tool jobs
// or the synthesis job, re-run synthesis after a retry, and settle the
// analysis. Concurrent calls are safe: children have derived ids and every
// write is version-checked.
func (e *Engine) advance(ctx context.Context, tenant, project, rootID string) error {
	root, err := e.store.Get(ctx, tenant, project, rootID)
	if err != nil {
		return err
	}
	children, err := e.children(ctx, root)
	if err != nil {
		return err
	}
	if root.Status == StatusCancelled {
		if err := e.cancelChildren(ctx, children); err != nil {
			return err
		}
		e.archiveSoon(root)
		return nil
	}
	// finish settles the analysis in a final status; its tree is then
	// finished (every child is final) and goes to the archive.
	finish := func(status Status, output, errMsg string) error {
		if err := e.finishRoot(ctx, root, children, status, output, errMsg); err != nil {
			return err
		}
		e.archiveSoon(root)
		return nil
	}
	var planning, synth *Job
	toolsByID := map[string]*Job{}
	for _, c := range children {
		switch c.Type {
		case TypePlanning:
			planning = c
		case TypeSynthesis:
			synth = c
		case TypeTool:
			toolsByID[c.ID] = c
		}
	}

	if planning == nil {
		now := e.now()
		planning = &Job{
			ID: childID(rootID, "planning"), RootID: rootID, ParentID: rootID, Type: TypePlanning,
			Status: StatusPending, Tenant: tenant, Project: project, Seq: 0, Title: "Planning",
			InputJSON:  mustJSON(map[string]any{"query": root.Query, "allowed_tools": root.AllowedTools}),
			CreateTime: now,
		}
		if _, err := e.insert(ctx, planning, true); err != nil {
			return err
		}
		return e.settleRoot(ctx, root, StatusWaiting, "", "")
	}
	switch planning.Status {
	case StatusPending, StatusRunning, StatusWaiting:
		return e.settleRoot(ctx, root, StatusWaiting, "", "")
	case StatusFailed:
		return finish(StatusFailed, "", planning.Error)
	case StatusCancelled:
		return finish(StatusCancelled, "", "")
	}

	// Planning is complete: every planned call has its tool job.
	var toolJobs, created []*Job
	for i, call := range planning.Plan {
		id := childID(rootID, "tool/"+call.Key)
		if j, ok := toolsByID[id]; ok {
			toolJobs = append(toolJobs, j)
			continue
		}
		j := &Job{
			ID: id, RootID: rootID, ParentID: rootID, Type: TypeTool, Status: StatusPending,
			Tenant: tenant, Project: project, Seq: i + 1, Title: call.Title, ToolName: call.Tool,
			InputJSON: call.Args, IdempotencyKey: call.Key, CreateTime: e.now(),
		}
		created = append(created, j)
		toolJobs = append(toolJobs, j)
	}
	if err := e.insertAll(ctx, created); err != nil {
		return err
	}
	round := int32(0)
	for _, j := range toolJobs {
		if !j.Status.Terminal() {
			return e.settleRoot(ctx, root, StatusWaiting, "", "")
		}
		round = max(round, j.Round)
	}

	// Every tool job is terminal: synthesis of the latest round is due.
	if synth == nil {
		synth = &Job{
			ID: childID(rootID, "synthesis"), RootID: rootID, ParentID: rootID, Type: TypeSynthesis,
			Status: StatusPending, Tenant: tenant, Project: project, Seq: len(planning.Plan) + 1,
			Title: "Synthesis", Round: round, CreateTime: e.now(),
			InputJSON: mustJSON(map[string]any{"query": root.Query, "response_type": root.ResponseType}),
		}
		if _, err := e.insert(ctx, synth, true); err != nil {
			return err
		}
		return e.settleRoot(ctx, root, StatusWaiting, "", "")
	}
	if synth.Round < round {
		if synth.Status.Terminal() {
			if _, err := e.mutate(ctx, tenant, project, synth.ID, func(j *Job) (effect, error) {
				if !j.Status.Terminal() || j.Round >= round {
					return unchanged, nil
				}
				resetForRun(j)
				j.Round = round
				return announced | queued, nil
			}); err != nil {
				return err
			}
		}
		return e.settleRoot(ctx, root, StatusWaiting, "", "")
	}
	switch synth.Status {
	case StatusComplete:
		return finish(StatusComplete, synth.OutputJSON, "")
	case StatusFailed:
		return finish(StatusFailed, "", synth.Error)
	case StatusCancelled:
		return finish(StatusCancelled, "", "")
	default:
		return e.settleRoot(ctx, root, StatusWaiting, "", "")
	}
}

// children returns the children of analysis root in creation order
// (planning, tool jobs in plan order, synthesis), reading each by its
// derived id — the planning job's plan names the tool jobs, and synthesis
// exists only once every tool job does — rather than querying by parent,
// which the embedded FerretDB answers by reading the whole collection.
// Jobs other than analyses have no children.
func (e *Engine) children(ctx context.Context, root *Job) ([]*Job, error) {
	if root.Type != TypeAnalysis {
		return nil, nil
	}
	planning, err := e.store.Get(ctx, root.Tenant, root.Project, childID(root.ID, "planning"))
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// The tool jobs and the synthesis in one read: an advance follows
	// every child's end, so reading them one by one made an analysis's
	// reads grow with the square of its plan.
	ids := make([]string, 0, len(planning.Plan)+1)
	for _, call := range planning.Plan {
		ids = append(ids, childID(root.ID, "tool/"+call.Key))
	}
	if planning.Status == StatusComplete {
		ids = append(ids, childID(root.ID, "synthesis"))
	}
	jobs, err := e.store.GetMany(ctx, root.Tenant, root.Project, ids)
	if err != nil {
		return nil, err
	}
	out := []*Job{planning}
	missing := false
	for _, j := range jobs[:len(planning.Plan)] {
		if j == nil {
			missing = true // being created
			continue
		}
		out = append(out, j)
	}
	if missing || planning.Status != StatusComplete {
		return out, nil // no synthesis before every tool job exists
	}
	if synth := jobs[len(planning.Plan)]; synth != nil {
		out = append(out, synth)
	}
	return out, nil
}

// settleRoot moves the analysis to status with output and error, unless it
// is there already or was cancelled. Moving a finished analysis back to
// waiting (after RetryJob) clears its result.
func (e *Engine) settleRoot(ctx context.Context, root *Job, status Status, output, errMsg string) error {
	return e.settleRootAfter(ctx, root, status, output, errMsg, nil)
}

// finishRoot settles analysis root in a final status. The relay publishes
// the documents of an analysis's jobs side by side, so the analysis's
// final event could reach the stream before its last job's (synthesis
// completes, then the analysis at once): its final write carries, before
// its own event, copies of the job events its children's outboxes still
// hold (UnrelayedReader). The relay publishes a document's entries in
// order, and JetStream keeps the first of two messages with one id
// (events.DuplicateWindow, 2 minutes; both copies are pending at the same
// time, so they are published within it): whichever copy goes first, the
// jobs' events precede the analysis's. Without the read (another store, or
// it failed) the order is not guaranteed, as before.
func (e *Engine) finishRoot(ctx context.Context, root *Job, children []*Job, status Status, output, errMsg string) error {
	if root.Status == status && root.OutputJSON == output && root.Error == errMsg {
		return nil
	}
	var before []events.OutboxEntry
	if r, ok := e.store.(UnrelayedReader); ok && len(children) > 0 {
		ids := make([]string, len(children))
		for i, c := range children {
			ids[i] = c.ID
		}
		var err error
		if before, err = r.Unrelayed(ctx, root.Tenant, root.Project, ids); err != nil {
			e.log.Warn("analysis finishes without its jobs' pending events: its final event may precede theirs", "job_id", root.ID, "error", err)
			before = nil
		}
	}
	return e.settleRootAfter(ctx, root, status, output, errMsg, before)
}

// settleRootAfter is settleRoot with entries written before the root's
// own event.
func (e *Engine) settleRootAfter(ctx context.Context, root *Job, status Status, output, errMsg string, before []events.OutboxEntry) error {
	if root.Status == status && root.OutputJSON == output && root.Error == errMsg {
		return nil // the common case: nothing to do, no read
	}
	update := e.store.Update
	if len(before) > 0 {
		update = func(ctx context.Context, j *Job, version int64, outbox ...events.OutboxEntry) error {
			return e.store.Update(ctx, j, version, append(slices.Clip(before), outbox...)...)
		}
	}
	_, err := e.mutateWith(ctx, root.Tenant, root.Project, root.ID, root, update, func(j *Job) (effect, error) {
		if j.Status == StatusCancelled || (j.Status == status && j.OutputJSON == output && j.Error == errMsg) {
			return unchanged, nil
		}
		now := e.now()
		j.Status, j.OutputJSON, j.Error = status, output, errMsg
		if j.StartTime == nil {
			j.StartTime = timePtr(now)
		}
		if status.Terminal() {
			j.EndTime = timePtr(now)
		} else {
			j.EndTime = nil
		}
		return announced, nil
	})
	return err
}

// cancelChildren cancels every unfinished child of a cancelled analysis.
func (e *Engine) cancelChildren(ctx context.Context, children []*Job) error {
	for _, c := range children {
		if c.Status.Terminal() {
			continue
		}
		if err := e.cancelJob(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// cancelJob moves one unfinished job to cancelled and stops its execution
// in this process (other processes stop on the cancellation event).
func (e *Engine) cancelJob(ctx context.Context, c *Job) error {
	_, err := e.mutate(ctx, c.Tenant, c.Project, c.ID, func(j *Job) (effect, error) {
		if j.Status.Terminal() {
			return unchanged, nil
		}
		j.Status = StatusCancelled
		j.EndTime = timePtr(e.now())
		j.LeaseOwner, j.LeaseUntil = "", nil
		return announced, nil
	})
	e.cancelLocal(c.ID)
	return err
}

// resetForRun makes a finished job runnable again.
func resetForRun(j *Job) {
	j.Status = StatusPending
	j.OutputJSON, j.Error = "", ""
	j.EndTime = nil
	j.LeaseOwner, j.LeaseUntil = "", nil
}

// outputSchema resolves the output schema of an analysis.
func (e *Engine) outputSchema(root *Job) (*schemas.Output, error) {
	return e.schemas.Resolve(root.ResponseType, root.OutputSchema)
}
