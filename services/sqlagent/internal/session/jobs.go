package session

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"
)

// Job is one job that ran: the record kept of every confirmed read,
// write, e-mail and comparison that completed, with the SQL exactly as the
// user approved it (the SQL that ran: the run functions take it from the
// same field the confirmation showed).
type Job struct {
	// ID is the execution's id, "<session id>/<version>": one job per
	// execution, however often its record is written.
	ID        string
	SessionID string
	Scope     Scope
	// Kind is JobReadSQL, JobWriteData, JobSendEmail or JobCompareSQL.
	Kind string
	// Name is the job name of a read (EXECUTE_SQL) or a comparison;
	// empty for the other kinds.
	Name       string
	Connection string
	// SQL is the approved SQL that ran; a comparison's first query.
	SQL string
	// SecondSQL is a comparison's second query.
	SecondSQL string
	// Params are the session's parameters after the run.
	Params map[string]string
	// RowCount is the rows read, written or sent.
	RowCount int64
	// Duration is how long the run took (database, mail server).
	Duration time.Duration
	// Destination says where the result went (see destination).
	Destination string
	Started     time.Time
}

// JobStore keeps jobs. AddJob is idempotent on Job.ID; ListJobs returns
// the jobs of scope that q selects, newest first; GetJob returns
// ErrJobNotFound for a job of another scope.
type JobStore interface {
	AddJob(ctx context.Context, j *Job) error
	ListJobs(ctx context.Context, scope Scope, q JobQuery) ([]Job, error)
	GetJob(ctx context.Context, scope Scope, id string) (*Job, error)
}

// JobQuery selects a page of a scope's jobs.
type JobQuery struct {
	// SessionID, when set, keeps the jobs of that session.
	SessionID string
	// After, when set, keeps the jobs listed after it (older, or as old
	// with a smaller id): the last job of the previous page.
	After *Cursor
	// Limit is the most jobs to return.
	Limit int
}

// Cursor is an item's place in a listing ordered by time, then by id: the
// last item of a page, after which the next page starts.
type Cursor struct {
	Time time.Time
	ID   string
}

// Cursor is j's place in the newest-first order.
func (j *Job) Cursor() Cursor { return Cursor{Time: j.Started, ID: j.ID} }

// page cuts items, read one past limit, to limit, and says whether more
// followed.
func page[T any](items []T, err error, limit int) ([]T, bool, error) {
	if err != nil || len(items) <= limit {
		return items, false, err
	}
	return items[:limit], true, nil
}

// pageLimit is a listing's page size: 0 means 50, more than 500 is 500.
func pageLimit(n int) int {
	if n <= 0 {
		return defaultPage
	}
	return min(n, maxPage)
}

// ErrJobNotFound means no job with that id in that scope.
var ErrJobNotFound = fmt.Errorf("job not found")

// Listing bounds (jobs, prompts).
const (
	defaultPage = 50
	maxPage     = 500
)

// ListJobs lists the jobs of scope that q selects, newest first, and
// whether more follow them; a limit of 0 means 50, and more than 500 is
// 500.
func (a *Agent) ListJobs(ctx context.Context, scope Scope, q JobQuery) ([]Job, bool, error) {
	limit := pageLimit(q.Limit)
	q.Limit = limit + 1 // the one more tells whether another page follows
	jobs, err := a.store.ListJobs(ctx, scope, q)
	return page(jobs, err, limit)
}

// GetJob returns job id of scope, or ErrJobNotFound.
func (a *Agent) GetJob(ctx context.Context, scope Scope, id string) (*Job, error) {
	return a.store.GetJob(ctx, scope, id)
}

// ranJob is what a run function reports of a job that completed.
type ranJob struct {
	sql, secondSQL string
	rows           int64
}

// jobOf builds the record of the execution ex of s, which completed as
// ran said, in d.
func jobOf(s *Session, ex *Execution, kind string, ran *ranJob, d time.Duration) *Job {
	j := &Job{
		ID: ex.ID, SessionID: s.ID, Scope: s.Scope, Kind: kind,
		Connection: s.Params[paramConnection], SQL: ran.sql, SecondSQL: ran.secondSQL,
		Params: maps.Clone(s.Params), RowCount: ran.rows, Duration: d, Started: ex.Started,
	}
	switch kind {
	case JobWriteData:
		j.Destination = fmt.Sprintf("table %s on %s", qualifiedName(s.Params[paramWrittenSchema], s.Params[paramTable]), j.Connection)
	case JobSendEmail:
		j.Destination = "e-mail to " + s.Params[paramEmailedTo]
	case JobCompareSQL:
		j.Name, j.Connection = s.Params[paramCompareJob], s.Params[firstSide.param("connection")]
		j.Destination = fmt.Sprintf("table %s on %s", qualifiedName(s.Params[paramCompareSchem], s.Params[paramCompareTable]), s.Params[paramCompareTarget])
	default:
		j.Name, j.Destination = s.Params[paramJobName], "shown"
	}
	if kind != JobReadSQL {
		// A read's name is not the name of what came after it.
		delete(j.Params, paramJobName)
	}
	return j
}

func qualifiedName(schema, table string) string {
	return strings.TrimPrefix(schema+"."+table, ".")
}
