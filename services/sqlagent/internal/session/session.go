// Package session runs SQL agent sessions: a stage machine per job kind that
// asks for what it needs (connection, how to get the SQL, the question or
// the SQL), shows SQL for confirmation, asks the confirmed read for its job
// name (EXECUTE_SQL, jobname.go), and only then runs it. READ_SQL's
// result may be written to a table (WRITE_DATA), and a written table
// e-mailed as CSV (SEND_EMAIL, email.go). COMPARE_SQL (compare.go,
// diff.go) compares two confirmed queries, on one connection or two, and
// writes the diff to a table. Sessions are
// stored one document each, written with optimistic concurrency.
//
// # A confirmed SQL runs once
//
// Two confirmations of the same pending SQL can arrive together: two
// replicas behind the gateway, or a client that retries after a gateway
// failover. Both read the session at the same version; before this package
// ran anything, both would have run the SQL and only one recorded it. A
// confirmation now claims the execution before running it:
//
//  1. the session moves to EXECUTING with an Execution (id "<session
//     id>/<version it is written at>", the stage it came from, a
//     deadline), a versioned write: the loser of that race gets ErrConflict,
//     or ErrExecuting if the winner is already executing;
//  2. the execution is claimed by a unique insert of its id
//     (Store.ClaimExecution): a second claim gets ErrExecuting;
//  3. the SQL runs, detached from the caller's cancellation (a client that
//     goes away does not cut a write in half), within the query timeout;
//  4. the result is recorded with a versioned write from the EXECUTING
//     version, which clears the Execution.
//
// Step 1 decides on MongoDB, whose single-document conditional update is
// atomic; step 2 decides on FerretDB v1, which applies updates without
// isolation between clients but refuses a second insert of one _id. Any
// input to an EXECUTING session before the deadline gets ErrExecuting while
// the execution's claim holds: its executor renews the claim every
// ExecutionLeaseTTL/3 until the result is recorded. An execution whose
// process died leaves the session EXECUTING: the first input after its
// claim lapsed (ExecutionLeaseTTL after the last renewal), or in any case
// after the deadline (the query timeout plus executionGrace), records the
// input, does not act on it, and returns the session to the confirmation it
// came from with a reply saying the run was interrupted and may have
// happened; the user confirms again to run it, under a new claim. An
// executor that was only slow (or could not renew) then finds its result
// write refused (ErrConflict): the session says what the user sees, never
// a silent rerun.
package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/sqlgen"
)

// Job kinds.
const (
	// JobReadSQL runs a read query.
	JobReadSQL = "READ_SQL"
	// JobWriteData writes a query result to a new table.
	JobWriteData = "WRITE_DATA"
	// JobSendEmail e-mails the result of a query over a written table.
	JobSendEmail = "SEND_EMAIL"
	// JobCompareSQL compares the results of two queries.
	JobCompareSQL = "COMPARE_SQL"
)

// Stage is a position in a job's stage machine.
type Stage string

