package analysis

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Cancel cancels a job. For a tool job it cancels that job alone (it becomes
// a data gap and synthesis goes on without it); for any other job it
// cancels the whole analysis: the analysis and every unfinished child are
// cancelled, executing children are interrupted, and nothing is
// synthesised. A job that already finished fails with ErrWrongState.
func (e *Engine) Cancel(ctx context.Context, tenant, project, id string) (*Job, error) {
	j, err := e.store.Get(ctx, tenant, project, id)
	if err != nil {
		return nil, err
	}
	if j.Type == TypeTool {
		if j.Status.Terminal() {
			return nil, fmt.Errorf("%w: job %s is already %s", ErrWrongState, id, j.Status)
		}
		if err := e.cancelJob(ctx, j); err != nil {
			return nil, err
		}
		if err := e.advance(ctx, tenant, project, j.RootID); err != nil {
			e.log.Warn("advance after cancel failed", slog.String("job_id", id), slog.Any("error", err))
		}
		return e.store.Get(ctx, tenant, project, id)
	}
	wasFinished := false
	root, err := e.mutate(ctx, tenant, project, j.RootID, func(r *Job) (effect, error) {
		if r.Status.Terminal() {
			wasFinished = true
			return unchanged, nil
		}
		r.Status = StatusCancelled
		r.EndTime = timePtr(e.now())
		return announced, nil
	})
	if err != nil {
		return nil, err
	}
	if wasFinished {
		return nil, fmt.Errorf("%w: analysis %s is already %s", ErrWrongState, root.ID, root.Status)
	}
	// advance cancels the children of a cancelled analysis; the sweep
	// finishes the job if this process dies half-way.
	if err := e.advance(ctx, tenant, project, root.ID); err != nil {
		return nil, err
	}
	return e.store.Get(ctx, tenant, project, id)
}

// Retry re-runs a failed (or cancelled) tool job, after which synthesis runs
// again over all tool results, or a failed synthesis job. The analysis goes
// back to waiting_for_children. Other jobs, and jobs of a cancelled
// analysis, fail with ErrWrongState.
func (e *Engine) Retry(ctx context.Context, tenant, project, id string) (*Job, error) {
	j, err := e.store.Get(ctx, tenant, project, id)
	if err != nil {
		return nil, err
	}
	if j.Type != TypeTool && j.Type != TypeSynthesis {
		return nil, fmt.Errorf("%w: only tool_execution and synthesis jobs can be retried, %s is a %s", ErrWrongState, id, j.Type)
	}
	root, err := e.store.Get(ctx, tenant, project, j.RootID)
	if err != nil {
		return nil, err
	}
	if root.Status == StatusCancelled {
		return nil, fmt.Errorf("%w: analysis %s was cancelled", ErrWrongState, root.ID)
	}
	// A retried tool result belongs to a new synthesis round, above every
	// round so far, so synthesis runs again once it is in.
	round := int32(0)
	if j.Type == TypeTool {
		siblings, err := e.children(ctx, root)
		if err != nil {
			return nil, err
		}
		for _, s := range siblings {
			round = max(round, s.Round)
		}
		round++
	}
	wrong := Status("")
	retried, err := e.mutate(ctx, tenant, project, id, func(cur *Job) (effect, error) {
		wrong = ""
		if cur.Status != StatusFailed && !(cur.Type == TypeTool && cur.Status == StatusCancelled) {
			wrong = cur.Status
			return unchanged, nil
		}
		resetForRun(cur)
		if cur.Type == TypeTool {
			cur.Round = round
		}
		return announced | queued, nil
	})
	if err != nil {
		return nil, err
	}
	if wrong != "" {
		return nil, fmt.Errorf("%w: job %s is %s; only failed jobs can be retried", ErrWrongState, id, wrong)
	}
	if err := e.advance(ctx, tenant, project, root.ID); err != nil {
		e.log.Warn("advance after retry failed", slog.String("job_id", id), slog.Any("error", err))
	}
	return retried, nil
}

// sweepLoop runs the periodic sweep until ctx is done.
func (e *Engine) sweepLoop(ctx context.Context) {
	every(ctx, e.cfg.SweepInterval, func() {
		if err := e.sweep(ctx, false); err != nil && ctx.Err() == nil {
			e.log.Warn("sweep incomplete", slog.Any("error", err))
		}
	})
}

// SoleWriter is implemented by a Store that knows whether this process is
// its database's only writer (agentmesh up on its embedded FerretDB).
type SoleWriter interface{ SoleWriter() bool }

// soleWriter reports whether e's store says this process is its
// database's only writer.
func (e *Engine) soleWriter() bool {
	s, ok := e.store.(SoleWriter)
	return ok && s.SoleWriter()
}

// every calls fn every interval until ctx is done.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}

// sweep recovers unfinished jobs and archives finished analyses left in
// the live set. At start-up it re-queues every pending job and advances
// every unfinished analysis; periodically it does so only for those
// untouched for StaleAfter. Both times it re-queues running jobs whose
// claim lapsed (their worker is gone; claimLoop finds those sooner) and
// cancels leftover children of cancelled analyses. Periodically it also
// archives the finished analyses the archiver did not (it gave up, or a
// process stopped first); start-up
// leaves that to the first periodic sweep, so a long history left live by
// an earlier version does not hold up the start.
func (e *Engine) sweep(ctx context.Context, startup bool) error {
	now := e.now()
	// Claims that end after lapsedBy are held. At start-up, when this
	// process is the database's only writer (agentmesh up), no job runs
	// yet and no other process may run one: every claim is a dead
	// process's, and its job runs again now rather than when the claim
	// lapses (up to ClaimTTL after the restart).
	lapsedBy := now
	if startup && e.soleWriter() {
		lapsedBy = time.Unix(1<<40, 0)
	}
	// A running job was last written when its claim was taken or renewed,
	// which lasts ClaimTTL from then, so younger jobs need nothing yet.
	before := now.Add(-min(e.cfg.StaleAfter, e.cfg.ClaimTTL))
	if startup {
		before = now.Add(time.Millisecond)
	}
	after := ""
	for {
		batch, err := e.store.Live(ctx, before, after, sweepPageSize)
		if err != nil {
			return err
		}
		finished := map[string]*Job{} // root id → a finished job of its tree
		for _, j := range batch {
			if j.Status.Terminal() {
				if !startup {
					finished[j.RootID] = j
				}
				continue
			}
			stale := startup || j.UpdateTime.Before(now.Add(-e.cfg.StaleAfter))
			if err := e.recoverJob(ctx, j, stale, lapsedBy); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				e.log.Warn("recover job failed", slog.String("job_id", j.ID), slog.Any("error", err))
			}
		}
		for rootID, j := range finished {
			if _, err := e.archiveTree(ctx, j.Tenant, j.Project, rootID); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				e.log.Warn("archive analysis failed", slog.String("job_id", rootID), slog.Any("error", err))
			}
		}
		if len(batch) < sweepPageSize {
			return nil
		}
		after = batch[len(batch)-1].ID
	}
}

