package chat

// Resumable turns. A streamed turn's events are stored in AM_EVENTS as they
// happen, one message each, before the client gets them, and each carries
// its stream sequence: the SSE event id. Any replica can then replay a
// turn's events after the id a cut-off client last got and follow it live
// (Watch), the way analyses are watched. A turn's events share one subject,
//
//	am.evt.<tenant>.chat.<conversation>.<turn>.events
//
// whose first message is the TurnStarted and whose last, once the turn has
// ended, its Completed or ErrorEvent: the start and the end are found with
// one direct read each (the first and the last message of the subject), a
// watch filters on am.evt.<tenant>.chat.<conversation>.<turn>.>, and
// deleting a conversation purges am.evt.<tenant>.chat.<conversation>.>
// once the store has deleted it (ForgetConversation; FinishDeletes, if the
// stream was away or the process died meanwhile).
//
// One subject a turn, because the stream keeps state for every subject it
// holds, for events.EventsMaxAge, in the NATS server's heap: with a subject
// for each kind of event (.started, .event, .ended under the same prefix,
// the layout until 2026-11-28), some 40,000 turns stored (the growth
// bench's rows at 0 stored and its seeding to 10,000 conversations) made
// the embedded mesh's live heap 74–87 MB instead of 43 and its collector
// 14–17% of its CPU instead of 3–8%: chat turns/s fell by 25–40%; with one
// subject a turn, by 14–27%. A watch still finds turns in that
// layout, and in the one before it, am.evt.<tenant>.chat.<turn>.<kind>,
// without the conversation; those leave the stream after
// events.EventsMaxAge, the latter not when their conversation is deleted.
//
// A turn's process also answers, on the core NATS subject
// am.chat.turn.<turn> (stored nowhere), whether the turn still runs. A
// watch asks every probeInterval: the process learns that a client follows
// the turn (a turn whose stream went away keeps running only while one
// does, see Config.ResumeGrace), and the watch learns that a turn whose
// process died will send nothing more (no responders and no end event).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	eventbus "github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/heartbeat"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
)

// The kinds of a turn's events: the last token of their type
// (chat.turn.<kind>), and of their subject in the layout before one
// subject a turn.
const (
	kindStarted = "started"
	kindEvent   = "event"
	kindEnded   = "ended"
)

// turnSubjectToken is the last token of a turn's one subject.
const turnSubjectToken = "events"

// eventSource is the source of the events a turn publishes.
const eventSource = "orchestrator"

// Resume timing.
const (
	// probeInterval is how often a watch asks whether its turn still runs.
	probeInterval = 2 * time.Second
	// probeTimeout bounds one such question; no answer in time is taken
	// as "still running" (the bus is slow, not the turn gone).
	probeTimeout = time.Second
)

// Errors of Watch.
var (
	// ErrTurnNotFound: no turn of that id in the scope and conversation, or
	// its events have expired.
	ErrTurnNotFound = errors.New("turn not found")
	// ErrNotResumable: the loop has no event bus.
	ErrNotResumable = errors.New("turns are not resumable: the orchestrator has no event bus")
	// errTurnLost ends a watch whose turn's process went away.
	errTurnLost = errors.New("turn lost")
	// errWatchDone ends a watch after the turn's last event.
	errWatchDone = errors.New("watch done")
)

// FieldError is a watch request that names something impossible.
type FieldError struct {
	// Field is the request field, e.g. "after_sequence".
	Field string
	// Reason says what is wrong with it.
	Reason string
}

// Error implements error.
func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// turnEvents names the subjects of one turn's events: the prefix of
// their subjects, to which the turn's one subject adds turnSubjectToken,
// or, in the layouts before (byKind), each event its kind.
type turnEvents struct {
	prefix string
	byKind bool
}

// chatPrefix is am.evt.<tenant>.chat.<id>.: the start of the subjects of
// every turn of conversation id, or, in the oldest layout, of turn id.
func chatPrefix(tenant, id string) string {
	return eventbus.EventSubjectPrefix + eventbus.SubjectToken(tenant) + ".chat." + eventbus.SubjectToken(id) + "."
}