// Stages of READ_SQL, WRITE_DATA and SEND_EMAIL.
const (
	StageNeedConnection                   Stage = "NEED_CONNECTION"
	StageAskSQLMethod                     Stage = "ASK_SQL_METHOD"
	StageNeedNaturalLanguage              Stage = "NEED_NATURAL_LANGUAGE"
	StageNeedUserSQL                      Stage = "NEED_USER_SQL"
	StageConfirmGeneratedSQL              Stage = "CONFIRM_GENERATED_SQL"
	StageConfirmUserSQL                   Stage = "CONFIRM_USER_SQL"
	StageShowResults                      Stage = "SHOW_RESULTS"
	StageNeedTableName                    Stage = "NEED_TABLE_NAME"
	StageAskWriteMode                     Stage = "ASK_WRITE_MODE"
	StageAskWriteSchema                   Stage = "ASK_WRITE_SCHEMA"
	StageConfirmWrite                     Stage = "CONFIRM_WRITE"
	StageNeedWriteOrEmail                 Stage = "NEED_WRITE_OR_EMAIL"
	StageConfirmEmailQuery                Stage = "CONFIRM_EMAIL_QUERY"
	StageNeedEmailQuery                   Stage = "NEED_EMAIL_QUERY"
	StageNeedEmailRecipients              Stage = "NEED_EMAIL_RECIPIENTS"
	StageNeedEmailSubject                 Stage = "NEED_EMAIL_SUBJECT"
	StageConfirmEmail                     Stage = "CONFIRM_EMAIL"
	StageDone                             Stage = "DONE"
	StageExecuting                        Stage = "EXECUTING" // a confirmed SQL runs: see the package doc
	defaultRowLimit                             = 200
	defaultQueryTimeout                         = 30 * time.Second
	defaultExecutionLeaseTTL                    = 6 * time.Second
	defaultEmailRowLimit                        = 10000
	defaultCompareRowLimit                      = 100000
	defaultKnowledgeTimeout                     = 3 * time.Second
	roleUser, roleAgent                         = "user", "agent"
	paramConnection, paramDialect               = "connection", "dialect"
	paramMethod, paramQuestion                  = "sql_method", "question"
	paramExecutedSQL, paramRowCount             = "executed_sql", "row_count"
	paramTable, paramWriteMode                  = "table_name", "write_mode"
	methodGenerate, methodUserSQL               = "generate", "user_sql"
	paramWrittenTable, paramWrittenSchema       = "written_table", "written_schema"
	paramWrittenDialect, paramEmailSQL          = "written_dialect", "email_sql"
	paramRecipients, paramSubject               = "recipients", "subject"
	paramEmailedTo                              = "emailed_to"
	paramWriteSchema                            = "write_schema"
)

// Scope is the tenant and project a session belongs to.
type Scope struct {
	TenantID  string
	ProjectID string
}

// Turn is one message of a session's history.
type Turn struct {
	Role string
	Text string
	Time time.Time
}

// Session is a guided database job.
type Session struct {
	ID    string
	Scope Scope
	// JobKind is JobReadSQL, JobWriteData, JobSendEmail or JobCompareSQL.
	JobKind string
	Stage   Stage
	// Params are the parameters gathered so far (connection, sql_method,
	// question, executed_sql, row_count, table_name, write_mode, ...).
	Params map[string]string
	// PendingSQL is the SQL waiting for confirmation.
	PendingSQL string
	Turns      []Turn
	// Execution is the confirmed SQL being run; set only in
	// StageExecuting.
	Execution *Execution
	// SchemaShown are the tables the model was shown for the last SQL it
	// generated; SchemaNote says so in a sentence when the schema was too
	// long for the prompt and only these were shown ("" otherwise).
	SchemaShown []string
	SchemaNote  string
	// LastInput is the session's last reply (to its creation or to an
	// input), with the request id of the input when the client named it;
	// EarlierInputs are the request ids of the inputs before it, newest
	// last, at most maxEarlierInputs.
	LastInput     *AppliedInput
	EarlierInputs []string
	// Version counts writes; the store updates only the version it read.
	Version int64
	Created time.Time
	Updated time.Time
	// ran is set by the run function of an execution that completed: the
	// job to keep. Never stored with the session.
	ran *ranJob
	// requestID is the client's id of the input being handled (see
	// Agent.SendRequest). Never stored with the session.
	requestID string
}

// Execution is a confirmed SQL being run (see the package doc).
type Execution struct {
	// ID is "<session id>/<session version of the EXECUTING write>": the
	// key of the execution's claim.
	ID string
	// From is the confirmation stage the session returns to when the
	// execution was interrupted.
	From Stage
	// Started is when the execution was claimed.
	Started time.Time
	// Deadline is when an execution still recorded as running is taken
	// for interrupted, whatever its claim says.
	Deadline time.Time
	// Until is when the execution's claim lapses unless its executor
	// renews it, which it does every ExecutionLeaseTTL/3 while the SQL
	// runs and its result is recorded: an execution whose claim lapsed is
	// taken for interrupted before its Deadline. It is kept in the claim
	// (Store.ClaimExecution, RenewExecution), not with the session; zero
	// means unknown, and only the Deadline counts.
	Until time.Time
}

// Option is a choice offered to the user.
type Option struct {
	Value string
	Label string
}

