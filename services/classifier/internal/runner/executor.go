package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/libs/utf8x"
	"github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint"
	"github.com/agentmesh/agentmesh/services/classifier/internal/conversations"
	"github.com/agentmesh/agentmesh/services/classifier/internal/modelcalls"
	"github.com/agentmesh/agentmesh/services/classifier/internal/plan"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// releaseTimeout bounds the lease release of an executor whose context
// ended.
const releaseTimeout = 5 * time.Second

// executor drives one run while holding its lease.
type executor struct {
	r     *Runner
	owner string

	mu  sync.Mutex // guards rec: the step and the heartbeat both write it
	rec checkpoint.Record
}

func (e *executor) current() checkpoint.Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rec
}

// run steps the run until it waits or finishes. It returns the sequence of
// the last event recorded and, if it stopped early, why.
func (e *executor) run(ctx context.Context, cancel context.CancelCauseFunc) (uint64, error) {
	hbCtx, stopHeartbeat := context.WithCancel(ctx)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		e.heartbeat(hbCtx, cancel)
	}()
	// The heartbeat must be gone before a release, or it could renew a
	// lease the executor just gave up.
	stop := func() { stopHeartbeat(); <-hbDone }
	defer stop()

	for {
		rec := e.current()
		if rec.Run.State.Waiting() || rec.Run.State.Finished() {
			return rec.EventCount, nil
		}
		if ctx.Err() != nil {
			stop()
			return e.abandon(ctx, context.Cause(ctx))
		}
		t, err := e.step(ctx, rec.Run)
		if err != nil {
			stop()
			return e.abandon(ctx, err)
		}
		var lease *checkpoint.Lease
		if !t.Run.State.Waiting() && !t.Run.State.Finished() {
			lease = e.r.lease(e.owner)
		}
		e.mu.Lock()
		next, err := e.r.commit(ctx, e.rec, t, lease)
		if err == nil {
			e.rec = next
		}
		e.mu.Unlock()
		if err != nil {
			stop()
			return e.abandon(ctx, err)
		}
		e.r.hook(ctx, next)
	}
}

