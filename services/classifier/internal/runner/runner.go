// Package runner drives classification runs: it performs each state's work
// (a plan or classification model call, a fetch, a save of labels, the
// summary), applies the state machine's transition and checkpoints the
// result, with its events, in one versioned write — until the run waits for
// a human, finishes, or fails.
//
// # One executor per run
//
// The executor driving a run holds a lease in the run's checkpoint: taken
// with a versioned write when a run starts, resumes or receives a command;
// renewed with every checkpoint and by a heartbeat every third of the lease
// TTL while the executor works (a model call included, whatever its
// timeout); and released in the write that makes the run wait or finish.
// So the lease of an executor that died lapses at most one TTL after its
// last renewal. A command while the lease is held, or one that loses the
// race for it, fails with ErrBusy (the API answers ABORTED). A resume
// follows the holder instead: its stream carries the holder's events until
// the run waits or finishes, and if the lease is released mid-step or lapses
// (the holder died) the resume takes the run over: the resume a client
// sends after a crash succeeds without retries, however long the step of
// the executor driving the run takes. An executor whose write finds
// the version moved on has lost the run: it re-reads the checkpoint and
// stops driving (a Stop command wins that way: it is written regardless of
// the lease, and the executor finds the run Stopped).
//
// # Nobody has to resume a run
//
// A run left mid-step, by a process that died or stopped or by an executor
// that gave up after a database error, is taken over without a client:
// KeepRecovering looks for live runs in flight whose lease nobody holds
// (at start, then every RecoverInterval) and resumes each as a client's
// resume would. A sole writer takes its predecessor's runs at its start; with
// many writers, some replica takes a run within a third of a lease TTL of its
// lease lapsing. A client that resumes meanwhile follows that executor.
//
// # Resume repeats nothing recorded
//
// Each state's result is recorded in the write that leaves the state, so a
// resumed run redoes only the step it was in when the process died: a plan
// not recorded, a fetch, the classification of the batch whose result was
// not recorded, a save (idempotent: labels are unique per run and
// conversation), the summary.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint"
	"github.com/agentmesh/agentmesh/services/classifier/internal/conversations"
	"github.com/agentmesh/agentmesh/services/classifier/internal/labels"
	"github.com/agentmesh/agentmesh/services/classifier/internal/modelcalls"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runevents"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// Errors of the runner, beyond those of statemachine and checkpoint.
var (
	// ErrBusy means another executor drives the run, or won the race to.
	ErrBusy = errors.New("run is being driven by another executor")
	// errStopped cancels a local executor when its run is stopped.
	errStopped = errors.New("run stopped")
	// errLeaseLost cancels an executor whose lease renewal conflicted.
	errLeaseLost = errors.New("lease lost")
)

// BusyError is ErrBusy with who holds the run and until when.
type BusyError struct {
	// RunID is the run.
	RunID string
	// Until is when the holder's lease expires (zero if the race was lost
	// on a write).
	Until time.Time
}

// Error implements error.
func (e *BusyError) Error() string {
	if e.Until.IsZero() {
		return fmt.Sprintf("run %s changed while this request was applied: another resume or command is driving it", e.RunID)
	}
	return fmt.Sprintf("run %s is being driven by another executor (lease until %s); a resume follows its events, and the command can be sent once the run waits for one",
		e.RunID, e.Until.UTC().Format(time.RFC3339))
}

// Is matches ErrBusy.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// Hook is called after every committed checkpoint with the state it
// recorded, before the executor goes on. Tests use it to crash the process
// or hold the run in a state.
type Hook func(ctx context.Context, runID string, state statemachine.State)

// Deps are what a Runner works with.
type Deps struct {
	// Machine holds the rules and limits.
	Machine statemachine.Machine
	// Checkpoints stores run contexts.
	Checkpoints *checkpoint.Store
	// Conversations is what runs classify.
	Conversations *conversations.Store
	// Labels stores approved labels.
	Labels *labels.Store
	// Model makes the model calls.
	Model *modelcalls.Client
	// Logger logs executor failures; nil discards.
	Logger *slog.Logger
}

// DefaultLeaseTTL is the lease TTL when Config leaves it zero.
const DefaultLeaseTTL = 6 * time.Second