// AppliedInput is a reply, with its result table only when that is
// small (keptResultBytes; the job keeps what ran), and the request id of
// the input it answered, if the client named one.
type AppliedInput struct {
	RequestID string
	Reply     Reply
	// JobID is the job the input ran, if it ran one.
	JobID string
}

// maxEarlierInputs bounds Session.EarlierInputs.
const maxEarlierInputs = 15

// Reply is what the agent answers to one input.
type Reply struct {
	Text         string
	Options      []Option
	SQLToConfirm string
	Result       *connections.Result
	// Action is the parameter validator's (ActionAsk, ActionFetchConnections,
	// ...): what the options are or what the reply asks; empty for other
	// replies.
	Action string
	// Job is the job that ran, when one did.
	Job *Job
	// SchemaShown and SchemaNote are the session's, on the reply that
	// shows SQL the model generated.
	SchemaShown []string
	SchemaNote  string
}

// Errors of the session domain. The gRPC layer maps them to codes.
var (
	// ErrNotFound means no session with that id in that scope.
	ErrNotFound = errors.New("session not found")
	// ErrConflict means another input changed the session first.
	ErrConflict = errors.New("session changed concurrently")
	// ErrInputSuperseded means the input's request id is that of an input
	// applied before the session's last one: it is not applied again.
	ErrInputSuperseded = errors.New("input applied before, and the session has moved on since")
	// ErrSessionChanged means the input named the session's version as
	// the client read it, and the session has changed since; errors.As a
	// *SessionChangedError says how.
	ErrSessionChanged = errors.New("the session changed since the version the input expects")
	// ErrFinished means the session is done and takes no more input.
	ErrFinished = errors.New("session is finished")
	// ErrExecuting means a confirmed SQL of the session is being run (by
	// this request's twin, another replica, or a process that died: see
	// the package doc); the session takes no input until it is recorded.
	ErrExecuting = errors.New("the confirmed SQL is being run")
	// ErrUnavailable means the model gateway, a database or the mail
	// server is down.
	ErrUnavailable = errors.New("dependency unavailable")
	// ErrNothingWritten means SEND_EMAIL was asked for before WRITE_DATA
	// wrote a table in the session.
	ErrNothingWritten = errors.New("SEND_EMAIL needs a table written by WRITE_DATA first")
	// ErrEmailOff means no SMTP server is configured.
	ErrEmailOff = errors.New("e-mail is not configured")
	// ErrUnknownConnection means a request named a connection the
	// caller's tenant cannot use: none has that name, or it is another
	// tenant's (the two are not told apart).
	ErrUnknownConnection = errors.New("no such connection")
)

// InputError is bad input; Field names the request field.
type InputError struct {
	Field   string
	Message string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Message }

