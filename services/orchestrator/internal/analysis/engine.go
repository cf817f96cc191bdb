package analysis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/planner"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/schemas"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/synthesis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/tools"
)

// Source is the event source of every analysis event.
const Source = "orchestrator"

// Work queues (am.work.<queue>) and their durable consumers.
const (
	QueuePlanning  = "analysis.planning"
	QueueTool      = "analysis.tool"
	QueueSynthesis = "analysis.synthesis"
)

// Tuning that is not worth configuring.
const (
	maxConflictRetries = 20
	sweepPageSize      = 200
	maxToolResultBytes = 512 << 10
)

// jobNamespace derives child job ids (UUID v5) from the parent id.
var jobNamespace = uuid.MustParse("6f1c9a52-2f4e-4b8e-9d3a-6a1f0c7e2b11")

// Config tunes the engine. Zero values take the defaults noted.
type Config struct {
	// ToolParallelism is how many tool jobs one process executes at once
	// (default 4).
	ToolParallelism int
	// ModelParallelism is how many planning and synthesis calls, each, one
	// process makes at once (default 4).
	ModelParallelism int
	// ToolTimeout bounds one tool execution (default 30s); a tool's
	// Definition.Timeout or ToolTimeouts entry overrides it.
	ToolTimeout time.Duration
	// ToolTimeouts overrides the timeout per tool name.
	ToolTimeouts map[string]time.Duration
	// ModelTimeout bounds a planning or synthesis call, feedback round
	// included (default 2m).
	ModelTimeout time.Duration
	// ClaimTTL is how long a worker's claim on a job lasts without renewal
	// (default 6s). The worker renews it every ClaimTTL/3 while the job runs,
	// however long its timeout, and every ClaimTTL/3 each engine re-queues
	// the jobs whose claim lapsed: a job whose worker died runs again about
	// ClaimTTL after the worker's last renewal.
	ClaimTTL time.Duration
	// SweepInterval is how often unfinished jobs are checked for stale
	// pending work and unfinished analyses (default 15s).
	SweepInterval time.Duration
	// StaleAfter is how long a pending job or an unfinished analysis must
	// have been untouched before the periodic sweep re-queues or re-advances
	// it (default 1m). Start-up recovery looks at every unfinished job.
	StaleAfter time.Duration
	// AckWait is how long JetStream waits for a work item's ack before
	// redelivering it (default 6s). Workers extend it while they run, and
	// take a work item only when they are free to run it, so it bounds how
	// soon the item of a worker that died before claiming its job comes
	// back, not how long a job may take.
	AckWait time.Duration
	// PlannerModel and SynthesisModel are logical model names (default
	// "planner" and "chat").
	PlannerModel, SynthesisModel string
	// LiveTrees is how long after an analysis is created the process keeps
	// its job events in memory, so that a watch of it from the start asks
	// JetStream nothing (default 10s; negative: every watch replays from
	// the stream). See liveTrees.
	LiveTrees time.Duration
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.ToolParallelism <= 0 {
		c.ToolParallelism = 4
	}
	if c.ModelParallelism <= 0 {
		c.ModelParallelism = 4
	}
	def(&c.ToolTimeout, 30*time.Second)
	def(&c.ModelTimeout, 2*time.Minute)
	def(&c.ClaimTTL, 6*time.Second)
	def(&c.SweepInterval, 15*time.Second)
	def(&c.StaleAfter, time.Minute)
	def(&c.AckWait, 6*time.Second)
	if c.LiveTrees == 0 {
		c.LiveTrees = 10 * time.Second
	}
	if c.PlannerModel == "" {
		c.PlannerModel = "planner"
	}
	if c.SynthesisModel == "" {
		c.SynthesisModel = "chat"
	}
	return c
}

// Model is the part of the ModelService client the engine uses; the
// generated modelv1.ModelServiceClient is one.
type Model interface {
	Chat(ctx context.Context, in *modelv1.ChatRequest, opts ...grpc.CallOption) (*modelv1.ChatResponse, error)
}