// eventsOfTurn is where turn turnID of conversation conv stores its events.
func eventsOfTurn(tenant, conv, turnID string) turnEvents {
	return turnEvents{prefix: chatPrefix(tenant, conv) + eventbus.SubjectToken(turnID) + "."}
}

// layoutsOfTurn is where turn turnID of conversation conv may have stored
// its events, today's layout first, then the subject by kind under the
// same prefix, then the subject by kind without the conversation.
func layoutsOfTurn(tenant, conv, turnID string) []turnEvents {
	t := eventsOfTurn(tenant, conv, turnID)
	return []turnEvents{t, {prefix: t.prefix, byKind: true}, {prefix: chatPrefix(tenant, turnID), byKind: true}}
}

// subject is where the turn's events are published (never byKind: only
// watches read those layouts).
func (t turnEvents) subject() string { return t.prefix + turnSubjectToken }

func (t turnEvents) filter() string { return t.prefix + ">" }

// start reads the turn's TurnStarted; nil when the turn has none in this
// layout.
func (t turnEvents) start(ctx context.Context, stream jetstream.Stream) (*storedEvent, error) {
	return t.read(ctx, stream, kindStarted, firstEvent)
}

// end reads the turn's last event, Completed or ErrorEvent; nil while the
// turn runs.
func (t turnEvents) end(ctx context.Context, stream jetstream.Stream) (*storedEvent, error) {
	return t.read(ctx, stream, kindEnded, lastEvent)
}

// read reads the turn's event of kind: in a layout by kind the last on
// its subject, in today's the one at (the first or the last message of
// the turn's subject) if it is of that kind (a turn publishes nothing
// before its start, nothing after its end).
func (t turnEvents) read(ctx context.Context, stream jetstream.Stream, kind string,
	at func(context.Context, jetstream.Stream, string) (*storedEvent, error),
) (*storedEvent, error) {
	if t.byKind {
		return lastEvent(ctx, stream, t.prefix+kind)
	}
	ev, err := at(ctx, stream, t.subject())
	if err != nil || ev == nil || kindOf(ev.ev) == kind {
		return ev, err
	}
	return nil, nil
}

func aliveSubject(turnID string) string { return "am.chat.turn." + eventbus.SubjectToken(turnID) }

// kindOf is ev's kind: started, event or ended.
func kindOf(ev *orchestratorv1.StreamMessageResponse) string {
	switch ev.GetEvent().(type) {
	case *orchestratorv1.StreamMessageResponse_TurnStarted:
		return kindStarted
	case *orchestratorv1.StreamMessageResponse_Completed, *orchestratorv1.StreamMessageResponse_Error:
		return kindEnded
	}
	return kindEvent
}

// publisher stores one turn's events. Its methods are called under
// events.mu, one at a time.
type publisher struct {
	bus      *eventbus.Bus
	scope    *commonv1.Scope
	turnID   string
	subjects turnEvents
	log      *slog.Logger
	// timeout bounds the publish of one event (Config.EventStoreTimeout);
	// the first that fails stops the turn's publishing, so an outage of
	// the bus delays a turn once, by at most this.
	timeout time.Duration
	failed  bool // a publish failed: the rest of the turn is not stored
}

// publish stores ev and returns its stream sequence, or 0 once the bus has
// failed this turn (the client then gets events without ids, and a watch of
// the turn ends with an error when the turn does).
func (p *publisher) publish(ctx context.Context, ev *orchestratorv1.StreamMessageResponse) uint64 {
	if p == nil || p.failed {
		return 0
	}
	kind := kindOf(ev)
	env, err := eventbus.NewEvent("chat.turn."+kind, eventSource, p.scope, p.turnID, ev)
	var seq uint64
	if err == nil {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
		seq, err = p.bus.Publish(pctx, p.subjects.subject(), env)
		cancel()
	}
	if err != nil {
		p.failed = true
		p.log.WarnContext(ctx, "chat turn events no longer stored; the turn cannot be resumed", "turn", p.turnID, "error", err)
		return 0
	}
	return seq
}

