package chat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/heartbeat"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/retrieval"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/strategy"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

// Status update kinds a turn emits.
const (
	// StatusRetrieval reports the initial search's result.
	StatusRetrieval = "retrieval"
	// StatusRetrievalSkipped reports that the initial search failed and the
	// turn goes on without retrieved context.
	StatusRetrievalSkipped = "retrieval_skipped"
	// StatusMaxIterations reports that the iteration limit stopped the loop.
	StatusMaxIterations = "max_iterations_reached"
	// StatusFinalizeFailed reports that the closing answer after the limit
	// could not be generated.
	StatusFinalizeFailed = "finalize_failed"
	// StatusToolCallsCut reports that the model asked for more tool calls
	// in one step than Config.MaxToolCalls: the first ones ran.
	StatusToolCallsCut = "tool_calls_cut"
)

// maxToolCallsPerMessage is the most tool calls ModelService takes in one
// message: a stored assistant message with more would fail every later
// request of its conversation.
const maxToolCallsPerMessage = 256

// errLeaseLost is the cause of a turn stopped because another process took
// over the conversation (this one could not renew its lease in time).
var errLeaseLost = errors.New("another request took over the conversation")

func newID() string { return uuid.Must(uuid.NewV7()).String() }

// turn is one user message being processed.
type turn struct {
	l      *Loop
	ctx    context.Context // ends when the client goes away or the lease is lost
	cancel context.CancelCauseFunc
	conv   *conversation.Conversation
	scope  conversation.Scope
	req    Request
	strat  strategy.Strategy
	lease  conversation.Lease
	events *events
	store  *persister
	tools  *tools.Registry // the tenant's, chosen when the turn starts
	defs   []*modelv1.Tool // tools as the model sees them
	id     string          // the turn's id, its lease's
	client context.Context // the client's: when detached, its end does not end ctx
	live   *liveness       // nil unless the turn is resumable
	// endLease stops renewing the lease and releases it, once: after the
	// turn's last event is stored and before its client gets it (see
	// events.sendLast), so that the client may send the conversation's
	// next message (or delete it) at once.
	endLease func()

	start      time.Time
	seq        int64              // last sequence number used
	messages   []*modelv1.Message // what the model sees
	iterations int
	tokens     int64
}

func newTurn(ctx context.Context, l *Loop, conv *conversation.Conversation, req Request, strat strategy.Strategy, lease conversation.Lease, emit Emit, id string) *turn {
	// Only a streamed turn can be resumed: SendMessage's caller has no
	// events to resume from.
	resumable := req.Resumable && l.bus != nil && emit != nil
	base := ctx
	if resumable {
		base = context.WithoutCancel(ctx) // see detach
	}
	tctx, cancel := context.WithCancelCause(base)
	t := &turn{
		l: l, ctx: tctx, cancel: cancel, conv: conv, scope: conv.Scope, req: req, strat: strat, lease: lease,
		events: &events{emit: emit, ctx: tctx},
		store:  newPersister(tctx, l.store, conv.Scope, conv.ID),
		start:  l.now(),
		id:     id,
		client: ctx,
	}
	if resumable {
		t.events.pub = &publisher{bus: l.bus, scope: req.Scope, turnID: id, subjects: eventsOfTurn(req.Scope.GetTenantId(), conv.ID, id),
			log: l.log, timeout: l.cfg.EventStoreTimeout}
	}
	return t
}