// Hooks let tests observe or interrupt the engine at points a crash
// matters. Production code leaves them nil.
type Hooks struct {
	// AfterSettle runs after a job's result is stored and before its work
	// item is acknowledged.
	AfterSettle func(j *Job)
	// BeforeExecute runs after a job was claimed, before it executes.
	BeforeExecute func(j *Job)
	// BeforeArchive runs before the archiver moves the analyses rootIDs
	// in one call.
	BeforeArchive func(rootIDs []string)
}

// Deps are the engine's collaborators. All are required except Logger,
// Hooks and Now.
type Deps struct {
	Store   Store
	Bus     *events.Bus
	Model   Model
	Tools   *tools.Registry
	Schemas *schemas.Registry
	Logger  *slog.Logger
	Hooks   Hooks
	// Now returns the current time; default time.Now.
	Now func() time.Time
	// Toolbox, if set, gives each tenant's tools (Tools plus the tenant's
	// MCP servers'); without it every tenant has Tools.
	Toolbox Toolbox
}

// Toolbox gives the tools of a tenant. Registry returns a complete registry
// (every definition has its executor); ctx bounds any wait for a remote
// tool source.
type Toolbox interface {
	Registry(ctx context.Context, tenant string) *tools.Registry
}

// unavailableExplainer is the optional ability of a Toolbox to say why a
// tool it offered once (a planned tool job's) is missing now; "" if it
// does not know the tool.
type unavailableExplainer interface {
	Unavailable(tenant, tool string) string
}

// Engine runs analyses: it accepts commands (submit, cancel, retry), executes
// work items from the analysis queues, and recovers unfinished work. Its
// methods are safe for concurrent use.
type Engine struct {
	cfg      Config
	store    Store
	bus      *events.Bus
	tools    *tools.Registry
	toolbox  Toolbox // nil: tools for every tenant
	schemas  *schemas.Registry
	planner  *planner.Planner
	synth    *synthesis.Synthesizer
	log      *slog.Logger
	hooks    Hooks
	clock    func() time.Time
	instance string
	// transitions counts jobs entering each status (metrics.go).
	transitions metric.Int64Counter

	mu      sync.Mutex
	running map[string]context.CancelFunc // guarded by mu: executing job id → cancel

	eventsMu sync.Mutex
	events   jetstream.Stream // guarded by eventsMu: the events stream, once looked up

	archiveCh chan archiveRequest // finished analyses for the archiver
	live      *liveTrees          // nil if Config.LiveTrees is negative

	stopOnce  sync.Once
	cancel    context.CancelFunc
	consumers []*events.Consumer
	cancelSub []*nats.Subscription
	loops     sync.WaitGroup
	submitMu  sync.Mutex
	stopping  bool           // guarded by submitMu: Stop has begun
	submits   sync.WaitGroup // advanceAfterSubmit's; Add under submitMu
}

// New builds an engine. It does not start any work; call Start.
func New(cfg Config, d Deps) (*Engine, error) {
	if d.Store == nil || d.Bus == nil || d.Model == nil || d.Tools == nil || d.Schemas == nil {
		return nil, errors.New("analysis: engine needs a store, bus, model, tools and schemas")
	}
	if err := d.Tools.Check(); err != nil {
		return nil, fmt.Errorf("analysis: %w", err)
	}
	cfg = cfg.withDefaults()
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	clock := d.Now
	if clock == nil {
		clock = time.Now
	}
	host, _ := os.Hostname()
	e := &Engine{
		cfg:       cfg,
		store:     d.Store,
		bus:       d.Bus,
		tools:     d.Tools,
		toolbox:   d.Toolbox,
		schemas:   d.Schemas,
		planner:   planner.New(d.Model, cfg.PlannerModel),
		synth:     synthesis.New(d.Model, cfg.SynthesisModel),
		log:       log.With(slog.String("component", "analysis")),
		hooks:     d.Hooks,
		clock:     clock,
		instance:  fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8]),
		running:   map[string]context.CancelFunc{},
		archiveCh: make(chan archiveRequest, archiveQueue),

		transitions: newJobTransitions(),
	}
	if cfg.LiveTrees > 0 {
		e.live = newLiveTrees(d.Bus, cfg.LiveTrees, clock, e.log)
	}
	return e, nil
}

// Config returns the effective configuration.
func (e *Engine) Config() Config { return e.cfg }