// liveness answers watches of a running turn and tells the turn when one
// asked last.
type liveness struct {
	sub *nats.Subscription

	mu    sync.Mutex // guards asked
	asked time.Time
}

// startLiveness subscribes for turnID's watches; nil when it cannot (the
// turn then runs as if never watched).
func startLiveness(bus *eventbus.Bus, turnID string, log *slog.Logger) *liveness {
	lv := &liveness{}
	sub, err := bus.Conn().Subscribe(aliveSubject(turnID), func(m *nats.Msg) {
		lv.mu.Lock()
		lv.asked = time.Now()
		lv.mu.Unlock()
		_ = m.Respond([]byte("running"))
	})
	if err != nil {
		log.Warn("chat turn cannot answer its watches", "turn", turnID, "error", err)
		return nil
	}
	lv.sub = sub
	return lv
}

func (lv *liveness) lastAsked() time.Time {
	if lv == nil {
		return time.Time{}
	}
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return lv.asked
}

func (lv *liveness) stop() {
	if lv != nil {
		_ = lv.sub.Unsubscribe()
	}
}

// errUnwatched is the cause of a turn cancelled because its stream went
// away and no watch followed it within ResumeGrace.
var errUnwatched = errors.New("the client went away and no one resumed the turn")

// detach keeps the turn running after its client's ctx ends, for as long
// as a watch asked about it within grace (counting from the end of ctx);
// then it cancels the turn. It returns when the turn ends.
func (t *turn) detach(client context.Context, grace time.Duration) {
	select {
	case <-t.ctx.Done():
		return
	case <-client.Done():
	}
	gone := time.Now()
	tick := time.NewTicker(grace / 4)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
		last := t.live.lastAsked()
		if last.Before(gone) {
			last = gone
		}
		if time.Since(last) >= grace {
			t.cancel(errUnwatched)
			return
		}
	}
}

// EventIDs returns the mapping between the stream sequences this package
// speaks (StreamMessageResponse.Sequence, Watch's afterSeq) and the event
// ids clients see (see eventbus.EventIDs); nil when turns are not
// resumable (no bus: every sequence is 0).
func (l *Loop) EventIDs(ctx context.Context) (*eventbus.EventIDs, error) {
	return l.bus.EventIDs(ctx)
}

