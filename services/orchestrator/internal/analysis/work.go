package analysis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/synthesis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/tools"
)

// outcome is what an execution ended with.
type outcome struct {
	status Status
	output string
	err    string
	plan   []PlannedCall
}

func failed(format string, args ...any) outcome {
	return outcome{status: StatusFailed, err: fmt.Sprintf(format, args...)}
}

// handler returns the work queue handler for jobs of type typ.
func (e *Engine) handler(typ Type) events.Handler {
	return func(ctx context.Context, d *events.Delivery) error {
		var item orchestratorv1.JobEvent
		if err := d.Event.GetPayload().UnmarshalTo(&item); err != nil {
			return events.Permanent(fmt.Errorf("analysis: work item %s: %w", d.Event.GetId(), err))
		}
		j := item.GetJob()
		err := e.run(d.Context(), j.GetScope().GetTenantId(), j.GetScope().GetProjectId(), j.GetId(), typ)
		if errors.Is(err, ErrNotFound) {
			e.log.Warn("work item for a job that does not exist; dropped", slog.String("job_id", j.GetId()))
			return nil
		}
		return err
	}
}

// timeout is how long one execution of j may take.
func (e *Engine) timeout(ctx context.Context, j *Job) time.Duration {
	if j.Type != TypeTool {
		return e.cfg.ModelTimeout
	}
	if d, ok := e.cfg.ToolTimeouts[j.ToolName]; ok && d > 0 {
		return d
	}
	if def, ok := e.toolsFor(ctx, j.Tenant).Definition(j.ToolName); ok && def.Timeout > 0 {
		return def.Timeout
	}
	return e.cfg.ToolTimeout
}

// run claims job id, executes it, records the result and advances its
// analysis. It returns nil when the work item can be acknowledged: the job
// ran and its result is stored, or someone else owns or finished it.
func (e *Engine) run(ctx context.Context, tenant, project, id string, typ Type) error {
	token := e.instance + "/" + uuid.NewString()[:8]
	claimed := false
	// The claim is held back where the store can (mutateLazily): the
	// result's write usually stores it too.
	j, err := e.mutateLazily(ctx, tenant, project, id, func(j *Job) (effect, error) {
		claimed = false
		now := e.now()
		if j.Type != typ {
			return unchanged, events.Permanent(fmt.Errorf("analysis: job %s is a %s, not a %s", j.ID, j.Type, typ))
		}
		if !(j.Status == StatusPending || (j.Status == StatusRunning && !j.leaseLive(now))) {
			return unchanged, nil // finished, cancelled, or running under a live lease
		}
		j.Status = StatusRunning
		j.Attempts++
		j.LeaseOwner = token
		j.LeaseUntil = timePtr(now.Add(e.cfg.ClaimTTL))
		if j.StartTime == nil {
			j.StartTime = timePtr(now)
		}
		j.EndTime, j.Error, j.OutputJSON = nil, "", ""
		claimed = true
		return announced, nil
	})
	if err != nil || !claimed {
		return err
	}
	log := e.log.With(slog.String("job_id", j.ID), slog.String("job_type", string(j.Type)), slog.String("root_id", j.RootID))
	root, err := e.store.Get(ctx, tenant, project, j.RootID)
	if err != nil {
		return e.release(ctx, j, err)
	}
	if root.Status == StatusCancelled {
		return e.cancelJob(ctx, j)
	}
	// The claim is renewed until the result is recorded (see claim.go).
	runCtx, lose := context.WithCancelCause(ctx)
	defer lose(nil)
	var latest claimCopy
	latest.Store(j)
	stopHolding := e.holdClaim(runCtx, &latest, token, lose)
	defer stopHolding()
	if e.hooks.BeforeExecute != nil {
		e.hooks.BeforeExecute(j)
	}

	timeout := e.timeout(runCtx, j)
	execCtx, cancel := context.WithTimeout(runCtx, timeout)
	untrack := e.track(j.ID, cancel)
	var out outcome
	switch typ {
	case TypePlanning:
		out = e.plan(execCtx, root)
	case TypeTool:
		out = e.execTool(execCtx, j, timeout)
	case TypeSynthesis:
		out = e.synthesize(execCtx, root)
	}
	untrack()
	cancel()
	switch {
	case ctx.Err() != nil:
		// Shutting down: hand the job back instead of recording an
		// interruption as its result.
		stopHolding()
		return e.release(ctx, j, ctx.Err())
	case errors.Is(context.Cause(runCtx), errClaimLost):
		log.Info("execution stopped: the job was cancelled or another worker took it over")
		return nil
	}

	stored, settled, err := e.settle(ctx, latest.Load(), token, out)
	stopHolding()
	if err != nil {
		return err
	}
	if !settled {
		log.Info("result discarded: job was cancelled or reclaimed while it ran", slog.String("status", string(stored.Status)))
	} else {
		log.Debug("job settled", slog.String("status", string(stored.Status)))
	}
	if e.hooks.AfterSettle != nil && settled {
		e.hooks.AfterSettle(stored)
	}
	if err := e.advance(context.WithoutCancel(ctx), tenant, project, j.RootID); err != nil {
		// The result is stored; the sweep advances the analysis later.
		log.Warn("advance failed", slog.Any("error", err))
	}
	return nil
}

