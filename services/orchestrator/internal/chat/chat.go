// Package chat is the agentic chat loop: for one user message it loads a
// rolling window of the conversation, adds retrieved context, and lets the
// model call tools, iteration after iteration, until it answers without
// tool calls or the iteration limit is reached. Every step is stored and
// streamed as events.
//
// One message at a time: a turn holds the conversation's lease (see
// conversation.Lease) from its first event until it is stored, renewing it
// while it runs, so a second concurrent message fails with ErrBusy on any
// replica. It releases the lease once its last event (Completed or the
// ErrorEvent) is stored and before its client gets it, so the client that
// gets that event may send the next one.
package chat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventbus "github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/outage"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/strategy"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

// Config tunes the loop.
type Config struct {
	// Model is the logical model a strategy calls unless Models names
	// another for it, e.g. "chat".
	Model string
	// Models maps strategy names to the logical model each calls, so
	// conversations on different strategies can reach different providers.
	Models map[string]string
	// Mode is the streaming mode.
	Mode strategy.Mode
	// MaxIterations bounds the model calls of one turn that may use tools.
	MaxIterations int
	// MaxToolCalls bounds the tool calls one model call may ask for: the
	// first ones run, the rest are dropped and a status update says so
	// (default 16; at most 256, the most ModelService takes in one
	// message of the history).
	MaxToolCalls int
	// HistoryWindow is how many stored messages precede the new one in
	// what the model sees: 0 means the default of 20, a negative value none.
	HistoryWindow int
	// ToolParallelism bounds the tool calls of one iteration running at
	// once.
	ToolParallelism int
	// SystemPrompt, if set, opens every request to the model.
	SystemPrompt string
	// RetrievalLimit is the number of hits of the initial search.
	RetrievalLimit int
	// LeaseTTL is how long a turn's lease lasts without renewal; the turn
	// renews it every third of that (default 6s: a crashed replica's
	// conversation takes new messages again within seconds).
	LeaseTTL time.Duration
	// Holder names this process in busy errors, e.g. the pod name.
	Holder string
	// ResumeGrace is how long a resumable turn whose stream went away
	// keeps running without a WatchTurn following it (default 30s, at
	// least 3×probeInterval): long enough for a client to reconnect through
	// another gateway replica, short enough that an abandoned turn stops.
	ResumeGrace time.Duration
	// EventStoreTimeout is how long a resumable turn waits for the event
	// bus to store one of its events before it goes on without storing
	// any more of them (the turn then cannot be resumed). The default,
	// 12s, outlasts the election of a new leader of the events stream
	// after its leader dies (nats-server elects within 4-9s; measured
	// 4.6-8.6s after a kill -9 of the leader of a three-node cluster), so
	// that a turn under way then pauses instead of losing its events.
	EventStoreTimeout time.Duration
}

// withDefaults fills zero values with the documented defaults.
func (c Config) withDefaults() Config {
	if c.Model == "" {
		c.Model = "chat"
	}
	if c.Mode == 0 {
		c.Mode = strategy.Progressive
	}
	if c.MaxIterations <= 0 {
		c.MaxIterations = 10
	}
	if c.MaxToolCalls <= 0 {
		c.MaxToolCalls = 16
	}
	c.MaxToolCalls = min(c.MaxToolCalls, maxToolCallsPerMessage)
	switch {
	case c.HistoryWindow == 0:
		c.HistoryWindow = 20
	case c.HistoryWindow < 0:
		c.HistoryWindow = 0
	}
	if c.ToolParallelism <= 0 {
		c.ToolParallelism = 4
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 6 * time.Second
	}
	if c.Holder == "" {
		c.Holder = "orchestrator"
	}
	if c.ResumeGrace <= 0 {
		c.ResumeGrace = 30 * time.Second
	}
	c.ResumeGrace = max(c.ResumeGrace, 3*probeInterval)
	if c.EventStoreTimeout <= 0 {
		c.EventStoreTimeout = 12 * time.Second
	}
	return c
}

// Searcher runs the initial retrieval of a turn.
type Searcher interface {
	Search(ctx context.Context, scope *commonv1.Scope, query string, limit int) ([]*indexerv1.SearchHit, error)
}