// abandon ends a drive that could not go on. When the run changed under the
// executor (a Stop, or a takeover after the lease expired) it re-reads the
// run and lets go quietly if someone finished it. Otherwise it releases the
// lease, so a resume can continue at once from the last checkpoint.
func (e *executor) abandon(ctx context.Context, cause error) (uint64, error) {
	rec := e.current()
	if c := context.Cause(ctx); c != nil && (errors.Is(c, errStopped) || errors.Is(c, errLeaseLost)) {
		cause = c
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if errors.Is(cause, checkpoint.ErrConflict) || errors.Is(cause, checkpoint.ErrNotFound) ||
		errors.Is(cause, errStopped) || errors.Is(cause, errLeaseLost) {
		now, err := e.r.deps.Checkpoints.Load(rctx, scopeOf(rec.Run), rec.Run.ID)
		if err == nil && now.Run.State.Finished() {
			return now.EventCount, nil
		}
		if err == nil {
			return now.EventCount, fmt.Errorf("run %s was taken over by another executor: %w", rec.Run.ID, ErrBusy)
		}
		return rec.EventCount, fmt.Errorf("run %s changed under its executor: %w", rec.Run.ID, cause)
	}
	e.mu.Lock()
	released, err := e.r.deps.Checkpoints.Commit(rctx, e.rec, e.rec.Run, nil, nil)
	if err == nil {
		e.rec = released
	}
	e.mu.Unlock()
	if err != nil {
		e.r.log.Warn("could not release run lease; it expires on its own", slog.String("run_id", rec.Run.ID), slog.Any("error", err))
	}
	return rec.EventCount, cause
}

// heartbeat renews the lease every third of its TTL for as long as the
// executor works, so the lease outlives no executor by more than one TTL
// however long a step (a model call) takes. A renewal that finds the run
// changed cancels the executor: someone stopped or took the run.
func (e *executor) heartbeat(ctx context.Context, cancel context.CancelCauseFunc) {
	t := time.NewTicker(max(e.r.cfg.LeaseTTL/3, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.mu.Lock()
		if ctx.Err() != nil || e.rec.Lease == nil || e.rec.Lease.Owner != e.owner {
			// Stopped, or the run waits or finished: nothing to renew.
			e.mu.Unlock()
			return
		}
		next, err := e.r.deps.Checkpoints.RenewLease(ctx, e.rec, *e.r.lease(e.owner))
		if err == nil {
			e.rec = next
		}
		e.mu.Unlock()
		if errors.Is(err, checkpoint.ErrConflict) {
			cancel(errLeaseLost)
			return
		}
		if err != nil && ctx.Err() == nil {
			e.r.log.Warn("lease renewal failed; will retry", slog.String("run_id", e.rec.Run.ID), slog.Any("error", err))
		}
	}
}

// step performs the work of the run's state and returns the transition.
// Model failures and unusable answers become transitions to Error; an
// infrastructure failure (database) or a cancelled context is returned as
// an error, leaving the run in its state for a later resume.
func (e *executor) step(ctx context.Context, run statemachine.Run) (statemachine.Transition, error) {
	m := e.r.deps.Machine
	scope := scopeOf(run)
	switch run.State {
	case statemachine.Planning:
		if t, stop := m.PlanLimitStop(run); stop {
			return t, nil
		}
		if t, stop := m.LimitStop(run); stop {
			return t, nil
		}
		p, err := e.r.deps.Model.Plan(ctx, modelcalls.PlanInput{
			Instruction: run.Instruction, Previous: run.Plans, Feedback: run.Feedback,
			ReplanReason: run.ReplanReason, Labelled: len(run.LabelledIDs), MaxBatch: m.Config().MaxBatch,
		})
		if err != nil {
			return e.modelFailure(ctx, run, "planning", err)
		}
		_, refusal := plan.Compile(p.QueryJSON)
		return m.Planned(run, p, refusal)

	case statemachine.Fetching:
		filter, err := plan.Compile(run.CurrentPlan().QueryJSON)
		if err != nil {
			return m.Fetched(run, nil, nil, err)
		}
		ids, err := e.r.deps.Conversations.Find(ctx, scope, filter, run.LabelledIDs, m.FetchLimit(run))
		if ctx.Err() != nil {
			return statemachine.Transition{}, context.Cause(ctx)
		}
		var sample *statemachine.Sample
		if err == nil && len(ids) > 0 {
			cs, gerr := e.r.deps.Conversations.Get(ctx, scope, ids[:1])
			if gerr != nil {
				return statemachine.Transition{}, gerr
			}
			sample = describe(cs[0])
		}
		return m.Fetched(run, ids, sample, err)

	case statemachine.Classifying:
		if t, stop := m.LimitStop(run); stop {
			return t, nil
		}
		convs, err := e.r.deps.Conversations.Get(ctx, scope, run.BatchIDs)
		if errors.Is(err, conversations.ErrNotFound) {
			return m.Fail(run, err, false), nil
		}
		if err != nil {
			return statemachine.Transition{}, err
		}
		cls, err := e.r.deps.Model.Classify(ctx, run.CurrentPlan(), run.Instruction, convs)
		if err != nil {
			return e.modelFailure(ctx, run, "classification", err)
		}
		t, err := m.Classified(run, cls)
		if errors.Is(err, statemachine.ErrInvalidResult) {
			return m.Fail(run, fmt.Errorf("classification answer: %w", err), true), nil
		}
		return t, err

	case statemachine.Saving:
		if _, err := e.r.deps.Labels.Save(ctx, scope, run.ID, run.PendingBatch); err != nil {
			return statemachine.Transition{}, err
		}
		return m.Saved(run)

	case statemachine.Summarizing:
		if t, stop := m.LimitStop(run); stop {
			return t, nil
		}
		saved, err := e.r.deps.Labels.List(ctx, scope, run.ID, run.LabelledIDs)
		if err != nil {
			return statemachine.Transition{}, err
		}
		in := make([]modelcalls.SummaryLabel, len(saved))
		for i, l := range saved {
			in[i] = modelcalls.SummaryLabel{ConversationID: l.ConversationID, Label: string(l.Label), Reason: l.Reason}
		}
		text, err := e.r.deps.Model.Summarize(ctx, run, in)
		if err != nil {
			return e.modelFailure(ctx, run, "summary", err)
		}
		return m.Summarized(run, text)

	case statemachine.Error:
		return m.StopAfterError(run)
	}
	return statemachine.Transition{}, fmt.Errorf("runner: no step for state %s", run.State)
}

// modelFailure turns a failed model call into Error, unless the executor
// itself was cancelled (then the run stays where it is).
func (e *executor) modelFailure(ctx context.Context, run statemachine.Run, what string, err error) (statemachine.Transition, error) {
	if ctx.Err() != nil {
		return statemachine.Transition{}, context.Cause(ctx)
	}
	used := errors.Is(err, modelcalls.ErrAnswer)
	return e.r.deps.Machine.Fail(run, fmt.Errorf("%s: %w", what, err), used), nil
}

// describe summarises a conversation for the fetch approval: its opening
// customer message.
func describe(c conversations.Conversation) *statemachine.Sample {
	s := &statemachine.Sample{ID: c.ID, MessageCount: len(c.Messages)}
	for _, m := range c.Messages {
		if m.Role == "customer" {
			s.Summary = m.Text
			break
		}
	}
	if s.Summary == "" && len(c.Messages) > 0 {
		s.Summary = c.Messages[0].Text
	}
	if len(s.Summary) > 160 {
		s.Summary = strings.TrimSpace(utf8x.Prefix(s.Summary, 157)) + "..."
	}
	return s
}