// release gives a claimed job back (pending, lease dropped, queued again)
// and returns cause, so the work item is released too.
func (e *Engine) release(ctx context.Context, j *Job, cause error) error {
	_, err := e.mutate(context.WithoutCancel(ctx), j.Tenant, j.Project, j.ID, func(cur *Job) (effect, error) {
		if cur.Status != StatusRunning || cur.LeaseOwner != j.LeaseOwner {
			return unchanged, nil
		}
		cur.Status = StatusPending
		cur.LeaseOwner, cur.LeaseUntil = "", nil
		return announced | queued, nil
	})
	return errors.Join(cause, err)
}

// plan runs the planning call of root.
func (e *Engine) plan(ctx context.Context, root *Job) outcome {
	reg := e.toolsFor(ctx, root.Tenant)
	defs, err := reg.Definitions(root.AllowedTools)
	if err != nil {
		return failed("planning failed: %v", err)
	}
	if len(defs) == 0 {
		return failed("planning failed: no tools are available")
	}
	p, err := e.planner.Plan(ctx, root.Query, defs, reg)
	report := map[string]any{"model_calls": p.ModelCalls}
	if len(p.Feedback) > 0 {
		report["feedback"] = p.Feedback
	}
	if p.Provider != "" {
		report["provider"], report["provider_model"] = p.Provider, p.ProviderModel
	}
	if err != nil {
		return outcome{status: StatusFailed, err: err.Error(), output: mustJSON(report)}
	}
	calls := make([]any, 0, len(p.Calls))
	plan := make([]PlannedCall, 0, len(p.Calls))
	for _, c := range p.Calls {
		calls = append(calls, map[string]any{"name": c.Tool, "arguments": json.RawMessage(c.Args), "title": c.Title})
		plan = append(plan, PlannedCall{Tool: c.Tool, Args: string(c.Args), Title: c.Title, Key: tools.IdempotencyKey(root.ID, c.Tool, c.Args)})
	}
	report["tool_calls"] = calls
	return outcome{status: StatusComplete, output: mustJSON(report), plan: plan}
}

// execTool runs a tool job's executor.
func (e *Engine) execTool(ctx context.Context, j *Job, timeout time.Duration) outcome {
	ex, ok := e.toolsFor(ctx, j.Tenant).Executor(j.ToolName)
	if !ok {
		// A tool of a remote source (an MCP server) planned while the
		// source was up can be missing now: say why, if the toolbox knows.
		if u, can := e.toolbox.(unavailableExplainer); can {
			if why := u.Unavailable(j.Tenant, j.ToolName); why != "" {
				return failed("tool %q is unavailable: %s", j.ToolName, why)
			}
		}
		return failed("unknown tool %q", j.ToolName)
	}
	res, err := ex.Execute(ctx, tools.Call{
		Scope: &commonv1.Scope{TenantId: j.Tenant, ProjectId: j.Project},
		Tool:  j.ToolName,
		Args:  json.RawMessage(j.InputJSON),
		Key:   j.IdempotencyKey,
	})
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return failed("timed out after %s: %v", timeout, err)
		}
		return failed("%v", err)
	}
	if len(res.Data) > maxToolResultBytes {
		return failed("result of %d bytes exceeds the %d byte limit", len(res.Data), maxToolResultBytes)
	}
	if len(res.Data) > 0 && !json.Valid(res.Data) {
		return failed("tool returned invalid JSON")
	}
	data := res.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	return outcome{status: StatusComplete, output: mustJSON(map[string]any{"data": data})}
}

// synthesize runs the synthesis call of root over its tool jobs' results.
func (e *Engine) synthesize(ctx context.Context, root *Job) outcome {
	out, err := e.outputSchema(root)
	if err != nil {
		return failed("synthesis failed: %v", err)
	}
	children, err := e.children(ctx, root)
	if err != nil {
		return failed("synthesis failed: read tool results: %v", err)
	}
	answer, err := e.synth.Synthesize(ctx, root.Query, out, Outcomes(children))
	if err != nil {
		return failed("%v", err)
	}
	return outcome{status: StatusComplete, output: mustJSON(answer)}
}

// Outcomes turns the tool jobs among children into synthesis outcomes.
func Outcomes(children []*Job) []synthesis.Outcome {
	var outs []synthesis.Outcome
	for _, c := range children {
		if c.Type != TypeTool {
			continue
		}
		o := synthesis.Outcome{Tool: c.ToolName, Title: c.Title, Status: string(c.Status), Error: c.Error}
		if c.Status == StatusComplete {
			var wrapped struct {
				Data json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal([]byte(c.OutputJSON), &wrapped); err == nil {
				o.Data = wrapped.Data
			}
		}
		if !c.Status.Terminal() {
			o.Status, o.Error = string(StatusFailed), "did not finish"
		}
		outs = append(outs, o)
	}
	return outs
}