// Deps are what the loop works with.
type Deps struct {
	// Store keeps conversations. Required.
	Store conversation.Store
	// Model is the model gateway. Required.
	Model modelv1.ModelServiceClient
	// Tools are the tools the model may call. Required (may be empty).
	Tools *tools.Registry
	// Toolbox, if set, gives each tenant's tools (Tools plus the tenant's
	// MCP servers'); without it every tenant has Tools.
	Toolbox Toolbox
	// Strategies are the strategies conversations may use. Required.
	Strategies *strategy.Set
	// Search runs the initial retrieval; nil skips it.
	Search Searcher
	// Logger logs; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Observe, if set, receives every iteration's timing.
	Observe func(IterationStats)
	// Events, if set, stores the events of resumable turns (see
	// Request.Resumable and Watch); nil: no turn is resumable.
	Events *eventbus.Bus
}

// Toolbox gives the tools of a tenant. ctx bounds any wait for a remote
// tool source.
type Toolbox interface {
	Registry(ctx context.Context, tenant string) *tools.Registry
}

// IterationStats is the timing of one loop iteration.
type IterationStats struct {
	// Iteration counts from 1.
	Iteration int
	// Total is the iteration's wall time, from preparing the model request
	// to having the tool results ready for the next one.
	Total time.Duration
	// Model is the part spent waiting on ModelService.
	Model time.Duration
	// Tools is the part spent waiting for tools to finish.
	Tools time.Duration
}

// Overhead is the iteration's time spent in the orchestrator itself.
func (s IterationStats) Overhead() time.Duration { return s.Total - s.Model - s.Tools }

// Loop runs turns. It is safe for concurrent use.
type Loop struct {
	cfg        Config
	store      conversation.Store
	model      modelv1.ModelServiceClient
	tools      *tools.Registry
	toolDefs   []*modelv1.Tool // of tools
	toolbox    Toolbox
	strategies *strategy.Set
	search     Searcher
	log        *slog.Logger
	now        func() time.Time
	observe    func(IterationStats)
	metrics    *metrics
	bus        *eventbus.Bus // nil: turns are not resumable
}

