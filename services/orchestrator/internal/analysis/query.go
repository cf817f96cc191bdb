package analysis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

// Get returns job id and its children in creation order.
func (e *Engine) Get(ctx context.Context, tenant, project, id string) (*Job, []*Job, error) {
	j, err := e.store.Get(ctx, tenant, project, id)
	if err != nil {
		return nil, nil, err
	}
	children, err := e.children(ctx, j)
	if err != nil {
		return nil, nil, err
	}
	return j, children, nil
}

// List returns jobs matching q, newest first, and the key of the next page.
func (e *Engine) List(ctx context.Context, q ListQuery) ([]*Job, string, error) {
	return e.store.List(ctx, q)
}

// errWatchDone ends a watch after the analysis's final event.
var errWatchDone = errors.New("watch done")

// errLegacyTree ends a watch's replay at an event in the layout before the
// last: the watch replays again with that layout's filters.
var errLegacyTree = errors.New("watch: an analysis of the previous layout")

// EventIDs returns the mapping between the stream sequences Watch speaks
// and the event ids clients see (see events.EventIDs); nil without an
// event bus.
func (e *Engine) EventIDs(ctx context.Context) (*events.EventIDs, error) {
	return e.bus.EventIDs(ctx)
}

// Watch calls fn for every event of analysis rootID's tree, in stream order,
// starting after stream sequence afterSeq (0: from the analysis's first
// event), and then live. It returns nil once the analysis is finished and
// the final event of every job of the tree has been delivered; otherwise it
// runs until ctx is done or fn fails. fn receives the stream sequence,
// usable as an SSE event id.
//
// Events of different jobs reach the stream in the order the outbox relay
// publishes them, which follows each job's own order but not always the
// order across jobs; each event carries the whole job state.
//
// A watch from the start of an analysis created in the last
// Config.LiveTrees is served from the events the engine keeps in memory
// (liveTrees), the same events with the same sequences; any other watch
// replays the stream with a consumer of its own.
func (e *Engine) Watch(ctx context.Context, tenant, project, rootID string, afterSeq uint64,
	fn func(seq uint64, ev *orchestratorv1.JobEvent) error,
) error {
	root, err := e.store.Get(ctx, tenant, project, rootID)
	if err != nil {
		return err
	}
	if root.ParentID != "" {
		return &FieldError{Field: "job_id", Reason: "is not an analysis (root) job"}
	}
	start, last, filters, err := e.treeEvents(ctx, root, afterSeq > 0)
	if err != nil {
		return err
	}
	if afterSeq > 0 {
		if afterSeq > last {
			// No sequence is named: the client's is an event id (the
			// API's layer maps it), and the stream's count every tenant's
			// events.
			return &FieldError{Field: "after_sequence", Reason: "is beyond the events: it is no event id of this watch"}
		}
		if afterSeq > start {
			// Within the tree's events: it must be one of them, or the
			// events of the tree before it would be skipped unsaid (another
			// watch's id, a client mixing up its tabs).
			if err := e.ownEvent(ctx, afterSeq, rootID); err != nil {
				return err
			}
		}
		start = afterSeq
	}
	w := &treeWatch{e: e, tenant: tenant, project: project, rootID: rootID, resumed: afterSeq > 0,
		delivered: map[string]jobMark{}}
	if w.resumed {
		// The client may already hold the analysis's final event (its stream
		// was cut after it): then only the rest of the tree, or nothing,
		// remains to send, and no later event of the root will come.
		if w.rootFinalDelivered(ctx, root, afterSeq) {
			if w.done(ctx) {
				return nil
			}
		}
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go w.recheckWhileIdle(rctx, cancel)
	// A watch from the start learns the tree's layout from its first
	// event: one in the layout before the last (see subjects.go) ends this
	// replay, and the next one adds the children's filters of that layout.
	var legacyAt uint64 // sequence of such a first event
	checkLayout := !w.resumed
	send := func(seq uint64, subject string, ev *commonv1.Event) error {
		if checkLayout {
			checkLayout = false
			if isLegacySubject(subject) {
				legacyAt = seq
				return errLegacyTree
			}
		}
		if ev.GetCorrelationId() != rootID || ev.GetScope().GetProjectId() != project {
			return nil
		}
		var je orchestratorv1.JobEvent
		if err := ev.GetPayload().UnmarshalTo(&je); err != nil || je.GetRootId() != rootID {
			return nil // not an event of this tree
		}
		if err := fn(seq, &je); err != nil {
			return err
		}
		w.deliver(je.GetJob())
		if w.done(rctx) {
			return errWatchDone
		}
		return nil
	}
	if !w.resumed && e.live != nil {
		// A young analysis's events are in memory; if they stop coming,
		// the stream goes on after the last one sent.
		var served bool
		var sent uint64
		if served, sent, err = e.live.serve(rctx, root, send); served {
			if !errors.Is(err, errLiveLost) {
				return watchEnded(rctx, err)
			}
			start, checkLayout = sent, false
		}
	}
	for {
		err = e.bus.ReplaySubjects(rctx, events.StreamEvents, filters, start, send)
		if !errors.Is(err, errLegacyTree) {
			break
		}
		var stream jetstream.Stream
		var last uint64
		if stream, last, err = e.streamLast(rctx); err != nil {
			return err
		}
		if start, filters, err = e.legacyTreeEvents(rctx, stream, root, legacyAt, last); err != nil {
			return err
		}
	}
	return watchEnded(rctx, err)
}

// watchEnded is what Watch returns when its events ended with err: nil
// once the analysis's tree was sent (errWatchDone, or rctx cancelled with
// it), err otherwise.
func watchEnded(rctx context.Context, err error) error {
	if errors.Is(err, errWatchDone) || errors.Is(context.Cause(rctx), errWatchDone) {
		return nil
	}
	return err
}

// watchRecheck is how long a finishing watch waits without an event before
// it reads the tree again: the read made on the last event may have failed
// (the database was down at that moment), and no further event may come.
const watchRecheck = time.Second

// treeWatch is what a Watch knows of the events it sent.
type treeWatch struct {
	e                       *Engine
	tenant, project, rootID string
	resumed                 bool // the client resumed after a sequence

	mu        sync.Mutex
	delivered map[string]jobMark // job id → last state sent
	finishing bool               // the analysis's final event was sent
	last      time.Time          // when the last event was sent
}

func (w *treeWatch) deliver(j *orchestratorv1.Job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.delivered[j.GetId()] = markOf(j)
	if j.GetId() == w.rootID {
		w.finishing = StatusFromProto(j.GetStatus()).Terminal()
	}
	w.last = time.Now()
}

// done reports whether the analysis finished and every job's final event
// was sent.
func (w *treeWatch) done(ctx context.Context) bool {
	w.mu.Lock()
	finishing, delivered := w.finishing, maps.Clone(w.delivered)
	w.mu.Unlock()
	return finishing && w.e.treeDelivered(ctx, w.tenant, w.project, w.rootID, delivered, w.resumed)
}

// rootFinalDelivered records the root's final event as sent when the root
// is finished and that event's sequence is at most afterSeq.
func (w *treeWatch) rootFinalDelivered(ctx context.Context, root *Job, afterSeq uint64) bool {
	if !root.Status.Terminal() {
		return false
	}
	stream, err := w.e.eventStream(ctx)
	if err != nil {
		return false
	}
	msg, err := stream.GetLastMsgForSubject(ctx, JobEventSubject(root.Tenant, root.ID, root.ID, root.Status))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		msg, err = stream.GetLastMsgForSubject(ctx, events.EventSubject(root.Tenant, "job", root.ID, string(root.Status)))
	}
	if err != nil || msg.Sequence > afterSeq {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.delivered[root.ID] = root.mark()
	w.finishing = true
	return true
}

// recheckWhileIdle ends the watch (cancel with errWatchDone) when, after
// watchRecheck without events, the finished tree turns out to be sent.
// Cancelling ctx's watch also ends the loop.
func (w *treeWatch) recheckWhileIdle(ctx context.Context, cancel context.CancelCauseFunc) {
	every(ctx, watchRecheck, func() {
		w.mu.Lock()
		idle := w.finishing && time.Since(w.last) >= watchRecheck
		w.mu.Unlock()
		if idle && ctx.Err() == nil && w.done(ctx) {
			cancel(errWatchDone)
		}
	})
}

// jobMark is what a watch remembers of the last event it sent for a job:
// its status and when it ended. A retried job visits a state again, so the
// status alone cannot tell the final event from an earlier visit's.
type jobMark struct {
	status orchestratorv1.JobStatus
	end    int64 // end time in Unix milliseconds, 0 while running
}

func markOf(j *orchestratorv1.Job) jobMark {
	m := jobMark{status: j.GetStatus()}
	if j.GetEndTime() != nil {
		m.end = j.GetEndTime().AsTime().UnixMilli()
	}
	return m
}

func (j *Job) mark() jobMark {
	m := jobMark{status: statusToProto[j.Status]}
	if j.EndTime != nil {
		m.end = j.EndTime.UnixMilli()
	}
	return m
}

// treeDelivered reports whether the analysis is finished and the last event
// delivered for it and for each child carries the job's stored state (its
// status and end time): nothing more is coming (unless RetryJob reopens it).
// A resumed watch (resumed) trusts that children it saw nothing of were
// delivered before.
func (e *Engine) treeDelivered(ctx context.Context, tenant, project, rootID string, delivered map[string]jobMark, resumed bool) bool {
	root, children, err := e.Get(ctx, tenant, project, rootID)
	if err != nil || !root.Status.Terminal() || delivered[root.ID] != root.mark() {
		return false
	}
	for _, c := range children {
		if !c.Status.Terminal() {
			return false // e.g. a retry reopening the tree, or a cancel half-way
		}
		last, seen := delivered[c.ID]
		if !seen && resumed {
			continue
		}
		if last != c.mark() {
			return false
		}
	}
	return true
}

// treeEvents returns where a watch's replay starts and the subject filters
// of the analysis's tree. A watch from the start replays the stream from
// its first event with treeFilter, and the server's subject index finds
// the tree's first event, or waits for it: that asks JetStream nothing
// before the replay (a lookup of the first event before it took a fifth
// to a third of an analysis's first event p99 in the growth bench), and
// Watch reads the tree's layout from the first event replayed. Events of
// different jobs reach the stream in no fixed order across processes (a
// relay retrying after a NATS fault publishes the analysis's event after
// its planning job's), and the filter matches them all. A resumed watch
// gets the stream's last sequence too (no event id a client holds is
// beyond it) and looks the tree's first event up, for the layout: one in
// the layout before the last (see subjects.go) adds each child's own
// filter (legacyTreeEvents).
func (e *Engine) treeEvents(ctx context.Context, root *Job, resumed bool) (start, last uint64, filters []string, err error) {
	filters = []string{treeFilter(root.Tenant, root.ID)}
	if !resumed {
		return 0, 0, filters, nil
	}
	stream, last, err := e.streamLast(ctx)
	if err != nil {
		return 0, 0, nil, err
	}
	msg, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(filters[0]))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, last, filters, nil
	case err != nil:
		return 0, 0, nil, fmt.Errorf("analysis: watch: %w", err)
	case !isLegacySubject(msg.Subject):
		return msg.Sequence - 1, last, filters, nil
	}
	start, filters, err = e.legacyTreeEvents(ctx, stream, root, msg.Sequence, last)
	return start, last, filters, err
}