func inputErr(field, format string, args ...any) error {
	return &InputError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Store keeps sessions. Get and Update only see sessions of the given
// scope. Update writes s if its stored version is still s.Version and then
// increments s.Version; it returns ErrConflict otherwise, ErrNotFound when
// the session does not exist. ClaimExecution records that s.Execution is
// about to run, claimed until s.Execution.Until; a second claim of the
// same Execution.ID fails with ErrExecuting, also between processes (a
// unique insert). RenewExecution moves the claim of execution id to until
// (only its executor calls it); ExecutionUntil returns it (zero, and found
// false, if there is no claim).
type Store interface {
	Create(ctx context.Context, s *Session) error
	Get(ctx context.Context, scope Scope, id string) (*Session, error)
	Update(ctx context.Context, s *Session) error
	JobStore
	PromptStore
	ClaimExecution(ctx context.Context, s *Session) error
	RenewExecution(ctx context.Context, id string, until time.Time) error
	ExecutionUntil(ctx context.Context, id string) (until time.Time, found bool, err error)
}

// Databases is what the agent needs of the configured connections. The
// agent only reaches them through the view of one tenant (tenants.go). Query
// and WriteTable fail with a *connections.RefusedError when the database's
// own check refuses the SQL (nothing ran), connections.ErrQuery when the
// database rejects or fails it, and other errors when it is unreachable;
// WriteRows writes rows computed here (no SQL of the user's) and fails
// the same ways.
type Databases interface {
	List() []connections.Info
	Dialect(name string) (string, error)
	// Schema is the named connection's schema for a prompt about
	// req.Question (connections.Registry.Schema).
	Schema(ctx context.Context, name string, req connections.SchemaRequest) (*connections.Schema, error)
	Schemas(ctx context.Context, name string) ([]string, error)
	Query(ctx context.Context, name, sql string, limit int, timeout time.Duration) (*connections.Result, error)
	WriteTableIn(ctx context.Context, name, sql, schema, table string, mode connections.WriteMode, timeout time.Duration) (int64, error)
	WriteRows(ctx context.Context, name, schema, table string, mode connections.WriteMode, columns []string, rows [][]any, timeout time.Duration) (int64, error)
	CurrentSchema(ctx context.Context, name string) (string, error)
	Writable(name string) (bool, error)
	// Tables lists the base tables of schema ("": the current one) on
	// the named connection, as its write DSN sees them.
	Tables(ctx context.Context, name, schema string) ([]string, error)
	// Visible reports whether tenant may use the named connection
	// (tenants.go).
	Visible(tenant, name string) bool
}

// Knowledge searches the knowledge base of a scope: the texts of the
// passages best matching query, best first.
type Knowledge interface {
	Search(ctx context.Context, scope Scope, query string) ([]string, error)
}

// SQLWriter proposes SQL for a question.
type SQLWriter interface {
	Generate(ctx context.Context, req sqlgen.Request) (string, error)
}

// Options configure an Agent.
type Options struct {
	// RowLimit caps the rows a query returns (default 200).
	RowLimit int
	// QueryTimeout bounds one query (default 30s).
	QueryTimeout time.Duration
	// ExecutionLeaseTTL is how long an execution's claim outlives its
	// executor's last renewal (default 6s): a process that died while a
	// confirmed SQL ran blocks its session this long, not the whole
	// Deadline.
	ExecutionLeaseTTL time.Duration
	// SoleWriter declares this agent's process the store's only writer
	// (agentmesh up, mongox.SingleWriter): an execution recorded as
	// running that this agent is not running was the replaced process's,
	// and the session takes input again at once instead of after its
	// claim lapses.
	SoleWriter bool
	// ConfirmationWords confirm a pending action and are never taken as a
	// parameter when nothing was asked (default
	// DefaultConfirmationWords).
	ConfirmationWords []string
	// Router reads the job kind out of free text (route.go); nil: the
	// agent asks for it with a dropdown.
	Router Router
	// PromptLogging keeps every prompt and answer per session (prompts.go);
	// the caller also hands Agent.LogPrompt to the model client.
	PromptLogging bool
	// Mailer sends SEND_EMAIL's messages; nil: e-mail is off.
	Mailer Mailer
	// EmailRowLimit caps the rows an e-mail carries (default 10000).
	EmailRowLimit int
	// Knowledge, when set, is searched for the question when a schema is
	// too long for the prompt: a passage naming a table makes it
	// relevant (a data dictionary, a runbook). A search that fails or
	// takes longer than KnowledgeTimeout (default 3s) is logged to Logger
	// and the tables are picked without it.
	Knowledge        Knowledge
	KnowledgeTimeout time.Duration
	// Logger logs what fails without failing the job (nil: discarded).
	Logger *slog.Logger
	// CompareRowLimit caps the rows each query of a comparison may return
	// (default 100000); a comparison of more is refused, not cut.
	CompareRowLimit int
	// Now and NewID replace the clock and id source in tests.
	Now   func() time.Time
	NewID func() string
}

// SessionChangedError is ErrSessionChanged with the versions and what now
// waits for approval.
type SessionChangedError struct {
	Expected, Now int64
	// PendingSQL is the SQL waiting for approval now, if any.
	PendingSQL string
}

func (e *SessionChangedError) Error() string {
	return fmt.Sprintf("%v: version %d expected, the session is at %d", ErrSessionChanged, e.Expected, e.Now)
}

func (e *SessionChangedError) Unwrap() error { return ErrSessionChanged }
