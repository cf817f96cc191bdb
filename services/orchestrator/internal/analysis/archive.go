package analysis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentmesh/agentmesh/libs/events"
)

// Archiving tuning. A finished analysis is offered to the archive shortly
// after it finishes, by when the relay has normally published its last
// events; a tree with events not published yet (or that changed) stays
// live and is offered again after twice the delay, archiveAttempts times
// in all, after which the periodic sweep archives it.
const (
	archiveDelay    = 25 * time.Millisecond
	archiveAttempts = 6
	archiveQueue    = 4096
	// archiveBatch is how many analyses one store call archives at most:
	// their jobs go in one insert and one delete, which keeps the archiver
	// up with a loaded mesh (an analysis a call, it fell behind and the
	// live set grew).
	archiveBatch = 64
)

// archiveRequest asks the archiver to archive an analysis's tree at a time.
type archiveRequest struct {
	tenant, project, rootID string
	at                      time.Time
	attempt                 int
}

// archiveSoon asks the archiver to archive the tree of root, which has
// finished. It never blocks; if the archiver is swamped, the sweep archives
// the tree later.
func (e *Engine) archiveSoon(root *Job) {
	select {
	case e.archiveCh <- archiveRequest{tenant: root.Tenant, project: root.Project, rootID: root.ID, at: time.Now().Add(archiveDelay)}:
	default:
	}
}

// archiveLoop archives finished analyses when they are due, until ctx is
// done.
func (e *Engine) archiveLoop(ctx context.Context) {
	var due []archiveRequest // ordered by at
	enqueue := func(r archiveRequest) {
		i := len(due)
		for i > 0 && due[i-1].at.After(r.at) {
			i--
		}
		due = append(due, archiveRequest{})
		copy(due[i+1:], due[i:])
		due[i] = r
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if len(due) > 0 {
			timer.Reset(time.Until(due[0].at))
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case r := <-e.archiveCh:
			enqueue(r)
		case <-timer.C:
			// Everything asked for meanwhile joins the batches: under
			// load an archive call takes tens of milliseconds, and taken
			// one request at a time the archiver fell behind.
			for more := true; more; {
				select {
				case r := <-e.archiveCh:
					enqueue(r)
				default:
					more = false
				}
			}
			now := time.Now()
			for len(due) > 0 && !due[0].at.After(now) && ctx.Err() == nil {
				n := 0
				for n < len(due) && n < archiveBatch && !due[n].at.After(now) {
					n++
				}
				batch := due[:n:n]
				due = due[n:]
				for _, r := range e.archiveTrees(ctx, batch) {
					if r.attempt+1 < archiveAttempts {
						r.attempt++
						r.at = now.Add(archiveDelay << r.attempt)
						enqueue(r)
					}
				}
			}
		}
	}
}

// archiveTrees archives the trees of the analyses reqs name, in one
// store call, and returns the requests to offer again later (the tree's
// last events are not relayed yet, it changed meanwhile, or the archive
// failed), logging failures.
func (e *Engine) archiveTrees(ctx context.Context, reqs []archiveRequest) (again []archiveRequest) {
	var (
		trees [][]*Job
		of    []archiveRequest // the request of each tree
	)
	for _, r := range reqs {
		tree, err := e.finishedTree(ctx, r.tenant, r.project, r.rootID)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			if ctx.Err() == nil {
				e.log.Warn("archive analysis failed; will retry", slog.String("job_id", r.rootID), slog.Any("error", err))
			}
			again = append(again, r)
		case tree != nil:
			trees = append(trees, tree)
			of = append(of, r)
		}
	}
	if len(trees) == 0 {
		return again
	}
	if e.hooks.BeforeArchive != nil {
		ids := make([]string, len(trees))
		for i, tree := range trees {
			ids[i] = tree[0].ID
		}
		e.hooks.BeforeArchive(ids)
	}
	done, err := e.archive(ctx, trees)
	if err != nil && ctx.Err() == nil {
		e.log.Warn("archive analyses failed; will retry", slog.Int("analyses", len(trees)), slog.Any("error", err))
	}
	for i, r := range of {
		if !done[i] {
			again = append(again, r)
		}
	}
	return again
}

// archiveTree moves the tree of analysis rootID to the archive if it is
// finished. It reports false if the tree should be offered again later
// (its last events are not relayed yet, or it changed meanwhile).
func (e *Engine) archiveTree(ctx context.Context, tenant, project, rootID string) (bool, error) {
	tree, err := e.finishedTree(ctx, tenant, project, rootID)
	if err != nil || tree == nil {
		return errors.Is(err, ErrNotFound) || err == nil, err
	}
	done, err := e.archive(ctx, [][]*Job{tree})
	return done[0], err
}

// finishedTree returns the jobs of analysis rootID, the analysis first, if
// it is finished: the analysis and all its children are in a final state;
// nil if it is not (reopened, or children still being cancelled).
func (e *Engine) finishedTree(ctx context.Context, tenant, project, rootID string) ([]*Job, error) {
	root, err := e.store.Get(ctx, tenant, project, rootID)
	if err != nil {
		return nil, err
	}
	if !root.Status.Terminal() {
		return nil, nil // reopened (RetryJob): archived when it finishes again
	}
	children, err := e.children(ctx, root)
	if err != nil {
		return nil, err
	}
	for _, c := range children {
		if !c.Status.Terminal() {
			// A cancelled analysis whose children are being cancelled;
			// advance or the sweep finishes them and archives the tree.
			return nil, nil
		}
	}
	return append([]*Job{root}, children...), nil
}

// archive moves trees to the archive (Store.Archive), each once its
// events are in the events stream.
func (e *Engine) archive(ctx context.Context, trees [][]*Job) ([]bool, error) {
	stream, err := e.eventStream(ctx)
	if err != nil {
		return make([]bool, len(trees)), fmt.Errorf("analysis: archive: %w", err)
	}
	return e.store.Archive(ctx, trees, func(outbox []events.OutboxEntry) bool {
		return e.relayed(ctx, stream, outbox)
	})
}

// relayed reports whether the outbox entries of a job of a finished
// analysis (every entry its outbox may hold, in order) may be dropped: its
// last event is in the events stream — the relay publishes a document's
// entries in order, so the ones before it are too — and work items after
// it are moot once the job is finished. The relay removes published
// entries, but the archive need not wait for that: the removal is
// housekeeping, and skipping it spares a write per job.
func (e *Engine) relayed(ctx context.Context, stream jetstream.Stream, outbox []events.OutboxEntry) bool {
	for i := len(outbox) - 1; i >= 0; i-- {
		entry := outbox[i]
		if !strings.HasPrefix(entry.Subject, events.EventSubjectPrefix) {
			continue
		}
		// A finished job's last event is its final one, whose terminal
		// state has a subject of its own (JobEventSubject), so the last
		// message on it is this event unless it is not published yet and
		// an earlier end (before a retry) is.
		msg, err := stream.GetLastMsgForSubject(ctx, entry.Subject)
		return err == nil && msg.Header.Get(events.HeaderMsgID) == entry.ID
	}
	return true
}

// eventStream returns the events stream, looked up once.
func (e *Engine) eventStream(ctx context.Context) (jetstream.Stream, error) {
	e.eventsMu.Lock()
	defer e.eventsMu.Unlock()
	if e.events != nil {
		return e.events, nil
	}
	stream, err := e.bus.JetStream().Stream(ctx, events.StreamEvents)
	if err != nil {
		return nil, err
	}
	e.events = stream
	return stream, nil
}