// ownEvent refuses a resume after sequence seq when the event there is
// another tree's; one the stream no longer holds cannot be told, and
// passes.
func (e *Engine) ownEvent(ctx context.Context, seq uint64, rootID string) error {
	stream, err := e.eventStream(ctx)
	if err != nil {
		return fmt.Errorf("analysis: watch: %w", err)
	}
	ev, err := events.EventAt(ctx, stream, seq)
	if err != nil {
		return fmt.Errorf("analysis: watch: %w", err)
	}
	if ev != nil && ev.GetCorrelationId() != rootID {
		return &FieldError{Field: "after_sequence", Reason: "is an event id of another watch, not of this analysis"}
	}
	return nil
}

// streamLast returns the events stream and its last sequence.
func (e *Engine) streamLast(ctx context.Context) (jetstream.Stream, uint64, error) {
	stream, err := e.eventStream(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("analysis: watch: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("analysis: watch: %w", err)
	}
	return stream, info.State.LastSeq, nil
}

// legacyTreeEvents returns the sequence just before the first event of an
// analysis whose events are in the layout before the last, whose own first
// event is at sequence firstOwn, and the filters of its tree: treeFilter
// and each child's own in that layout. last is the stream's last sequence,
// read before the children are: a job with an event at or before it was
// stored before that event was published.
func (e *Engine) legacyTreeEvents(ctx context.Context, stream jetstream.Stream, root *Job, firstOwn, last uint64) (start uint64, filters []string, err error) {
	first := min(last, firstOwn-1)
	children, err := e.children(ctx, root)
	if err != nil {
		return 0, nil, fmt.Errorf("analysis: watch: %w", err)
	}
	filters = []string{treeFilter(root.Tenant, root.ID)}
	for _, j := range children {
		filter := events.EntityEventsSubject(root.Tenant, "job", j.ID)
		filters = append(filters, filter)
		msg, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(filter))
		switch {
		case err == nil:
			first = min(first, msg.Sequence-1)
		case errors.Is(err, jetstream.ErrMsgNotFound):
		default:
			return 0, nil, fmt.Errorf("analysis: watch: %w", err)
		}
	}
	return first, filters, nil
}
