package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentmesh/agentmesh/libs/heartbeat"
)

// executionGrace is how long past the query timeout an execution still
// recorded as running is waited for before it is taken for interrupted:
// time for the executor to record its result after the database answered.
const executionGrace = 30 * time.Second

// recordTimeout bounds the write of an execution's result, which runs
// detached from the caller's cancellation.
const recordTimeout = 10 * time.Second

// beginExecution moves s, in a confirmation stage, to EXECUTING (see the
// package doc); Send then runs it.
func (a *Agent) beginExecution(s *Session) Reply {
	now := a.opts.Now().UTC()
	s.Execution = &Execution{
		ID:       fmt.Sprintf("%s/%d", s.ID, s.Version+1),
		From:     s.Stage,
		Started:  now,
		Deadline: now.Add(a.opts.QueryTimeout + executionGrace),
		Until:    now.Add(a.opts.ExecutionLeaseTTL),
	}
	s.Stage = StageExecuting
	return Reply{}
}

// execute runs the execution s was just moved to: it writes EXECUTING,
// claims the execution, runs the SQL and records the result (see the
// package doc).
func (a *Agent) execute(ctx context.Context, s *Session) (*Session, Reply, error) {
	a.running.Store(s.Execution.ID, struct{}{})
	defer a.running.Delete(s.Execution.ID)
	s.Updated = s.Execution.Started
	if err := a.store.Update(ctx, s); err != nil {
		return nil, Reply{}, a.lostToAnother(ctx, s, err)
	}
	err := a.store.ClaimExecution(ctx, s)
	if errors.Is(err, ErrExecuting) {
		// Another request wrote EXECUTING at the same version (FerretDB
		// does not isolate the two writes) and claimed it first.
		return nil, Reply{}, err
	}
	ex := s.Execution
	s.Stage, s.Execution = ex.From, nil
	// From here on the SQL may run: a caller that goes away must not cut
	// it short, nor keep its result from being recorded.
	run := context.WithoutCancel(ctx)
	if err == nil {
		defer a.holdClaim(run, ex.ID)()
	}
	var r Reply
	kind, started := JobReadSQL, time.Now()
	switch {
	case err != nil:
		err = fmt.Errorf("claim the execution: %w", err)
	case ex.From == StageConfirmWrite:
		kind = JobWriteData
		r, err = a.runWrite(run, s)
	case ex.From == StageConfirmEmail:
		kind = JobSendEmail
		r, err = a.runEmail(run, s)
	case ex.From == StageExecuteCompareSQL:
		kind = JobCompareSQL
		r, err = a.runCompare(run, s)
	default:
		r, err = a.runQuery(run, s)
	}
	if err != nil {
		s.Stage = ex.From
		r = a.notRun(s, ex, err)
	}
	wctx, cancel := context.WithTimeout(run, recordTimeout)
	defer cancel()
	if err == nil && s.ran != nil {
		// Kept before the session is written: the job ran, whatever
		// becomes of the write (an executor that lost its claim).
		r.Job = jobOf(s, ex, kind, s.ran, time.Since(started))
		if jerr := a.store.AddJob(wctx, r.Job); jerr != nil {
			r.Job = nil
			r.Text += " (The job ran but could not be added to the job list.)"
		}
	}
	done, reply, rerr := a.record(wctx, s, r, a.opts.Now().UTC())
	switch {
	case rerr != nil:
		return nil, Reply{}, rerr
	case err != nil:
		return nil, Reply{}, err
	}
	return done, reply, nil
}

// holdClaim renews the claim of execution id every ExecutionLeaseTTL/3
// until the returned function is called, which waits for the renewals to
// end. A renewal that fails is tried again at the next tick; should the
// claim lapse meanwhile, the session may be taken for interrupted and the
// result write is then refused (see the package doc).
func (a *Agent) holdClaim(ctx context.Context, id string) (stop func()) {
	ttl := a.opts.ExecutionLeaseTTL
	return heartbeat.Keep(ctx, ttl/3, func(ctx context.Context) bool {
		rctx, cancel := context.WithTimeout(ctx, ttl/3)
		_ = a.store.RenewExecution(rctx, id, a.opts.Now().UTC().Add(ttl))
		cancel()
		return true
	})
}