// run processes the turn and releases everything it holds.
func (t *turn) run() (out *Outcome, err error) {
	stopRenewing := t.keepLease()
	t.endLease = sync.OnceFunc(func() {
		stopRenewing()
		t.releaseLease()
	})
	if t.events.pub != nil {
		t.live = startLiveness(t.l.bus, t.id, t.l.log)
		go t.detach(t.client, t.l.cfg.ResumeGrace)
	}
	defer func() {
		t.endLease()
		t.live.stop() // after the last event is stored: see Loop.probe
		t.events.close()
		t.store.close()
		t.cancel(nil)
		t.l.metrics.turn(t.ctx, t.strat.Name(), outcomeLabel(err), t.l.now().Sub(t.start))
	}()

	t.events.send(&orchestratorv1.StreamMessageResponse{Event: &orchestratorv1.StreamMessageResponse_TurnStarted{
		TurnStarted: &orchestratorv1.TurnStarted{TurnId: t.id, ConversationId: t.conv.ID, Resumable: t.events.pub != nil},
	}})
	// Under the lease: a tenant's first turn may wait for its MCP servers'
	// first connection.
	t.tools, t.defs = t.l.toolsFor(t.ctx, t.scope.TenantID)
	history, err := t.loadHistory()
	if err != nil {
		return nil, t.fail(err)
	}
	user := t.message(conversation.RoleUser)
	user.Content = t.req.Content
	t.store.add(user)

	system := t.systemMessage()
	if system != "" {
		t.messages = append(t.messages, &modelv1.Message{Role: modelv1.Role_ROLE_SYSTEM, Content: system})
	}
	for _, m := range history {
		t.messages = append(t.messages, toModel(m))
	}
	t.messages = append(t.messages, toModel(user))

	for iter := 1; iter <= t.l.cfg.MaxIterations; iter++ {
		t.iterations = iter
		final, done, err := t.iterate(iter, t.defs)
		switch {
		case ended(err):
			return nil, err
		case err != nil:
			return nil, t.fail(err)
		case done:
			return t.complete(final, false)
		}
	}
	return t.finalize()
}

// ended reports whether err already ended the turn (it was cancelled, or
// failed with its ErrorEvent emitted).
func ended(err error) bool {
	var te *TurnError
	return errors.Is(err, ErrCancelled) || errors.As(err, &te)
}

// iterate runs one model call and the tool calls it asks for. done is true
// when the model answered without tool calls (or none were offered); final
// is then its message. A model failure is returned as is; a cancellation is
// handled here, where the partial answer is at hand, and returned as an
// error for which ended is true.
func (t *turn) iterate(iter int, toolDefs []*modelv1.Tool) (final conversation.Message, done bool, err error) {
	itStart := time.Now()
	ans, err := strategy.Run(t.ctx, t.l.model, t.strat, strategy.Iteration{
		Number: iter, Model: t.l.modelFor(t.strat.Name()), Mode: t.l.cfg.Mode, Messages: t.messages, Tools: toolDefs,
	}, t.events)
	t.tokens += ans.Usage.GetTotalTokens()
	assistant := t.message(conversation.RoleAssistant)
	assistant.Content, assistant.Reasoning = ans.Content, ans.Reasoning
	if limit := t.l.cfg.MaxToolCalls; len(ans.ToolCalls) > limit && len(toolDefs) > 0 {
		// A model steered by what it read can ask for hundreds at once:
		// the first ones run, and only they are kept with its message.
		notice := fmt.Sprintf("The model asked for %d tool calls in one step; the first %d ran (the limit).", len(ans.ToolCalls), limit)
		t.events.status(StatusToolCallsCut, notice)
		t.l.log.Warn("tool calls cut", slog.String("conversation_id", t.conv.ID), slog.Int("asked", len(ans.ToolCalls)), slog.Int("ran", limit))
		ans.ToolCalls = ans.ToolCalls[:limit]
	}
	for _, c := range ans.ToolCalls {
		assistant.ToolCalls = append(assistant.ToolCalls, conversation.ToolCall{ID: c.GetId(), Name: c.GetName(), Arguments: c.GetArgumentsJson()})
	}
	if err != nil {
		if t.ctx.Err() != nil {
			return final, false, t.cancelled(assistant, nil)
		}
		return final, false, err
	}
	if len(ans.ToolCalls) == 0 || len(toolDefs) == 0 {
		// With no tools offered, stray tool calls cannot be answered.
		assistant.ToolCalls = nil
		t.observe(iter, time.Since(itStart), ans.ModelTime, 0)
		return assistant, true, nil
	}

	t.messages = append(t.messages, toModel(assistant))
	outcomes, toolTime := t.runTools(iter, ans.ToolCalls)
	results := make([]conversation.Message, len(outcomes))
	for i, o := range outcomes {
		r := t.message(conversation.RoleTool)
		r.Content, r.ToolCallID, r.ToolName, r.ToolError = o.result.Content, o.call.ID, o.call.Name, o.result.IsError
		results[i] = r
	}
	if t.ctx.Err() != nil {
		return final, false, t.cancelled(assistant, results)
	}
	// The assistant turn goes to storage with its results, in one write.
	t.store.add(append([]conversation.Message{assistant}, results...)...)
	for _, r := range results {
		t.messages = append(t.messages, toModel(r))
	}
	t.observe(iter, time.Since(itStart), ans.ModelTime, toolTime)
	return final, false, nil
}

