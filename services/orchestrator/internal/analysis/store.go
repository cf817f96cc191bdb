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
// given outbox entries in the same single-document write.
//
// The engine reads and writes jobs by id only on the path of an analysis
// (children have derived ids), because FerretDB v1 answers any other query
// by scanning the whole collection.
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
	// List returns jobs matching q, newest first, and the key to continue
	// after the last one ("" at the end).
	List(ctx context.Context, q ListQuery) ([]*Job, string, error)
	// Unfinished returns up to limit jobs of any tenant whose status is not
	// terminal, that were last written before updatedBefore and whose id
	// sorts after afterID, in id order; the sweep and start-up recovery page
	// through them.
	Unfinished(ctx context.Context, updatedBefore time.Time, afterID string, limit int) ([]*Job, error)
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