// New returns a Loop.
func New(cfg Config, d Deps) (*Loop, error) {
	if d.Store == nil || d.Model == nil || d.Tools == nil || d.Strategies == nil {
		return nil, errors.New("chat: Store, Model, Tools and Strategies are required")
	}
	l := &Loop{
		cfg: cfg.withDefaults(), store: d.Store, model: d.Model, tools: d.Tools, toolbox: d.Toolbox, strategies: d.Strategies,
		search: d.Search, log: d.Logger, now: d.Now, observe: d.Observe, metrics: newMetrics(), bus: d.Events,
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.now == nil {
		l.now = time.Now
	}
	l.toolDefs = modelTools(d.Tools)
	return l, nil
}

// modelTools is how the model sees reg's tools.
func modelTools(reg *tools.Registry) []*modelv1.Tool {
	var out []*modelv1.Tool
	for _, def := range reg.Definitions() {
		out = append(out, &modelv1.Tool{Name: def.Name, Description: def.Description, ParametersJsonSchema: def.Schema})
	}
	return out
}

// toolsFor returns the registry of tenant and how the model sees it.
func (l *Loop) toolsFor(ctx context.Context, tenant string) (*tools.Registry, []*modelv1.Tool) {
	if l.toolbox == nil {
		return l.tools, l.toolDefs
	}
	reg := l.toolbox.Registry(ctx, tenant)
	if reg == l.tools {
		return l.tools, l.toolDefs
	}
	return reg, modelTools(reg)
}

// Config returns the effective configuration, defaults applied.
func (l *Loop) Config() Config { return l.cfg }

// modelFor returns the logical model strategy name calls.
func (l *Loop) modelFor(name string) string {
	if m := l.cfg.Models[name]; m != "" {
		return m
	}
	return l.cfg.Model
}

// Request is one user message.
type Request struct {
	// Scope owns the conversation.
	Scope *commonv1.Scope
	// ConversationID names it.
	ConversationID string
	// Content is the user's text.
	Content string
	// Resumable asks for a turn a client can resume after its stream is
	// cut (when the loop has an event bus): every event is stored and
	// carries its stream sequence, and the end of Send's ctx no longer
	// cancels the turn at once, only when no Watch follows the turn
	// within ResumeGrace.
	Resumable bool
}

// Emit delivers one event of a turn to the client. The loop calls it from
// one goroutine at a time. Its error is ignored: a client that has gone
// away cancels the turn's context.
type Emit func(*orchestratorv1.StreamMessageResponse) error

// Outcome is a completed turn.
type Outcome struct {
	// Message is the stored final assistant message.
	Message conversation.Message
	// Completed is the statistics sent in the Completed event.
	Completed *orchestratorv1.Completed
}

// TurnError is a failure after the turn started: an ErrorEvent carrying it
// has been emitted, and everything up to the failure is stored.
type TurnError struct {
	// Err is the cause.
	Err error
}

// Error implements error.
func (e *TurnError) Error() string { return "turn failed: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *TurnError) Unwrap() error { return e.Err }

// GRPCStatus is the status a client sees for the failure, the one the
// ErrorEvent carried.
func (e *TurnError) GRPCStatus() *status.Status { return turnStatus(e.Err) }

// turnStatus maps a turn failure to the status its client sees. Failures of
// ModelService keep their code where it means the same to our client
// (Unavailable, ResourceExhausted, ...); codes that would blame the
// client's input (InvalidArgument, NotFound, ...) describe a request the
// orchestrator built, so they become FailedPrecondition. Anything else is
// Internal.
func turnStatus(err error) *status.Status {
	if o := outage.Find(err); o != nil {
		return o.GRPCStatus()
	}
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return status.New(codes.Internal, "internal error") // the detail is logged, never sent
	}
	st := se.GRPCStatus()
	msg := st.Message()
	if w := err.Error(); strings.HasPrefix(w, "model ") {
		msg = strings.SplitN(w, ":", 2)[0] + ": " + msg // "model call: ..." or "model stream: ..."
	}
	// The reason the model gateway gave, else MODEL_CALL_FAILED: a status
	// of the mesh carries one, so that the gateway's connection does not
	// take this turn's failure for its own (grpcx's maskTransport).
	reason := grpcx.Reason(err)
	if reason == "" {
		reason = "MODEL_CALL_FAILED"
	}
	code := codes.Internal
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Canceled, codes.FailedPrecondition, codes.Internal:
		code = st.Code()
	case codes.Unimplemented:
		code = codes.Unavailable
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.OutOfRange, codes.PermissionDenied, codes.Unauthenticated:
		code = codes.FailedPrecondition
	}
	return status.Convert(grpcx.Errorf(code, reason, "%s", msg))
}

// ErrCancelled is the cause of a turn stopped because its caller went away.
var ErrCancelled = errors.New("turn cancelled by the client")

// Send processes one user message: it takes the conversation's lease, runs
// the loop, stores every message and emits every event, ending with a
// Completed event. Before emitting anything it can fail with an error
// wrapping conversation.ErrNotFound or conversation.ErrBusy; after that,
// failures are a *TurnError (an ErrorEvent was emitted) or, when ctx ends,
// an error wrapping ErrCancelled (the partial answer is stored, marked
// cancelled). A resumable turn (req.Resumable, with an event bus) outlives
// ctx while a Watch follows it, and Send returns when the turn ends.
func (l *Loop) Send(ctx context.Context, req Request, emit Emit) (*Outcome, error) {
	scope := conversation.Scope{TenantID: req.Scope.GetTenantId(), ProjectID: req.Scope.GetProjectId()}
	now := l.now()
	lease := conversation.Lease{ID: newID(), Holder: l.cfg.Holder, Until: now.Add(l.cfg.LeaseTTL)}
	conv, err := l.store.AcquireLease(ctx, scope, req.ConversationID, lease, now)
	if err != nil {
		return nil, fmt.Errorf("chat: %w", err)
	}
	strat, ok := l.strategies.Lookup(conv.Strategy)
	if !ok {
		l.log.WarnContext(ctx, "conversation names a strategy that is no longer configured; using the default",
			"conversation", conv.ID, "strategy", conv.Strategy, "default", l.strategies.Default().Name())
		strat = l.strategies.Default()
	}
	t := newTurn(ctx, l, conv, req, strat, conv.Lease, emit, lease.ID)
	return t.run()
}