// toolsFor returns the tools of tenant.
func (e *Engine) toolsFor(ctx context.Context, tenant string) *tools.Registry {
	if e.toolbox == nil {
		return e.tools
	}
	return e.toolbox.Registry(ctx, tenant)
}

// now is the engine's clock at the storage precision (milliseconds, UTC), so
// events and stored documents agree.
func (e *Engine) now() time.Time { return e.clock().UTC().Truncate(time.Millisecond) }

// Start recovers unfinished work (re-queues pending and abandoned jobs,
// re-advances every unfinished analysis, archives finished ones), then
// starts the work queue consumers, the cancellation listener, the periodic
// sweep, the check for lapsed claims, the archiver and the follower of job
// events that serves new analyses' watches (liveTrees). Work runs until ctx
// is done or Stop is called.
func (e *Engine) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	e.cancel = cancel
	for _, subject := range cancelledSubjects {
		sub, err := e.bus.Conn().Subscribe(subject, e.onCancelled)
		if err != nil {
			cancel()
			for _, s := range e.cancelSub {
				_ = s.Unsubscribe()
			}
			return fmt.Errorf("analysis: subscribe to cancellations: %w", err)
		}
		e.cancelSub = append(e.cancelSub, sub)
	}
	if err := e.sweep(ctx, true); err != nil {
		e.log.Warn("start-up recovery incomplete; the periodic sweep will retry", slog.Any("error", err))
	}
	queues := []struct {
		queue string
		typ   Type
		conc  int
	}{
		{QueuePlanning, TypePlanning, e.cfg.ModelParallelism},
		{QueueTool, TypeTool, e.cfg.ToolParallelism},
		{QueueSynthesis, TypeSynthesis, e.cfg.ModelParallelism},
	}
	for _, q := range queues {
		c, err := e.bus.Consume(ctx, events.ConsumerSpec{
			Stream:        events.StreamWork,
			Durable:       strings.ReplaceAll(q.queue, ".", "-"),
			FilterSubject: events.WorkSubject(q.queue),
			AckWait:       e.cfg.AckWait,
			MaxDeliver:    10,
			Backoff:       []time.Duration{500 * time.Millisecond, 2 * time.Second, 10 * time.Second},
			Concurrency:   q.conc,
		}, e.handler(q.typ))
		if err != nil {
			e.Stop()
			return fmt.Errorf("analysis: %w", err)
		}
		e.consumers = append(e.consumers, c)
	}
	e.loops.Go(func() { e.sweepLoop(ctx) })
	e.loops.Go(func() { e.claimLoop(ctx) })
	e.loops.Go(func() { e.archiveLoop(ctx) })
	if e.live != nil {
		e.loops.Go(func() { e.live.run(ctx) })
	}
	return nil
}

// Stop stops consuming, cancels executing jobs (their leases are released so
// another instance picks them up at once) and waits for the workers.
func (e *Engine) Stop() {
	e.stopOnce.Do(func() {
		for _, sub := range e.cancelSub {
			_ = sub.Unsubscribe()
		}
		if e.cancel != nil {
			e.cancel()
		}
		for _, c := range e.consumers {
			c.Stop()
		}
		e.loops.Wait()
		e.submitMu.Lock()
		e.stopping = true
		e.submitMu.Unlock()
		e.submits.Wait()
	})
}

// effect says what a mutation did.
type effect uint8

const (
	// unchanged: nothing to write.
	unchanged effect = 0
	// stored: write the state without an event (bookkeeping only).
	stored effect = 1 << iota
	// announced: write the state and its job event.
	announced
	// queued: also publish a work item for the job.
	queued
)

// mutate applies fn to the current state of job id and writes the result,
// with the job event and work item fn asks for, in one version-checked
// write; it re-reads and re-applies fn on conflicts. fn must decide from the
// job it is given only. It returns the job as stored (unchanged if fn
// returned unchanged or an error).
func (e *Engine) mutate(ctx context.Context, tenant, project, id string, fn func(j *Job) (effect, error)) (*Job, error) {
	return e.mutateWith(ctx, tenant, project, id, nil, e.store.Update, fn)
}