// Config tunes a Runner.
type Config struct {
	// LeaseTTL is how long a lease lasts without renewal; an executor that
	// dies holds its runs this long at most. Executors renew every
	// LeaseTTL/3.
	LeaseTTL time.Duration
	// Instance names this process in lease owners (default: a new id).
	Instance string
	// SoleWriter declares this process the checkpoint store's only writer
	// (agentmesh up, mongox.SingleWriter): a lease whose owner is not of
	// this Instance is the replaced process's, whose executor died with it,
	// so a resume or command takes the run at once instead of after the
	// lease lapses.
	SoleWriter bool
	// AfterCommit, if set, is called after every checkpoint (see Hook).
	AfterCommit Hook
}

// Runner starts, resumes and commands runs. Executors run on goroutines
// bound to the context given to New: when it is done, they stop between
// steps and release their leases. Wait waits for them. A Runner is safe for
// concurrent use.
type Runner struct {
	deps Deps
	cfg  Config
	log  *slog.Logger
	now  func() time.Time
	base context.Context
	wg   sync.WaitGroup

	mu     sync.Mutex            // guards active
	active map[string]*localExec // run id → this process's executor of it
}

// New returns a Runner whose executors live until ctx is done.
func New(ctx context.Context, deps Deps, cfg Config) *Runner {
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Instance == "" {
		cfg.Instance = uuid.NewString()
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{deps: deps, cfg: cfg, log: log, now: time.Now, base: ctx, active: map[string]*localExec{}}
}

// Wait blocks until every executor has returned (after the context given to
// New is done, or their runs wait or finish).
func (r *Runner) Wait() { r.wg.Wait() }

// Drive is one request's effect on a run: done once the executor stops
// (the run waits for a human, finishes, fails, or the executor lost it).
type Drive struct {
	// RunID is the run.
	RunID string

	done chan struct{}
	last uint64
	err  error
}

func finished(runID string, last uint64, err error) *Drive {
	d := &Drive{RunID: runID, done: make(chan struct{}), last: last, err: err}
	close(d.done)
	return d
}

// Done is closed when the executor has stopped.
func (d *Drive) Done() <-chan struct{} { return d.done }

// Result returns, once Done is closed, the per-run sequence of the last
// event the run's checkpoint recorded (a stream forwards events until it
// has sent that one) and the error that stopped the executor early, if any.
func (d *Drive) Result() (lastSeq uint64, err error) {
	<-d.done
	return d.last, d.err
}

func scopeOf(run statemachine.Run) *commonv1.Scope {
	return &commonv1.Scope{TenantId: run.TenantID, ProjectId: run.ProjectID}
}

// entries wraps a transition's events for the outbox, numbering them after
// the count events already written for the run.
func entries(ctx context.Context, scope *commonv1.Scope, runID string, count uint64, evs []runevents.Event) ([]events.OutboxEntry, error) {
	out := make([]events.OutboxEntry, 0, len(evs))
	for i, e := range evs {
		entry, err := e.Envelope(scope, runID, count+uint64(i)+1)
		if err != nil {
			return nil, err
		}
		out = append(out, entry.WithTraceContext(ctx))
	}
	return out, nil
}

func (r *Runner) lease(owner string) *checkpoint.Lease {
	return &checkpoint.Lease{Owner: owner, ExpiresAt: r.now().Add(r.cfg.LeaseTTL)}
}

func (r *Runner) newOwner() string { return r.cfg.Instance + "/" + uuid.NewString() }

// held reports whether l keeps others from taking its run at now: it has
// not lapsed and, for a sole writer, an executor of this process owns it.
func (r *Runner) held(l *checkpoint.Lease, now time.Time) bool {
	if !l.Held(now) {
		return false
	}
	return !r.cfg.SoleWriter || strings.HasPrefix(l.Owner, r.cfg.Instance+"/")
}

// commit writes a transition and runs the post-commit duties.
func (r *Runner) commit(ctx context.Context, rec checkpoint.Record, t statemachine.Transition, lease *checkpoint.Lease) (checkpoint.Record, error) {
	ents, err := entries(ctx, scopeOf(t.Run), t.Run.ID, rec.EventCount, t.Events)
	if err != nil {
		return checkpoint.Record{}, err
	}
	next, err := r.deps.Checkpoints.Commit(ctx, rec, t.Run, lease, ents)
	if err != nil {
		return checkpoint.Record{}, err
	}
	return next, nil
}

// hook calls the AfterCommit hook for a committed record. Callers call it
// outside any lock, since a test hook may block or exit the process.
func (r *Runner) hook(ctx context.Context, rec checkpoint.Record) {
	if r.cfg.AfterCommit != nil {
		r.cfg.AfterCommit(ctx, rec.Run.ID, rec.Run.State)
	}
}

// Start creates a run for instruction and drives it.
func (r *Runner) Start(ctx context.Context, scope *commonv1.Scope, instruction string) (*Drive, error) {
	id := uuid.NewString()
	t := r.deps.Machine.Start(id, scope.GetTenantId(), scope.GetProjectId(), instruction)
	ents, err := entries(ctx, scope, id, 0, t.Events)
	if err != nil {
		return nil, err
	}
	owner := r.newOwner()
	lease := r.lease(owner)
	rec, err := r.deps.Checkpoints.Create(ctx, t.Run, lease, ents)
	if err != nil {
		return nil, err
	}
	return r.claim(ctx, rec, owner), nil
}

// load reads a run; an undecodable checkpoint stops the run (see
// stopCorrupt) and comes back as a finished Drive.
func (r *Runner) load(ctx context.Context, scope *commonv1.Scope, id string) (checkpoint.Record, *Drive, error) {
	rec, err := r.deps.Checkpoints.Load(ctx, scope, id)
	var cerr *checkpoint.CorruptError
	if errors.As(err, &cerr) {
		d, err := r.stopCorrupt(ctx, scope, cerr)
		return checkpoint.Record{}, d, err
	}
	return rec, nil, err
}

// stopCorrupt stops a run whose checkpoint cannot be decoded, with an error
// event, instead of resuming it from an empty context. The Drive's error is
// the *checkpoint.CorruptError.
func (r *Runner) stopCorrupt(ctx context.Context, scope *commonv1.Scope, cerr *checkpoint.CorruptError) (*Drive, error) {
	if cerr.State == statemachine.Stopped && strings.HasPrefix(cerr.StopReason, "checkpoint cannot be decoded") {
		return nil, fmt.Errorf("%w (%s)", &statemachine.StateError{What: "resume", State: statemachine.Stopped}, cerr.StopReason)
	}
	t := r.deps.Machine.Corrupt(cerr.ID, cerr.State, cerr.Cause)
	ents, err := entries(ctx, scope, cerr.ID, cerr.EventCount, t.Events)
	if err != nil {
		return nil, err
	}
	last, err := r.deps.Checkpoints.MarkCorrupt(ctx, scope, cerr, t.Run.StopReason, ents)
	if errors.Is(err, checkpoint.ErrConflict) {
		return nil, &BusyError{RunID: cerr.ID}
	}
	if err != nil {
		return nil, err
	}
	r.log.Error("stopped a run whose checkpoint cannot be decoded", slog.String("run_id", cerr.ID), slog.Any("error", cerr))
	return finished(cerr.ID, last, cerr), nil
}

// Resume continues a run from its checkpoint. A run waiting for a human
// gets its approval request re-emitted; a run in Error is stopped; a
// finished run is a *statemachine.StateError. A run another executor holds
// is followed (see follow): the Drive is done when that executor lets the
// run wait or finish, and takes the run over if the executor lets go of it
// mid-step.
func (r *Runner) Resume(ctx context.Context, scope *commonv1.Scope, id string) (*Drive, error) {
	for range stopAttempts {
		rec, d, err := r.load(ctx, scope, id)
		if d != nil || err != nil {
			return d, err
		}
		if r.held(rec.Lease, r.now()) {
			return r.follow(ctx, scope, id), nil
		}
		d, err = r.resume(ctx, rec)
		if errors.Is(err, checkpoint.ErrConflict) {
			continue // another request took the run first: follow it
		}
		return d, err
	}
	return nil, &BusyError{RunID: id}
}

// resume applies Resume to rec, whose lease nobody holds.
func (r *Runner) resume(ctx context.Context, rec checkpoint.Record) (*Drive, error) {
	t, err := r.deps.Machine.Resumed(rec.Run)
	if err != nil {
		return nil, err
	}
	if t.Run.State == statemachine.Error {
		stop, err := r.deps.Machine.StopAfterError(t.Run)
		if err != nil {
			return nil, err
		}
		t = statemachine.Transition{Run: stop.Run, Events: append(t.Events, stop.Events...)}
	}
	if t.Run.State.Waiting() || t.Run.State.Finished() {
		next, err := r.commit(ctx, rec, t, nil)
		if err != nil {
			return nil, err
		}
		r.hook(ctx, next)
		return finished(rec.Run.ID, next.EventCount, nil), nil
	}
	owner := r.newOwner()
	next, err := r.commit(ctx, rec, t, r.lease(owner))
	if err != nil {
		return nil, err
	}
	return r.claim(ctx, next, owner), nil
}

// Recorded returns a Drive of run id that runs nothing: its executor has
// already stopped, at the last event the run's checkpoint recorded. A
// stream on it forwards the run's recorded events and ends; it is what a
// client reconnecting to a finished run gets (see grpcapi's ResumeRun). It
// takes no lease and writes nothing.
func (r *Runner) Recorded(ctx context.Context, scope *commonv1.Scope, id string) (*Drive, error) {
	rec, d, err := r.load(ctx, scope, id)
	if d != nil || err != nil {
		return d, err
	}
	return finished(id, rec.EventCount, nil), nil
}

// busy turns a lost write race into ErrBusy.
func (r *Runner) busy(id string, err error) error {
	if errors.Is(err, checkpoint.ErrConflict) {
		return &BusyError{RunID: id}
	}
	return err
}

// Command applies a human command and drives what follows. Stop is applied
// in every unfinished state, even while another executor drives the run
// (which then finds the run Stopped and lets go); the other commands need
// the run to wait for them and nobody to hold it.
func (r *Runner) Command(ctx context.Context, scope *commonv1.Scope, id string, c statemachine.Command, feedback string) (*Drive, error) {
	if c == statemachine.Stop {
		return r.stop(ctx, scope, id)
	}
	rec, d, err := r.load(ctx, scope, id)
	if d != nil || err != nil {
		return d, err
	}
	if r.held(rec.Lease, r.now()) {
		return nil, &BusyError{RunID: id, Until: rec.Lease.ExpiresAt}
	}
	t, err := r.deps.Machine.Command(rec.Run, c, feedback)
	if err != nil {
		return nil, err
	}
	owner := r.newOwner()
	next, err := r.commit(ctx, rec, t, r.lease(owner))
	if err != nil {
		return nil, r.busy(id, err)
	}
	return r.claim(ctx, next, owner), nil
}

// stopAttempts bounds how often Stop, or Resume, re-reads a run others
// keep writing to.
const stopAttempts = 20

func (r *Runner) stop(ctx context.Context, scope *commonv1.Scope, id string) (*Drive, error) {
	for range stopAttempts {
		rec, d, err := r.load(ctx, scope, id)
		if d != nil || err != nil {
			return d, err
		}
		t, err := r.deps.Machine.Command(rec.Run, statemachine.Stop, "")
		if err != nil {
			return nil, err
		}
		next, err := r.commit(ctx, rec, t, nil)
		if errors.Is(err, checkpoint.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		r.cancelLocal(id)
		r.hook(ctx, next)
		return finished(id, next.EventCount, nil), nil
	}
	return nil, &BusyError{RunID: id}
}

// localExec is a registered executor of this process.
type localExec struct {
	cancel context.CancelCauseFunc
	done   <-chan struct{} // closed when the executor has stopped
}

// cancelLocal stops this process's executor of run id, if any.
func (r *Runner) cancelLocal(id string) {
	r.mu.Lock()
	x := r.active[id]
	r.mu.Unlock()
	if x != nil {
		x.cancel(errStopped)
	}
}

// claim registers an executor for rec (which owner's lease holds), calls
// the post-commit hook and starts the executor. Registering first lets a
// Stop that lands meanwhile cancel the executor before it does any work.
func (r *Runner) claim(ctx context.Context, rec checkpoint.Record, owner string) *Drive {
	d := &Drive{RunID: rec.Run.ID, done: make(chan struct{}), last: rec.EventCount}
	// The run's model calls carry its scope, so the model gateway counts
	// their tokens for the run's tenant.
	ectx, cancel := context.WithCancelCause(grpcx.WithScope(r.base,
		&commonv1.Scope{TenantId: rec.Run.TenantID, ProjectId: rec.Run.ProjectID}))
	self := &localExec{cancel: cancel, done: d.done}
	r.mu.Lock()
	r.active[rec.Run.ID] = self
	r.mu.Unlock()
	r.wg.Add(1)
	r.hook(ctx, rec)
	go func() {
		defer r.wg.Done()
		defer close(d.done)
		defer func() {
			r.mu.Lock()
			if r.active[rec.Run.ID] == self { // a later executor may have taken the run
				delete(r.active, rec.Run.ID)
			}
			r.mu.Unlock()
			cancel(nil)
		}()
		e := &executor{r: r, rec: rec, owner: owner}
		d.last, d.err = e.run(ectx, cancel)
		if d.err != nil {
			r.log.Warn("run executor stopped early", slog.String("run_id", rec.Run.ID),
				slog.String("state", string(e.current().Run.State)), slog.Any("error", d.err))
		}
	}()
	return d
}