// finalize closes a turn that reached the iteration limit: one more model
// call, with no tools offered, asks for an answer from what was gathered;
// the stored answer starts with a notice saying the limit cut the work
// short. If that call fails, the notice alone is the answer.
func (t *turn) finalize() (*Outcome, error) {
	limit := t.l.cfg.MaxIterations
	notice := fmt.Sprintf("I stopped after %d tool-use iterations, the limit for one message, so this answer may be incomplete.", limit)
	t.events.status(StatusMaxIterations, notice)
	t.events.Content(limit, notice+"\n\n")
	t.messages = append(t.messages, &modelv1.Message{Role: modelv1.Role_ROLE_SYSTEM, Content: fmt.Sprintf(
		"The limit of %d tool-use iterations for this message is reached and no more tools can be called. "+
			"Answer the user now with the information gathered so far, and say what is still missing.", limit)})
	final, _, err := t.iterate(limit, nil)
	switch {
	case ended(err):
		return nil, err
	case err != nil:
		t.l.log.WarnContext(t.ctx, "closing answer failed", "conversation", t.conv.ID, "error", err)
		t.events.status(StatusFinalizeFailed, "The closing answer could not be generated: "+turnStatus(err).Message())
		final = t.message(conversation.RoleAssistant)
	}
	final.Content = strings.TrimSpace(notice + "\n\n" + final.Content)
	return t.complete(final, true)
}

// complete stores the final answer, waits until the whole turn is stored,
// and emits Completed.
func (t *turn) complete(final conversation.Message, maxReached bool) (*Outcome, error) {
	t.store.add(final)
	if err := t.store.flush(); err != nil {
		return nil, t.fail(err)
	}
	c := &orchestratorv1.Completed{
		Iterations:           int32(t.iterations),
		TotalTokens:          t.tokens,
		Duration:             durationpb.New(t.l.now().Sub(t.start)),
		MaxIterationsReached: maxReached,
		MessageId:            final.ID,
	}
	t.events.completed(c, t.endLease) // the turn is stored: the conversation is free
	return &Outcome{Message: final, Completed: c}, nil
}

// cancelled stores what the turn had when the client went away: the
// interrupted assistant message marked cancelled, with results for every
// tool call it made, so the stored history stays valid for the next turn.
func (t *turn) cancelled(assistant conversation.Message, results []conversation.Message) error {
	if cause := context.Cause(t.ctx); errors.Is(cause, errLeaseLost) {
		return t.fail(status.Error(codes.Aborted, cause.Error()))
	}
	assistant.Cancelled = true
	if results == nil {
		for _, c := range assistant.ToolCalls {
			r := t.message(conversation.RoleTool)
			r.Content, r.ToolCallID, r.ToolName, r.ToolError = cancelledResult, c.ID, c.Name, true
			results = append(results, r)
		}
	}
	t.store.add(append([]conversation.Message{assistant}, results...)...)
	if err := t.store.flush(); err != nil {
		t.l.log.WarnContext(t.ctx, "could not store the cancelled turn", "conversation", t.conv.ID, "error", err)
	}
	// The client is gone, but a watch of the turn needs its end.
	t.events.send(&orchestratorv1.StreamMessageResponse{Event: &orchestratorv1.StreamMessageResponse_Error{
		Error: &orchestratorv1.ErrorEvent{Code: "CANCELLED", Message: "the turn was cancelled: " + context.Cause(t.ctx).Error() + "; its partial answer is stored, marked cancelled"},
	}})
	return fmt.Errorf("chat: %w", ErrCancelled)
}