// mutateKnown is mutate starting from known, the job as this engine last
// read or wrote it, instead of reading it first: the version-checked write
// fails if it changed since, and then the job is read and fn applied again,
// as it is when fn leaves known unchanged (a decision taken on a copy that
// may be stale).
func (e *Engine) mutateKnown(ctx context.Context, known *Job, fn func(j *Job) (effect, error)) (*Job, error) {
	return e.mutateWith(ctx, known.Tenant, known.Project, known.ID, known, e.store.Update, fn)
}

// mutateLazily is mutate with the write held back if the store can
// (LazyUpdater): for a write nothing waits to be stored.
func (e *Engine) mutateLazily(ctx context.Context, tenant, project, id string, fn func(j *Job) (effect, error)) (*Job, error) {
	update := e.store.Update
	if l, ok := e.store.(LazyUpdater); ok {
		update = l.UpdateLazily
	}
	return e.mutateWith(ctx, tenant, project, id, nil, update, fn)
}

// mutateWith is mutate, writing with update, starting from known if it is
// not nil (see mutateKnown).
func (e *Engine) mutateWith(ctx context.Context, tenant, project, id string, known *Job,
	update func(ctx context.Context, j *Job, version int64, outbox ...events.OutboxEntry) error,
	fn func(j *Job) (effect, error),
) (*Job, error) {
	for range maxConflictRetries {
		cur, fresh := known, known == nil
		known = nil
		if fresh {
			var err error
			if cur, err = e.store.Get(ctx, tenant, project, id); err != nil {
				return nil, err
			}
		}
		next := cur.clone()
		eff, err := fn(next)
		if err != nil || eff == unchanged {
			if !fresh {
				continue // decided on a copy that may be stale: read it
			}
			return cur, err
		}
		next.UpdateTime = e.now()
		outbox, err := e.outboxFor(ctx, next, eff)
		if err != nil {
			return nil, err
		}
		err = update(ctx, next, cur.Version, outbox...)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if next.Status != cur.Status {
			e.entered(ctx, next)
		}
		return next, nil
	}
	return nil, fmt.Errorf("analysis: job %s: %w (%d attempts)", id, ErrConflict, maxConflictRetries)
}

// insert stores a new job with its creation event and, if queue, its work
// item. It reports false without error if the job exists already, which
// makes creating derived children idempotent.
func (e *Engine) insert(ctx context.Context, j *Job, queue bool) (bool, error) {
	outbox, err := e.creation(ctx, j, queue)
	if err != nil {
		return false, err
	}
	return e.created(ctx, j, e.store.Insert(ctx, j, outbox...))
}

