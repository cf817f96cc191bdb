package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint"
)

// SoleWriterRecoverInterval is how often a sole writer looks for runs left
// in flight after its first look at start: only its own executors can
// leave one then (one that gave up after a database error), and each look
// reads every live run.
const SoleWriterRecoverInterval = 30 * time.Second

// RecoverInterval is how often KeepRecovering looks for runs left in
// flight: a third of the lease TTL with many writers, so a run whose
// executor died is driven again within about 1⅓ lease TTLs of its last
// renewal; SoleWriterRecoverInterval for a sole writer, whose look at start
// finds every run the process before it left.
func (r *Runner) RecoverInterval() time.Duration {
	if r.cfg.SoleWriter {
		return SoleWriterRecoverInterval
	}
	return max(r.cfg.LeaseTTL/3, 10*time.Millisecond)
}

// KeepRecovering runs Recover now and then every RecoverInterval until ctx
// is done.
func (r *Runner) KeepRecovering(ctx context.Context) {
	t := time.NewTicker(r.RecoverInterval())
	defer t.Stop()
	for {
		n, err := r.Recover(ctx)
		if n > 0 {
			r.log.Info("took over runs left in flight", slog.Int("runs", n))
		}
		if err != nil && ctx.Err() == nil {
			r.log.Warn("runs left in flight not all taken over; will retry", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Recover takes over every run in flight that no live executor holds: one
// whose process died mid-step, or stopped (executors release their leases
// on the way out), or whose executor gave up after a database error. Each
// is resumed as a client's resume would resume it (an agent.run.resumed
// event, then the step it was in, redone) and driven here until it waits
// for a human or finishes; its events reach whoever follows the run, and a
// client's resume meanwhile follows this executor as any other. A
// run another executor holds is left to it, and so is one a client or
// another process takes first. It returns how many runs it took over.
func (r *Runner) Recover(ctx context.Context) (int, error) {
	runs, err := r.deps.Checkpoints.InFlight(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, f := range runs {
		if ctx.Err() != nil {
			break
		}
		if r.held(f.Lease, r.now()) {
			continue
		}
		took, err := r.takeOver(ctx, f.Scope, f.ID)
		if err != nil {
			errs = append(errs, fmt.Errorf("run %s: %w", f.ID, err))
		}
		if took {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// takeOver resumes run id if, read again, it is still in flight and
// nobody holds it. A checkpoint that cannot be decoded is stopped, as a
// client's resume would stop it.
func (r *Runner) takeOver(ctx context.Context, scope *commonv1.Scope, id string) (bool, error) {
	rec, d, err := r.load(ctx, scope, id)
	switch {
	case d != nil, errors.Is(err, checkpoint.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	case rec.Run.State.Waiting(), rec.Run.State.Finished(), r.held(rec.Lease, r.now()):
		return false, nil
	}
	if _, err := r.resume(ctx, rec); err != nil {
		if errors.Is(err, checkpoint.ErrConflict) {
			return false, nil // a client or another process took it first
		}
		return false, err
	}
	return true, nil
}