// claimLapsed reports whether the claim of ex, an execution still recorded
// as running before its deadline, lapsed at now: its executor stopped
// renewing it. A claim not found (the executor died between the EXECUTING
// write and the claim) or without an expiry (written by an earlier
// version) counts as held: the deadline decides. For a sole writer, an
// execution it is not running has no executor: the process before it ran
// it and is gone.
func (a *Agent) claimLapsed(ctx context.Context, ex *Execution, now time.Time) (bool, error) {
	if a.opts.SoleWriter {
		_, mine := a.running.Load(ex.ID)
		return !mine, nil
	}
	until, found, err := a.store.ExecutionUntil(ctx, ex.ID)
	if err != nil {
		return false, err
	}
	return found && !until.IsZero() && !now.Before(until), nil
}

// lostToAnother explains an EXECUTING write that failed: when another
// request changed the session first and it is now executing, ErrExecuting.
func (a *Agent) lostToAnother(ctx context.Context, s *Session, err error) error {
	if !errors.Is(err, ErrConflict) {
		return err
	}
	now, gerr := a.store.Get(ctx, s.Scope, s.ID)
	if gerr == nil && now.Stage == StageExecuting {
		return ErrExecuting
	}
	return err
}

// notRun is the reply when the confirmed SQL of ex could not be run or its
// run failed for want of a dependency: s stays at the confirmation.
func (a *Agent) notRun(s *Session, ex *Execution, err error) Reply {
	what := "run the query"
	switch ex.From {
	case StageConfirmWrite:
		what = fmt.Sprintf("write %s", s.Params[paramTable])
	case StageConfirmEmail:
		what = "send the e-mail"
	case StageExecuteCompareSQL:
		what = fmt.Sprintf("compare the queries into %s", s.Params[paramCompareTable])
	}
	return a.confirmAgain(s, fmt.Sprintf("I could not %s: %v. Reply yes to try again, or cancel.", what, err))
}

// interrupted returns s, recorded as EXECUTING past its deadline (the
// process that ran it died, or never recorded the result), to the
// confirmation it came from: the SQL may have run, so it is not run again
// before the user confirms it again.
func (a *Agent) interrupted(s *Session) Reply {
	ex := s.Execution
	s.Execution = nil
	if ex == nil || (ex.From != StageConfirmGeneratedSQL && ex.From != StageConfirmUserSQL && ex.From != StageExecuteSQL && ex.From != StageConfirmWrite &&
		ex.From != StageConfirmEmail && ex.From != StageExecuteCompareSQL) {
		s.JobKind = JobReadSQL
		return a.askMethod(s, "The last confirmed SQL was interrupted and its result was not recorded.")
	}
	s.Stage = ex.From
	at := ex.Started.UTC().Format(time.RFC3339)
	if ex.From == StageConfirmEmail {
		return a.confirmAgain(s, fmt.Sprintf("The e-mail to %s, confirmed at %s, was interrupted before it was recorded: it may or may not have been sent. Reply yes to send it again, or cancel.",
			s.Params[paramRecipients], at))
	}
	if ex.From == StageExecuteCompareSQL {
		return a.confirmAgain(s, fmt.Sprintf("The comparison into %s, confirmed at %s, was interrupted before it was recorded: the table may or may not have been written. Reply yes to run it again, or cancel.",
			s.Params[paramCompareTable], at))
	}
	if ex.From == StageConfirmWrite {
		return a.confirmAgain(s, fmt.Sprintf("Writing to %s, confirmed at %s, was interrupted before it was recorded: the table may or may not have been written. Reply yes to write it again, or cancel.",
			s.Params[paramTable], at))
	}
	return a.confirmAgain(s, fmt.Sprintf("The query confirmed at %s was interrupted before its result was recorded; it may have run. Reply yes to run it again, or cancel.", at))
}

// confirmAgain asks for the confirmation of s's stage once more.
func (a *Agent) confirmAgain(s *Session, text string) Reply {
	if s.Stage == StageExecuteCompareSQL {
		r := a.confirmCompare(s, "")
		r.Text = text
		return r
	}
	if s.Stage == StageConfirmEmail {
		return Reply{Text: text, Options: confirmOptions, SQLToConfirm: s.Params[paramEmailSQL]}
	}
	if s.Stage == StageConfirmWrite {
		return Reply{Text: text, Options: confirmOptions, SQLToConfirm: s.Params[paramExecutedSQL]}
	}
	return confirmReply(text, s.PendingSQL)
}