// Watch calls fn with every event of turn turnID of conversationID after
// stream sequence afterSeq (0: from the turn's start), each with its
// Sequence set, then with the turn's events as they come, and returns nil
// after the turn's last event (Completed or ErrorEvent). When the client
// already holds that event it returns nil at once. If the turn's process
// goes away before the turn ends, fn gets a last ErrorEvent (code ABORTED,
// sequence 0) saying so. Errors: ErrNotResumable, ErrTurnNotFound (also for
// a turn of another scope or conversation), a *FieldError for a malformed
// turn_id or an after_sequence beyond the turn, or fn's error. It reads no
// database: the turn's start and end are direct reads of the stream.
func (l *Loop) Watch(ctx context.Context, scope *commonv1.Scope, conversationID, turnID string, afterSeq uint64,
	fn func(*orchestratorv1.StreamMessageResponse) error,
) error {
	if l.bus == nil {
		return ErrNotResumable
	}
	if _, err := uuid.Parse(turnID); err != nil {
		return &FieldError{Field: "turn_id", Reason: "is not a turn id (the turnId of a TurnStarted event, a UUID)"}
	}
	tenant := scope.GetTenantId()
	stream, err := l.bus.JetStream().Stream(ctx, eventbus.StreamEvents)
	if err != nil {
		return fmt.Errorf("chat: watch: %w", err)
	}
	lastSeq := stream.CachedInfo().State.LastSeq // every id a client can hold is at most this
	var subjects turnEvents
	var started *storedEvent
	for _, subjects = range layoutsOfTurn(tenant, conversationID, turnID) {
		if started, err = subjects.start(ctx, stream); err != nil {
			return err
		}
		if started != nil {
			break
		}
	}
	if started == nil {
		return ErrTurnNotFound
	}
	ts := started.ev.GetTurnStarted()
	if started.env.GetScope().GetProjectId() != scope.GetProjectId() || ts.GetConversationId() != conversationID {
		return ErrTurnNotFound
	}
	end, err := subjects.end(ctx, stream)
	if err != nil {
		return err
	}
	switch {
	case end != nil && afterSeq > end.seq, end == nil && afterSeq > lastSeq:
		// No sequence is named: the client's is an event id (the API's
		// layer maps it), and the stream's count every tenant's events.
		return &FieldError{Field: "after_sequence", Reason: "is beyond the turn's events: it is no event id of this turn"}
	case end != nil && afterSeq == end.seq:
		return nil // the client has the whole turn
	case afterSeq >= started.seq:
		// Within the turn's events: it must be one of them, or the turn's
		// events before it would be skipped unsaid (another watch's id).
		ev, err := eventbus.EventAt(ctx, stream, afterSeq)
		if err != nil {
			return fmt.Errorf("chat: watch: %w", err)
		}
		if ev != nil && ev.GetCorrelationId() != turnID {
			return &FieldError{Field: "after_sequence", Reason: "is an event id of another watch, not of this turn"}
		}
	}
	// An id before the turn's start is no event of the turn: everything
	// after it is the whole turn.
	from := max(afterSeq, started.seq-1)

	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go l.probe(rctx, cancel, stream, subjects, turnID)
	err = l.bus.Replay(rctx, eventbus.StreamEvents, subjects.filter(), from, func(seq uint64, env *commonv1.Event) error {
		ev := &orchestratorv1.StreamMessageResponse{}
		if env.GetCorrelationId() != turnID || env.GetPayload().UnmarshalTo(ev) != nil {
			return nil // not an event of this turn
		}
		ev.Sequence = seq
		if err := fn(ev); err != nil {
			return err
		}
		if kindOf(ev) == kindEnded {
			return errWatchDone
		}
		return nil
	})
	switch cause := context.Cause(rctx); {
	case errors.Is(err, errWatchDone):
		return nil
	case errors.Is(cause, errTurnLost) && ctx.Err() == nil:
		return fn(&orchestratorv1.StreamMessageResponse{Event: &orchestratorv1.StreamMessageResponse_Error{Error: &orchestratorv1.ErrorEvent{
			Code:    "ABORTED",
			Message: "the turn stopped before its end: the orchestrator running it went away, or lost the event bus; what it stored is in the conversation",
		}}})
	}
	return err
}

