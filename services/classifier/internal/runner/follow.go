package runner

import (
	"context"
	"errors"
	"time"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint"
)

// leasePoll is how often a follower re-reads a run another executor
// holds: often enough to notice a release or a lapse soon, seldom enough
// that following costs the database little.
func (r *Runner) leasePoll() time.Duration {
	return min(max(r.cfg.LeaseTTL/10, 20*time.Millisecond), 500*time.Millisecond)
}

// follow returns a Drive of run id, which another executor holds, that
// runs nothing while that executor works: it is done once the run waits
// for a human or finishes, at the last event its checkpoint recorded then,
// so a stream on it forwards that executor's events as they come. If the
// holder lets go with the run mid-step (it died, its lease lapsing, or
// gave up), the follower takes the run over and the Drive is that
// executor's. It ends early with ctx's error.
func (r *Runner) follow(ctx context.Context, scope *commonv1.Scope, id string) *Drive {
	d := &Drive{RunID: id, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		d.last, d.err = r.followHolder(ctx, scope, id)
	}()
	return d
}

func (r *Runner) followHolder(ctx context.Context, scope *commonv1.Scope, id string) (uint64, error) {
	for {
		rec, d, err := r.load(ctx, scope, id)
		if d != nil {
			return d.Result()
		}
		if err != nil {
			return 0, err
		}
		now := r.now()
		if !r.held(rec.Lease, now) {
			if rec.Run.State.Waiting() || rec.Run.State.Finished() {
				return rec.EventCount, nil
			}
			d, err := r.resume(ctx, rec)
			if errors.Is(err, checkpoint.ErrConflict) {
				continue // another request or process took it: follow that one
			}
			if err != nil {
				return rec.EventCount, err
			}
			return d.Result()
		}
		timer := time.NewTimer(min(r.leasePoll(), rec.Lease.ExpiresAt.Sub(now)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return rec.EventCount, ctx.Err()
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