// recoverJob does what an unfinished job needs after a crash. stale says
// the job has not moved for long enough that its work item may be lost; a
// running job whose claim ends by lapsedBy has lost its worker.
func (e *Engine) recoverJob(ctx context.Context, j *Job, stale bool, lapsedBy time.Time) error {
	if j.Type == TypeAnalysis {
		if !stale {
			return nil
		}
		return e.advance(ctx, j.Tenant, j.Project, j.ID)
	}
	now := lapsedBy
	expired := j.Status == StatusRunning && !j.leaseLive(now)
	if !expired && !(j.Status == StatusPending && stale) {
		return nil
	}
	root, err := e.store.Get(ctx, j.Tenant, j.Project, j.RootID)
	if err != nil {
		return err
	}
	if root.Status == StatusCancelled {
		return e.cancelJob(ctx, j)
	}
	requeued := false
	_, err = e.mutate(ctx, j.Tenant, j.Project, j.ID, func(cur *Job) (effect, error) {
		switch {
		case cur.Status == StatusRunning && !cur.leaseLive(now):
			// Its worker is gone: the job waits for a worker again,
			// which its watchers see, and leaves the set of lapsed
			// claims, so it is re-queued once.
			cur.Status = StatusPending
			cur.LeaseOwner, cur.LeaseUntil = "", nil
			requeued = true
			return announced | queued, nil
		case cur.Status == StatusPending && stale:
			requeued = true
			return stored | queued, nil
		}
		requeued = false // claimed, re-queued or finished meanwhile
		return unchanged, nil
	})
	if err == nil && requeued {
		e.log.Info("re-queued job", slog.String("job_id", j.ID), slog.String("status", string(j.Status)))
	}
	return err
}
