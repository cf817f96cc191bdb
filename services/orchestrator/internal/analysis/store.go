package analysis

import (
	"context"
	"errors"
	"time"

	"github.com/agentmesh/agentmesh/libs/events"
)

// Errors of the analysis domain. The gRPC layer maps them to status codes.
var (
	// ErrNotFound means no job with that id exists in the scope.
	ErrNotFound = errors.New("job not found")
	// ErrExists means a job with that id exists already.
	ErrExists = errors.New("job exists")
	// ErrConflict means the job changed since it was read.
	ErrConflict = errors.New("job changed concurrently")
	// ErrWrongState means the command does not apply to the job's status
	// or type (FailedPrecondition).
	ErrWrongState = errors.New("job in wrong state")
	// ErrRequestReused means a submission's request id names an analysis
	// of another request in the scope.
	ErrRequestReused = errors.New("request_id was used for another analysis")
	// ErrInvalid means a request is malformed (InvalidArgument). It is
	// wrapped in a *FieldError naming the field.
	ErrInvalid = errors.New("invalid request")
)

// FieldError is an invalid request field.
type FieldError struct {
	// Field is the request field, e.g. "output_json_schema".
	Field string
	// Reason says what is wrong.
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// Store persists jobs. Implementations translate driver errors to this
// package's errors and are safe for concurrent use. Every write stores the
// given outbox entries in the same single-document write and tells the
// outbox relay about them, so they are published promptly.
//
// The engine reads and writes jobs by id only on the path of an analysis
// (children have derived ids), and archives finished analyses, because on
// FerretDB v1 the cost of every query — by id included — grows with the
// number of jobs in the collection; keeping only live analyses there keeps
// it independent of the history.
type Store interface {
	// Insert stores a new job with its outbox entries; ErrExists if the id
	// is taken.
	Insert(ctx context.Context, j *Job, outbox ...events.OutboxEntry) error
	// Update replaces j's state if its stored version is still version
	// (ErrConflict otherwise, ErrNotFound if it is gone), appends the outbox
	// entries and stores j.Version = version+1.
	Update(ctx context.Context, j *Job, version int64, outbox ...events.OutboxEntry) error
	// Get returns the job id of the tenant and project.
	Get(ctx context.Context, tenant, project, id string) (*Job, error)
	// GetMany is Get for each of ids in as few reads as the store can:
	// jobs[i] is job ids[i], nil if it is not found in the scope.
	GetMany(ctx context.Context, tenant, project string, ids []string) (jobs []*Job, err error)
	// List returns jobs matching q, newest first, and the key to continue
	// after the last one ("" at the end).
	List(ctx context.Context, q ListQuery) ([]*Job, string, error)
	// Live returns up to limit jobs of any tenant that are in the live set
	// (every unfinished job is; finished analyses leave it through Archive),
	// that were last written before updatedBefore and whose id sorts after
	// afterID, in id order; the sweep and start-up recovery page through
	// them.
	Live(ctx context.Context, updatedBefore time.Time, afterID string, limit int) ([]*Job, error)
	// Lapsed returns up to limit running jobs of any tenant whose claim
	// (LeaseUntil) ended before now, earliest first. Every engine asks every
	// ClaimTTL/3, so it must cost little whatever the number of jobs: an
	// indexed query, or a look at memory.
	Lapsed(ctx context.Context, now time.Time, limit int) ([]*Job, error)
	// Archive moves trees, each the jobs of a finished analysis as last
	// read, out of the live set into the archive, where Get and List still
	// find them (a later Update brings a job back). A tree with a job that
	// was written since it was read, or whose outbox entries relayed does
	// not vouch for (published, or moot; given every entry the outbox may
	// hold, in order), stays live; the entries of archived jobs are
	// dropped. It reports, for each tree, whether every job of it has left
	// the live set.
	Archive(ctx context.Context, trees [][]*Job, relayed func([]events.OutboxEntry) bool) ([]bool, error)
}

// BatchInserter is a Store that can insert several jobs in one write: the
// engine creates an analysis's planned tool jobs that way.
type BatchInserter interface {
	// InsertAll is Insert for each job, outboxes[i] the entries of
	// jobs[i]; errs[i] is its error (ErrExists if the id is taken).
	InsertAll(ctx context.Context, jobs []*Job, outboxes [][]events.OutboxEntry) (errs []error)
}

// LazyUpdater is a Store that can hold a write back briefly: the engine
// writes a claim that way, since nothing waits for it to be stored (a
// process that dies before it is written leaves the job pending, which is
// what dying just before the claim leaves too), and the job's result
// usually follows within milliseconds: one write then stores both.
type LazyUpdater interface {
	// UpdateLazily is Update, except that the store may write it a little
	// later, or together with the job's next Update. Reads through the
	// store see it at once; its outbox entries are published once it is
	// written.
	UpdateLazily(ctx context.Context, j *Job, version int64, outbox ...events.OutboxEntry) error
}

// ListQuery filters ListJobs.
type ListQuery struct {
	// Tenant and Project are required.
	Tenant, Project string
	// Optional filters; zero values match everything.
	Status   Status
	Type     Type
	ParentID string
	From, To time.Time
	// Limit is the page size.
	Limit int
	// After continues a previous listing (the key List returned).
	After string
}

// UnrelayedReader is a Store that can say which job events the outboxes of
// its live jobs still hold for the relay. An analysis's final write then
// carries copies of its jobs' (Engine.finishRoot), so that its final event
// follows theirs in the events stream.
type UnrelayedReader interface {
	// Unrelayed returns the job events the outboxes of jobs ids of the
	// scope hold, in order, that the relay has not reported published.
	Unrelayed(ctx context.Context, tenant, project string, ids []string) ([]events.OutboxEntry, error)
}