// fail reports a failure after the turn started: it waits for what is
// queued to be stored, emits an ErrorEvent and returns a *TurnError.
func (t *turn) fail(err error) error {
	if errors.Is(err, conversation.ErrLeaseLost) {
		err = status.Error(codes.Aborted, errLeaseLost.Error()+": "+err.Error())
	}
	if ferr := t.store.flush(); ferr != nil && !errors.Is(err, ferr) {
		t.l.log.WarnContext(t.ctx, "could not store the failed turn", "conversation", t.conv.ID, "error", ferr)
	}
	t.l.log.WarnContext(t.ctx, "turn failed", "conversation", t.conv.ID, "iteration", t.iterations, "error", err)
	t.events.failed(err, t.endLease)
	return &TurnError{Err: err}
}

// message returns a new message of the turn with the next sequence number.
func (t *turn) message(role conversation.Role) conversation.Message {
	t.seq++
	return conversation.Message{ID: newID(), Seq: t.seq, Role: role, CreateTime: t.l.now()}
}

// loadHistory reads the rolling window and the last sequence number.
func (t *turn) loadHistory() ([]conversation.Message, error) {
	window := t.l.cfg.HistoryWindow
	msgs, err := t.l.store.Messages(t.ctx, t.scope, t.conv.ID, max(window, 1))
	if err != nil {
		return nil, fmt.Errorf("load history: %w", err)
	}
	if n := len(msgs); n > 0 {
		t.seq = msgs[n-1].Seq
	}
	if window == 0 {
		return nil, nil
	}
	return sanitize(msgs), nil
}

// systemMessage returns the system prompt followed by the context of the
// initial search, or "" when there is neither.
func (t *turn) systemMessage() string {
	var parts []string
	if p := strings.TrimSpace(t.l.cfg.SystemPrompt); p != "" {
		parts = append(parts, p)
	}
	if t.l.search != nil {
		hits, err := t.l.search.Search(t.ctx, t.req.Scope, t.req.Content, t.l.cfg.RetrievalLimit)
		switch {
		case err != nil:
			t.l.log.WarnContext(t.ctx, "retrieval skipped", "conversation", t.conv.ID, "error", err)
			t.events.status(StatusRetrievalSkipped, "Knowledge base search is unavailable; answering without retrieved context ("+err.Error()+").")
		case len(hits) == 0:
			t.events.status(StatusRetrieval, "No passages found in the knowledge base.")
		default:
			t.events.retrieved(fmt.Sprintf("Found %d passages in the knowledge base.", len(hits)), retrieval.Passages(hits))
			parts = append(parts, retrieval.ContextMessage(hits))
		}
	}
	return strings.Join(parts, "\n\n")
}

// keepLease renews the turn's lease every third of its TTL until the
// returned stop is called. If the lease is lost, the turn is cancelled with
// errLeaseLost.
func (t *turn) keepLease() (stop func()) {
	ttl := t.l.cfg.LeaseTTL
	return heartbeat.Keep(t.ctx, ttl/3, func(context.Context) bool {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), ttl/3)
		err := t.l.store.RenewLease(ctx, t.scope, t.conv.ID, t.lease, t.l.now().Add(ttl))
		cancel()
		switch {
		case errors.Is(err, conversation.ErrLeaseLost):
			t.cancel(errLeaseLost)
			return false
		case err != nil:
			t.l.log.WarnContext(t.ctx, "could not renew the turn lease; retrying", "conversation", t.conv.ID, "error", err)
		}
		return true
	})
}

// releaseLease frees the conversation for its next message.
func (t *turn) releaseLease() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), persistTimeout)
	defer cancel()
	if err := t.l.store.ReleaseLease(ctx, t.scope, t.conv.ID, t.lease, t.l.now()); err != nil {
		t.l.log.WarnContext(ctx, "could not release the turn lease; it will expire", "conversation", t.conv.ID, "error", err)
	}
}

func (t *turn) observe(iter int, total, model, tools time.Duration) {
	s := IterationStats{Iteration: iter, Total: total, Model: model, Tools: tools}
	t.l.metrics.iteration(t.ctx, t.strat.Name(), s)
	if t.l.observe != nil {
		t.l.observe(s)
	}
}

func outcomeLabel(err error) string {
	var te *TurnError
	switch {
	case err == nil:
		return "completed"
	case errors.Is(err, ErrCancelled):
		return "cancelled"
	case errors.As(err, &te):
		return "failed"
	}
	return "rejected"
}
