package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/libs/heartbeat"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	docstore "github.com/agentmesh/agentmesh/services/indexer/internal/document/mongostore"
)

// An extraction job runs under a claim on its id (docstore.TakeClaim):
// the worker that holds it renews it every JobLeaseTTL/3 while the
// extractors run, and drops it once the job has ended (or releases it if
// the attempt failed, for the retry). A second delivery of the job — a
// redelivery, a requeue at another replica's start, a duplicate message —
// waits while the claim is held, so the extractors never run twice at
// once; when the holder dies its claim lapses within JobLeaseTTL of its
// last renewal and the waiting delivery takes over. A holder that cannot
// renew (the database unreachable, or a successor took over after it
// stalled) stops its attempt.
//
// Clocks: a claim's expiry is written by its holder and read by others,
// so replicas' clocks must agree to well within JobLeaseTTL (NTP does).

// errClaimLost ends an attempt whose claim its worker no longer holds.
var errClaimLost = errors.New("intake: the job's claim was lost")

// claimKey is the claim of a job.
func claimKey(jobID string) string { return "job/" + jobID }

// claimJob takes the claim of job id for this worker, waiting while
// another holds it. It returns a nil claim if the job ended meanwhile (the
// other worker finished it). A single writer (agentmesh up) waits only for
// a claim of its own workers: no other process may hold one, so any other
// is a dead process's (the one this process restarted after), and its job
// runs now rather than when the claim lapses.
func (s *Service) claimJob(ctx context.Context, sc document.Scope, id string) (*docstore.Claim, error) {
	ttl := s.cfg.JobLeaseTTL
	key := claimKey(id)
	now := s.Now()
	for {
		c, err := s.Docs.TakeClaim(ctx, key, s.Instance, now, ttl)
		var busy *document.BusyError
		if !errors.As(err, &busy) {
			return c, err
		}
		now = s.Now()
		if s.local && s.claimers.count(key) == 1 {
			// Only this worker of this process is after the claim (a
			// worker counts from before it takes a claim until it lets
			// it go: HandleJob), so none of them holds it: its holder is
			// dead.
			s.Logger.Info("extraction job held by a process that is gone; taking it over", slog.String("job_id", id),
				slog.String("holder", busy.Holder), slog.Time("until", busy.Until))
			now = busy.Until.Add(time.Millisecond)
			continue
		}
		j, err := s.Docs.GetJob(ctx, sc, id)
		if err != nil {
			return nil, err
		}
		if document.Terminal(j.Status) {
			return nil, nil
		}
		// Look again when the claim is due to lapse, or sooner, to see the
		// job end.
		wait := min(max(busy.Until.Sub(s.Now()), 0)+10*time.Millisecond, ttl/3)
		s.Logger.Debug("extraction job held by another worker; waiting", slog.String("job_id", id),
			slog.String("holder", busy.Holder), slog.Time("until", busy.Until))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// claimers counts, per claim key, the workers of this process trying to
// take or holding the claim (a job delivered twice, or requeued, may have
// two).
type claimers struct {
	mu sync.Mutex
	n  map[string]int
}

// enter counts one more worker after key until the returned function is
// called.
func (c *claimers) enter(key string) (leave func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.n[key]--; c.n[key] == 0 {
			delete(c.n, key)
		}
	}
}

func (c *claimers) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// keepClaim renews c every JobLeaseTTL/3 until the returned function is
// called, which waits for the renewals to stop. If c is lost, or cannot be
// renewed before it lapses, it cancels the attempt with errClaimLost.
func (s *Service) keepClaim(ctx context.Context, c *docstore.Claim, cancel context.CancelCauseFunc) (stop func()) {
	return heartbeat.Keep(ctx, s.cfg.JobLeaseTTL/3, func(ctx context.Context) bool {
		err := s.Docs.RenewClaim(ctx, c, s.Now(), s.cfg.JobLeaseTTL)
		switch {
		case err == nil:
		case errors.Is(err, document.ErrClaimLost), !s.Now().Before(c.Until):
			s.Logger.Warn("extraction job's claim lost; stopping this attempt", slog.String("claim", c.Key), slog.Any("error", err))
			cancel(fmt.Errorf("%w: %w", errClaimLost, err))
			return false
		default:
			s.Logger.Warn("could not renew an extraction job's claim; retrying", slog.String("claim", c.Key), slog.Any("error", err))
		}
		return true
	})
}

// letGo ends this worker's hold of c: drops it once the job has ended,
// else releases it for the next attempt. It runs even when ctx is done
// (shutting down): a released claim is taken over at once, a lapsed one
// only after JobLeaseTTL.
func (s *Service) letGo(ctx context.Context, c *docstore.Claim, ended bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.JobLeaseTTL)
	defer cancel()
	var err error
	if ended {
		err = s.Docs.DropClaim(ctx, c)
	} else {
		err = s.Docs.ReleaseClaim(ctx, c)
	}
	if err != nil {
		s.Logger.Warn("could not let an extraction job's claim go; it lapses by itself", slog.String("claim", c.Key), slog.Any("error", err))
	}
}