// insertAll is insert for several jobs, queued, in one write where the
// store can (BatchInserter). Jobs whose id is taken are left as they are.
func (e *Engine) insertAll(ctx context.Context, jobs []*Job) error {
	b, ok := e.store.(BatchInserter)
	if !ok || len(jobs) < 2 {
		for _, j := range jobs {
			if _, err := e.insert(ctx, j, true); err != nil {
				return err
			}
		}
		return nil
	}
	outboxes := make([][]events.OutboxEntry, len(jobs))
	for i, j := range jobs {
		outbox, err := e.creation(ctx, j, true)
		if err != nil {
			return err
		}
		outboxes[i] = outbox
	}
	var errs []error
	for i, err := range b.InsertAll(ctx, jobs, outboxes) {
		if _, err := e.created(ctx, jobs[i], err); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// creation readies new job j to be stored and returns the entries its
// insert carries: its creation event and, if queue, its work item.
func (e *Engine) creation(ctx context.Context, j *Job, queue bool) ([]events.OutboxEntry, error) {
	eff := announced
	if queue {
		eff |= queued
	}
	j.UpdateTime = j.CreateTime
	return e.outboxFor(ctx, j, eff)
}

// created takes the outcome err of inserting j: true if it stored j, false
// without error if the id was taken.
func (e *Engine) created(ctx context.Context, j *Job, err error) (bool, error) {
	switch {
	case errors.Is(err, ErrExists):
		return false, nil
	case err != nil:
		return false, err
	}
	e.entered(ctx, j)
	return true, nil
}

// outboxFor builds the entries a write with effect eff carries: the job
// event first, then the work item (which bumps j.Dispatches).
func (e *Engine) outboxFor(ctx context.Context, j *Job, eff effect) ([]events.OutboxEntry, error) {
	var out []events.OutboxEntry
	if eff&queued != 0 {
		j.Dispatches++
	}
	if eff&announced != 0 {
		entry, err := e.eventEntry(ctx, j)
		if err != nil {
			return nil, err
		}
		out = append(out, entry)
	}
	if eff&queued != 0 {
		entry, err := e.workEntry(ctx, j)
		if err != nil {
			return nil, err
		}
		out = append(out, entry)
	}
	return out, nil
}

// eventEntry is the job event of j's current state.
func (e *Engine) eventEntry(ctx context.Context, j *Job) (events.OutboxEntry, error) {
	scope := &commonv1.Scope{TenantId: j.Tenant, ProjectId: j.Project}
	ev, err := events.NewEvent("job."+string(j.Status), Source, scope, j.RootID,
		&orchestratorv1.JobEvent{Job: eventJob(j), RootId: j.RootID})
	if err != nil {
		return events.OutboxEntry{}, err
	}
	entry, err := events.OutboxEntryFor(JobEventSubject(j.Tenant, j.RootID, j.ID, j.Status), ev)
	if err != nil {
		return events.OutboxEntry{}, err
	}
	return entry.WithTraceContext(ctx), nil
}

// workEntry is a work item asking a worker to run j. Its id is stable per
// dispatch, so the relay re-publishing it is deduplicated by JetStream.
func (e *Engine) workEntry(ctx context.Context, j *Job) (events.OutboxEntry, error) {
	queue, ok := queueOf[j.Type]
	if !ok {
		return events.OutboxEntry{}, fmt.Errorf("analysis: job %s of type %s has no queue", j.ID, j.Type)
	}
	payload, err := anypb.New(&orchestratorv1.JobEvent{
		Job:    &orchestratorv1.Job{Id: j.ID, Type: typeToProto[j.Type], Scope: &commonv1.Scope{TenantId: j.Tenant, ProjectId: j.Project}},
		RootId: j.RootID,
	})
	if err != nil {
		return events.OutboxEntry{}, err
	}
	ev := &commonv1.Event{
		Id:            fmt.Sprintf("work-%s-%d", j.ID, j.Dispatches),
		Type:          "analysis.work." + string(j.Type),
		Source:        Source,
		Time:          timestamppb.New(e.now()),
		Scope:         &commonv1.Scope{TenantId: j.Tenant, ProjectId: j.Project},
		CorrelationId: j.RootID,
		Payload:       payload,
	}
	entry, err := events.OutboxEntryFor(events.WorkSubject(queue), ev)
	if err != nil {
		return events.OutboxEntry{}, err
	}
	return entry.WithTraceContext(ctx), nil
}

// queueOf maps executable job types to their work queue.
var queueOf = map[Type]string{
	TypePlanning:  QueuePlanning,
	TypeTool:      QueueTool,
	TypeSynthesis: QueueSynthesis,
}

// childID derives a child's id from the parent and what the child is.
func childID(rootID, what string) string {
	return uuid.NewSHA1(jobNamespace, []byte(rootID+"/"+what)).String()
}

// onCancelled cancels a locally executing job when its cancellation event
// arrives (CancelJob may have run on another instance).
func (e *Engine) onCancelled(msg *nats.Msg) {
	// am.evt.<tenant>.job.<root>.<id>.cancelled, or am.evt.<tenant>.job.<id>.cancelled
	// from a replica of the previous version.
	parts := strings.Split(msg.Subject, ".")
	switch len(parts) {
	case 7:
		e.cancelLocal(parts[5])
	case 6:
		e.cancelLocal(parts[4])
	}
}

// cancelLocal cancels the execution of job id in this process, if any.
func (e *Engine) cancelLocal(id string) {
	e.mu.Lock()
	cancel := e.running[id]
	e.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// track registers a job's execution so it can be cancelled; the returned
// function unregisters it.
func (e *Engine) track(id string, cancel context.CancelFunc) func() {
	e.mu.Lock()
	e.running[id] = cancel
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		delete(e.running, id)
		e.mu.Unlock()
	}
}