// probe asks, every probeInterval, whether the turn still runs; when twice
// in a row no process answers for it and its last event is not stored, it
// cancels the watch with errTurnLost. Twice: on a NATS cluster the turn's
// subscription reaches the other servers a moment after its first event.
func (l *Loop) probe(ctx context.Context, cancel context.CancelCauseFunc, stream jetstream.Stream, subjects turnEvents, turnID string) {
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	misses := 0
	for {
		_, err := l.bus.Conn().Request(aliveSubject(turnID), nil, probeTimeout)
		if !errors.Is(err, nats.ErrNoResponders) {
			misses = 0
		} else {
			// The turn has ended, or its process died. The end event is
			// stored before the turn stops answering, so its absence now
			// means it never will be.
			end, err := subjects.end(ctx, stream)
			if err == nil && end == nil {
				if misses++; misses >= 2 {
					cancel(errTurnLost)
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// ForgetConversation removes from the events stream the events of every
// turn of conversation conv, which deleting it calls for: a turn's answer
// is in its events. Turns stored before their subjects carried their
// conversation stay until they expire (see the package doc). It tries for
// up to forgetPatience (a stream's leader election takes seconds), then
// drops the store's record of the delete (conversation.DeletionLog). If
// the events stay, the record does too and FinishDeletes tries again; the
// conversation is deleted by then, and Watch finds none of its turns.
func (l *Loop) ForgetConversation(ctx context.Context, scope *commonv1.Scope, conv string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forgetPatience)
	defer cancel()
	var err error
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		if err = l.purgeTurnEvents(ctx, scope.GetTenantId(), conv); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			l.log.Warn("a deleted conversation's turn events are left in the stream for now; they are purged again within a minute or two",
				"conversation", conv, "subject", chatPrefix(scope.GetTenantId(), conv)+">", "error", err)
			return
		case <-time.After(wait):
		}
	}
	if dl, ok := l.store.(conversation.DeletionLog); ok {
		if err := dl.Forgotten(ctx, conv); err != nil {
			l.log.Warn("the record of a conversation's delete stays; its events are purged again", "conversation", conv, "error", err)
		}
	}
}

// purgeTurnEvents removes the events of conversation conv's turns from the
// events stream, once. Without an event bus there is nothing to remove.
func (l *Loop) purgeTurnEvents(ctx context.Context, tenant, conv string) error {
	if l.bus == nil {
		return nil
	}
	stream, err := l.bus.JetStream().Stream(ctx, eventbus.StreamEvents)
	if err != nil {
		return err
	}
	return stream.Purge(ctx, jetstream.WithPurgeSubject(chatPrefix(tenant, conv)+">"))
}

// FinishDeletes finishes, every deleteSweep, the conversation deletes that
// a crash cut or whose turn events stayed in the stream (the store's
// conversation.DeletionLog), until ctx is done or the returned stop is
// called. A store that keeps no such log has nothing to finish.
func (l *Loop) FinishDeletes(ctx context.Context) (stop func()) {
	dl, ok := l.store.(conversation.DeletionLog)
	if !ok {
		return func() {}
	}
	return heartbeat.Keep(ctx, deleteSweep, func(ctx context.Context) bool {
		sctx, cancel := context.WithTimeout(ctx, deleteSweep)
		defer cancel()
		n, err := dl.FinishDeletions(sctx, l.now(), func(ctx context.Context, d conversation.Deletion) error {
			return l.purgeTurnEvents(ctx, d.Scope.TenantID, d.ID)
		})
		if n > 0 {
			l.log.Info("finished conversation deletes", "count", n)
		}
		if err != nil {
			l.log.Warn("conversation deletes left unfinished; tried again later", "error", err)
		}
		return true
	})
}

// deleteSweep is how often FinishDeletes looks.
var deleteSweep = 30 * time.Second

// forgetPatience bounds ForgetConversation's tries.
const forgetPatience = 5 * time.Second

// storedEvent is a turn event read directly from the stream.
type storedEvent struct {
	seq uint64
	env *commonv1.Event
	ev  *orchestratorv1.StreamMessageResponse
}

// lastEvent reads the last event stored on subject; nil when there is none.
func lastEvent(ctx context.Context, stream jetstream.Stream, subject string) (*storedEvent, error) {
	msg, err := stream.GetLastMsgForSubject(ctx, subject)
	return storedMsg(msg, err, subject)
}

// firstEvent reads the first event stored on subject; nil when there is
// none.
func firstEvent(ctx context.Context, stream jetstream.Stream, subject string) (*storedEvent, error) {
	msg, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
	return storedMsg(msg, err, subject)
}

// storedMsg decodes the event a direct read of subject returned.
func storedMsg(msg *jetstream.RawStreamMsg, err error, subject string) (*storedEvent, error) {
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("chat: watch: %w", err)
	}
	se := &storedEvent{seq: msg.Sequence, env: &commonv1.Event{}, ev: &orchestratorv1.StreamMessageResponse{}}
	if err := proto.Unmarshal(msg.Data, se.env); err != nil {
		return nil, fmt.Errorf("chat: watch: decode %s: %w", subject, err)
	}
	if err := se.env.GetPayload().UnmarshalTo(se.ev); err != nil {
		return nil, fmt.Errorf("chat: watch: decode %s: %w", subject, err)
	}
	return se, nil
}
