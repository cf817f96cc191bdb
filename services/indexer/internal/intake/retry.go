package intake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
)

// Retries of FinishFailedIngests: the first a second after a failure, then
// each twice as late, up to a minute apart.
const (
	failedRetryFirst = time.Second
	failedRetryMost  = time.Minute
)

// nextRetry is the wait before the next try of a finish that failed after
// a wait of prev (0: it failed for the first time).
func nextRetry(prev time.Duration) time.Duration {
	if prev == 0 {
		return failedRetryFirst
	}
	return min(2*prev, failedRetryMost)
}

// failedIngests is a set of documents whose ingest failed after its first
// write (which saved the document, unindexed): a store or stream that
// failed, a caller that went away.
type failedIngests struct {
	mu   sync.Mutex
	docs map[string]document.Scope // by document id
	wake chan struct{}             // signalled by add
}

func newFailedIngests() *failedIngests {
	return &failedIngests{docs: map[string]document.Scope{}, wake: make(chan struct{}, 1)}
}

func (f *failedIngests) add(sc document.Scope, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.docs[id] = sc
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// take empties the set and returns what it held.
func (f *failedIngests) take() map[string]document.Scope {
	f.mu.Lock()
	defer f.mu.Unlock()
	docs := f.docs
	f.docs = map[string]document.Scope{}
	return docs
}

// FinishFailedIngests finishes, until ctx ends, the documents whose ingest
// failed after its first write, as reconciliation finishes those a crash
// cut: the caller got an error, and without it such a document stayed
// saved and unindexed (unsearchable, unextracted) until the next start's
// reconciliation. Each is tried a second after its failure, then at
// growing intervals while it fails again; one whose ingest may still be
// under way (another replica's, or a retry of the upload) is left to it
// while its claim holds, and one indexed or deleted meanwhile is dropped
// (settle, as reconciliation does).
func (s *Service) FinishFailedIngests(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.failed.wake:
		}
		for delay := nextRetry(0); ; delay = nextRetry(delay) {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if s.finishFailed(ctx) == 0 {
				break
			}
		}
	}
}

// finishFailed tries each failed ingest once (settle) and returns how many
// are left to try again: those that failed again, and those another ingest
// may hold.
func (s *Service) finishFailed(ctx context.Context) (left int) {
	var (
		failing int
		first   error
	)
	for id, sc := range s.failed.take() {
		wait, err := s.settle(ctx, sc, id, byRetry)
		if err != nil {
			failing++
			first = cmp.Or(first, fmt.Errorf("document %s: %w", id, err))
		}
		if wait != nil || err != nil {
			s.failed.add(sc, id)
			left++
		}
	}
	if failing > 0 && ctx.Err() == nil {
		s.Logger.Warn("failed ingests not finished yet; retrying", slog.Int("failing", failing), slog.Any("error", first))
	}
	return left
}

// deadIngestsPerSweep bounds the documents one sweep of FinishDeadIngests
// finishes; the next sweep takes the rest.
const deadIngestsPerSweep = 100

// FinishDeadIngests, with many writers, finishes until ctx ends the ingests
// a replica left when it died or was stopped mid-ingest: every third of
// JobLeaseTTL it lists the documents whose ingest claim has lapsed unindexed
// (mongostore.Store.DeadIngests) and finishes each (settle). Without it such
// a document stayed saved and unsearchable until a replica's next start
// reconciled it, and a replica scaled away is never started again. A
// claim an ingest renews, in any replica, keeps its document from the
// sweep; two replicas finishing the same document are told apart by its
// version, and the one that loses leaves it to the other. A document whose
// finish fails (an embedding model that is down, say) is tried again a
// second later, then each time twice as late, up to a minute apart, as
// FinishFailedIngests does. A single writer has no other process to
// outlive: its start's reconciliation finishes what the process before it
// left, and FinishFailedIngests its own failures; for it this returns at
// once.
func (s *Service) FinishDeadIngests(ctx context.Context) {
	if s.local {
		return
	}
	t := time.NewTicker(s.cfg.JobLeaseTTL / 3)
	defer t.Stop()
	failing := map[string]retryAt{} // by document id
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.finishDead(ctx, failing)
	}
}

// retryAt is when a document whose finish failed is tried again, and the
// wait before the try after that.
type retryAt struct {
	next  time.Time
	delay time.Duration
}

// finishDead finishes the ingests whose claims have lapsed, once each,
// except those whose last finish failed and whose retry is not due
// (failing, which it updates).
func (s *Service) finishDead(ctx context.Context, failing map[string]retryAt) {
	dead, err := s.Docs.DeadIngests(ctx, s.now(), deadIngestsPerSweep)
	if err != nil {
		if ctx.Err() == nil {
			s.Logger.Warn("dead ingests not listed; the next sweep tries again", slog.Any("error", err))
		}
		return
	}
	listed := make(map[string]bool, len(dead))
	for _, d := range dead {
		listed[d.ID] = true
		if d.Deleting || s.ingests.count(d.ID) > 0 {
			continue // a delete's, or this process's own ingest
		}
		r, failed := failing[d.ID]
		if failed && time.Now().Before(r.next) {
			continue
		}
		// settle reads it again: an ingest that renewed its claim or
		// finished meanwhile keeps it.
		_, err := s.settle(ctx, d.Scope, d.ID, bySweep)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !errors.Is(err, document.ErrConflict):
			// (A conflict: another replica's sweep, or an upload of the
			// same content, wrote it first.)
			r.delay = nextRetry(r.delay)
			r.next = time.Now().Add(r.delay)
			failing[d.ID] = r
			s.Logger.Warn("dead ingest not finished; retrying", slog.String("document_id", d.ID),
				slog.Duration("retry_in", r.delay), slog.Any("error", err))
		default:
			delete(failing, d.ID)
		}
	}
	if len(dead) < deadIngestsPerSweep {
		for id := range failing {
			if !listed[id] { // finished, deleted or claimed since
				delete(failing, id)
			}
		}
	}
}
