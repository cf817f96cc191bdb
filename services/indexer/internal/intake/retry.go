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

// failedIngests is a set of documents whose ingest failed after its first
// write (which saved the document, unindexed): a store or stream that
// failed, a caller that went away.
type failedIngests struct {
	mu   sync.Mutex
	docs map[string]document.Scope // by document id
	wake chan struct{}
}

func (f *failedIngests) add(sc document.Scope, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.docs == nil {
		f.docs = map[string]document.Scope{}
		f.wake = make(chan struct{}, 1)
	}
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

// woken is the channel add signals.
func (f *failedIngests) woken() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.wake == nil {
		f.wake = make(chan struct{}, 1)
	}
	return f.wake
}

// FinishFailedIngests finishes, until ctx ends, the documents whose ingest
// failed after its first write, as reconciliation finishes those a crash
// cut: the caller got an error, and without it such a document stayed
// saved and unindexed (unsearchable, unextracted) until the next start's
// reconciliation. Each is tried a second after its failure, then at
// growing intervals while it fails again; one whose ingest may still be
// under way (another replica's, or a retry of the upload) is left to it
// while its claim holds, and one indexed or deleted meanwhile is dropped.
func (s *Service) FinishFailedIngests(ctx context.Context) {
	wake := s.failed.woken()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		}
		for delay := failedRetryFirst; ; delay = min(2*delay, failedRetryMost) {
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

// finishFailed tries each failed ingest once and returns how many are left
// to try again.
func (s *Service) finishFailed(ctx context.Context) (left int) {
	var (
		failing int
		first   error
	)
	for id, sc := range s.failed.take() {
		again, err := s.finishFailedOne(ctx, sc, id)
		if err != nil {
			failing++
			first = cmp.Or(first, fmt.Errorf("document %s: %w", id, err))
		}
		if again {
			s.failed.add(sc, id)
			left++
		}
	}
	if failing > 0 && ctx.Err() == nil {
		s.Logger.Warn("failed ingests not finished yet; retrying", slog.Int("failing", failing), slog.Any("error", first))
	}
	return left
}

// finishFailedOne finishes the failed ingest of document id unless it is
// gone, finished, or being ingested again, and says whether to try again.
func (s *Service) finishFailedOne(ctx context.Context, sc document.Scope, id string) (again bool, err error) {
	cur, err := s.Docs.GetDocument(ctx, sc, id)
	switch {
	case errors.Is(err, document.ErrNotFound):
		return false, nil // deleted
	case err != nil:
		return true, err
	case cur.Indexed && !cur.Deleting:
		return false, nil // finished
	case !cur.Deleting && s.ingestLive(cur):
		return true, nil // another ingest of it under way: its claim first
	}
	if err := s.finishOne(ctx, cur); err != nil {
		return true, err
	}
	return false, nil
}
