package analysis

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/agentmesh/agentmesh/libs/heartbeat"
)

// A worker runs a job under a claim: the job's lease (LeaseOwner, a token
// of this execution, and LeaseUntil), taken with the version-checked write
// that moves the job to running, renewed every ClaimTTL/3 by the same kind
// of write while the job runs, and cleared by the write that records the
// result. The claim is short and independent of the job's timeout — a
// model call may take minutes, its claim lasts seconds past the last
// renewal — so a job whose worker died (killed, its machine gone) is
// noticed within ClaimTTL: every engine looks for lapsed claims every
// ClaimTTL/3 (Store.Lapsed: an indexed query, or the in-memory mirror of a
// single writer) and puts their jobs back to pending with a new work item.
//
// A renewal that finds the job no longer running under its token (it was
// cancelled, or re-queued and claimed by another worker after the claim
// lapsed) stops the execution; the result write checks the token too, so
// only the claim's holder records a result. A renewal that fails (the
// database unreachable) leaves the execution running and is tried again at
// the next tick: once the database is back the holder renews or records
// its result, unless another worker took the job over meanwhile, which it
// can only have done by writing to the database this worker could not
// reach. A model call in flight therefore survives a database fail-over.
//
// Every claim write is a single-document update conditional on the job's
// version: atomic on MongoDB, and in one process (the single writer on
// FerretDB) under the store's document lock. FerretDB v1 with several
// writing processes does not isolate such updates: two workers may both
// believe they claimed a job; the loser finds out at its first renewal,
// ClaimTTL/3 later, and stops.
//
// Clocks: a lease's expiry is written by its holder and read by other
// processes, so their clocks must agree to well within ClaimTTL (NTP does).

// errClaimLost ends an execution whose claim its worker no longer holds.
var errClaimLost = errors.New("analysis: the job's claim was lost")

// Settling a result that could not be written (the database unreachable)
// is retried this often, for up to settleRetryFor, while the claim is
// kept: the result of a model call is not thrown away for an outage of a
// few seconds.
const (
	settleRetryMin = 100 * time.Millisecond
	settleRetryMax = 2 * time.Second
	settleRetryFor = time.Minute
)

// holdClaim renews the claim token on job j every ClaimTTL/3 until the
// returned stop is called, which waits for the renewals to end (and may be
// called again). If the job is no longer running under token it calls lost
// with errClaimLost and stops renewing.
func (e *Engine) holdClaim(ctx context.Context, j *claimCopy, token string, lost context.CancelCauseFunc) (stop func()) {
	return heartbeat.Keep(ctx, e.cfg.ClaimTTL/3, func(ctx context.Context) bool {
		held, err := e.renewClaim(ctx, j, token)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				e.log.Warn("could not renew a job's claim; retrying", slog.String("job_id", j.Load().ID), slog.Any("error", err))
			}
		case !held:
			// Cancelled, or taken over; or the result was just
			// recorded, which ends the claim too.
			e.log.Debug("job no longer runs under this claim", slog.String("job_id", j.Load().ID))
			lost(errClaimLost)
			return false
		}
		return true
	})
}

// claimCopy is a job this engine runs under its claim, as the engine last
// stored it (the claim, then each renewal): the renewals and the result
// are written from it, without reading the job first, and read it only
// if another write came between (see mutateKnown).
type claimCopy struct{ atomic.Pointer[Job] }

// renewClaim extends the claim token on job j to ClaimTTL from now and
// reports whether the job is still running under it.
func (e *Engine) renewClaim(ctx context.Context, j *claimCopy, token string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.ClaimTTL/3)
	defer cancel()
	held := false
	renewed, err := e.mutateKnown(ctx, j.Load(), func(cur *Job) (effect, error) {
		held = cur.Status == StatusRunning && cur.LeaseOwner == token
		if !held {
			return unchanged, nil
		}
		cur.LeaseUntil = timePtr(e.now().Add(e.cfg.ClaimTTL))
		return stored, nil
	})
	if err == nil && held {
		j.Store(renewed)
	}
	return held, err
}

// settle records the outcome of the execution token of job j, if the job
// still runs under that claim, retrying failed writes for a while. It
// reports whether the outcome was recorded, and returns the job as stored.
func (e *Engine) settle(ctx context.Context, j *Job, token string, out outcome) (*Job, bool, error) {
	write := context.WithoutCancel(ctx)
	deadline := e.clock().Add(settleRetryFor)
	delay := time.Duration(0)
	known := j // as claimed or last renewed: usually still the stored state, so not read again
	for {
		settled := false
		stored, err := e.mutateWith(write, j.Tenant, j.Project, j.ID, known, e.store.Update, func(cur *Job) (effect, error) {
			settled = false
			if cur.Status != StatusRunning || cur.LeaseOwner != token {
				return unchanged, nil // cancelled meanwhile, or the claim was lost
			}
			cur.Status, cur.OutputJSON, cur.Error = out.status, out.output, out.err
			if out.plan != nil {
				cur.Plan = out.plan
			}
			cur.EndTime = timePtr(e.now())
			cur.LeaseOwner, cur.LeaseUntil = "", nil
			settled = true
			return announced, nil
		})
		if err == nil || ctx.Err() != nil || !e.clock().Before(deadline) {
			return stored, settled, err
		}
		known = nil // the write's outcome is unknown: read the job
		delay = min(max(2*delay, settleRetryMin), settleRetryMax)
		e.log.Warn("could not record a job's result; retrying", slog.String("job_id", j.ID),
			slog.Duration("delay", delay), slog.Any("error", err))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, false, err
		case <-t.C:
		}
	}
}

// claimLoop re-queues, every ClaimTTL/3 until ctx is done, the jobs whose
// claim lapsed.
func (e *Engine) claimLoop(ctx context.Context) {
	every(ctx, e.cfg.ClaimTTL/3, func() {
		if err := e.requeueLapsed(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("check for lapsed claims incomplete", slog.Any("error", err))
		}
	})
}

// requeueLapsed puts the jobs whose claim lapsed back to pending with a new
// work item (or cancels them, if their analysis was cancelled). A job
// failing to be re-queued is tried again at the next check, as are jobs
// beyond the first sweepPageSize.
func (e *Engine) requeueLapsed(ctx context.Context) error {
	jobs, err := e.store.Lapsed(ctx, e.now(), sweepPageSize)
	if err != nil {
		return err
	}
	var errs []error
	for _, j := range jobs {
		if err := e.recoverJob(ctx, j, false, e.now()); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
