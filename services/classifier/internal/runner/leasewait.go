package runner

import (
	"context"
	"time"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint"
)

// leaseWait is one resume's wait for a run's lease.
type leaseWait struct {
	begin    time.Time
	deadline time.Time // begin + one lease TTL + one poll
}

// newLeaseWait starts a wait bounded by one lease TTL: a dead executor's
// lease lapses within one TTL of its last renewal, so waiting longer could
// only be for a holder that is alive. One poll is added so the read that
// finds the lease lapsed happens before the bound.
func (r *Runner) newLeaseWait() *leaseWait {
	now := r.now()
	return &leaseWait{begin: now, deadline: now.Add(r.cfg.LeaseTTL + r.leasePoll())}
}

// leasePoll is how often a waiting resume re-reads a run another process
// holds: often enough to notice a release soon, seldom enough that waiting
// resumes cost the database little.
func (r *Runner) leasePoll() time.Duration {
	return min(max(r.cfg.LeaseTTL/10, 20*time.Millisecond), 500*time.Millisecond)
}

// awaitLease loads run id and, while another executor's lease holds it,
// waits: until the lease is released (the run waits for a human or
// finished), lapses (its executor died), or w's deadline passes, whichever
// comes first. It wakes when this process's executor of the run stops, at
// each poll, and right when the lease is due to lapse. Past the deadline it
// returns a *BusyError; when ctx ends, ctx's error.
func (r *Runner) awaitLease(ctx context.Context, scope *commonv1.Scope, id string, w *leaseWait) (checkpoint.Record, *Drive, error) {
	for {
		rec, d, err := r.load(ctx, scope, id)
		if d != nil || err != nil {
			return rec, d, err
		}
		now := r.now()
		if !r.held(rec.Lease, now) {
			return rec, nil, nil
		}
		if !now.Before(w.deadline) {
			return rec, nil, &BusyError{RunID: id, Until: rec.Lease.ExpiresAt, Waited: now.Sub(w.begin)}
		}
		timer := time.NewTimer(min(r.leasePoll(), rec.Lease.ExpiresAt.Sub(now), w.deadline.Sub(now)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return checkpoint.Record{}, nil, ctx.Err()
		case <-r.localDone(id):
		case <-timer.C:
		}
		timer.Stop()
	}
}

// localDone returns the done channel of this process's executor of run id,
// or nil (which blocks forever) if there is none.
func (r *Runner) localDone(id string) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if x := r.active[id]; x != nil {
		return x.done
	}
	return nil
}
