// Package mongostore keeps SQL agent sessions in MongoDB: one document per
// session in collection "sql_sessions", filtered by tenant and project on
// every read and write, updated with optimistic concurrency on `version`,
// and one document per claimed execution in "sql_executions", whose
// expiry its executor renews while the SQL runs.
//
// # Round trips
//
// Every read and write selects one document by _id: on the embedded
// FerretDB v1 any other filter parses every document of the collection, and
// both collections grow with every session. Get reads by _id and checks
// the scope in Go (mongox.FindByID); Update is mongox.UpdateVersioned on
// {_id, tenant_id, project_id}: for a declared single writer (agentmesh
// up) a read and a write by _id with the rest checked in Go, with many
// writers one conditional update; ClaimExecution is an insert. A confirmed
// SQL job (confirm → run → SHOW_RESULTS) thus costs a read, two updates and
// two inserts (the claim, the kept job) with many writers, and two more
// reads by _id for a single writer.
//
// # Queries and indexes (MongoDB)
//
//	query                                               collection       index
//	Get: {_id} (scope checked in Go)                    sql_sessions     _id_
//	Update: {_id, tenant_id, project_id, version}       sql_sessions     _id_
//	Create, ClaimExecution: inserts (unique _id)        both             _id_
//	RenewExecution, ExecutionUntil: {_id}               sql_executions   _id_
//	AddJob: insert; GetJob: {_id} (scope checked in Go) sql_jobs         _id_
//	ListJobs: {tenant_id, project_id} by started        sql_jobs         scope_started
//	ListJobs of a session: ... and session_id           sql_jobs         scope_session_started
//	AddPrompt: insert; ListPrompts: scope, session_id   sql_prompts      scope_session_time
//
// So sessions need no secondary index (TestEveryQueryIsIndexed checks
// the shapes the store sends); the job listings bring theirs. New drops scope_updated, which earlier versions
// made for listings by scope that no RPC makes: it served no query, and
// since "updated" changes with every write, every write paid for it. A
// listing, when one comes, brings its index along.
//
// # What is assumed of MongoDB
//
// With several replicas, a version-guarded update is atomic (MongoDB
// applies a single-document update atomically), so of two writers of one
// version exactly one wins; and the unique _id index refuses a second
// insert of one execution id, so of two claims exactly one wins. FerretDB
// v1 guarantees only the latter between processes: on it two racing
// updates of one session can both succeed, and the execution claim is what
// keeps a confirmed SQL from running twice (see package session).
package mongostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
)

// Collection is the collection sessions live in.
const Collection = "sql_sessions"

// ExecutionsCollection holds one document per claimed execution, _id the
// execution id: a record of every confirmed SQL started. Only its
// executor updates it, to renew its claim ("until").
const ExecutionsCollection = "sql_executions"

// schemaVersion is the document layout version.
const schemaVersion = 1

// Store implements session.Store on MongoDB.
type Store struct {
	coll       *mongo.Collection
	executions *mongo.Collection
	jobs       *mongo.Collection
	prompts    *mongo.Collection
}

var _ session.Store = (*Store)(nil)

// New returns a Store on db, after dropping the index earlier versions
// made and no query uses (see the package doc).
func New(ctx context.Context, db *mongo.Database) (*Store, error) {
	coll := db.Collection(Collection)
	if err := mongox.DropIndexes(ctx, coll, "scope_updated"); err != nil {
		return nil, err
	}
	jobs := db.Collection(JobsCollection)
	if err := mongox.EnsureIndexes(ctx, jobs, jobIndexes...); err != nil {
		return nil, err
	}
	prompts := db.Collection(PromptsCollection)
	if err := mongox.EnsureIndexes(ctx, prompts, promptIndexes...); err != nil {
		return nil, err
	}
	return &Store{coll: coll, executions: db.Collection(ExecutionsCollection), jobs: jobs, prompts: prompts}, nil
}

type turnDoc struct {
	Role string    `bson:"role"`
	Text string    `bson:"text"`
	Time time.Time `bson:"time"`
}

type executionDoc struct {
	ID       string    `bson:"id"`
	From     string    `bson:"from"`
	Started  time.Time `bson:"started"`
	Deadline time.Time `bson:"deadline"`
}

// inputDoc is the session's last reply (session.AppliedInput), with the
// request id of the input it answered when the client named one (new
// fields: older documents read as having none).
type inputDoc struct {
	RequestID    string      `bson:"request_id"`
	Text         string      `bson:"text"`
	Options      []optionDoc `bson:"options,omitempty"`
	SQLToConfirm string      `bson:"sql_to_confirm,omitempty"`
	Action       string      `bson:"action,omitempty"`
	SchemaShown  []string    `bson:"schema_tables_shown,omitempty"`
	SchemaNote   string      `bson:"schema_note,omitempty"`
	JobID        string      `bson:"job_id,omitempty"`
	Result       *resultDoc  `bson:"result,omitempty"`
}

// resultDoc is a kept result table (connections.Result): its values are
// nil, bool, int64, float64 or string, which BSON keeps as they are. A
// row is a document of its own: FerretDB stores no array directly inside
// another.
type resultDoc struct {
	Columns   []string `bson:"columns"`
	Rows      []rowDoc `bson:"rows"`
	Truncated bool     `bson:"truncated,omitempty"`
}

type rowDoc struct {
	Values []any `bson:"v"`
}

type optionDoc struct {
	Value string `bson:"value"`
	Label string `bson:"label"`
}

type doc struct {
	ID            string            `bson:"_id"`
	TenantID      string            `bson:"tenant_id"`
	ProjectID     string            `bson:"project_id"`
	SchemaVersion int               `bson:"schema_version"`
	Version       int64             `bson:"version"`
	JobKind       string            `bson:"job_kind"`
	Stage         string            `bson:"stage"`
	Params        map[string]string `bson:"params"`
	PendingSQL    string            `bson:"pending_sql"`
	Execution     *executionDoc     `bson:"execution"`
	SchemaShown   []string          `bson:"schema_tables_shown,omitempty"`
	SchemaNote    string            `bson:"schema_note,omitempty"`
	Turns         []turnDoc         `bson:"turns"`
	LastInput     *inputDoc         `bson:"last_input,omitempty"`
	EarlierInputs []string          `bson:"earlier_inputs,omitempty"`
	Created       time.Time         `bson:"created"`
	Updated       time.Time         `bson:"updated"`
}

func toDoc(s *session.Session) doc {
	d := doc{
		ID: s.ID, TenantID: s.Scope.TenantID, ProjectID: s.Scope.ProjectID, SchemaVersion: schemaVersion,
		Version: s.Version, JobKind: s.JobKind, Stage: string(s.Stage), Params: s.Params,
		PendingSQL: s.PendingSQL, Created: s.Created, Updated: s.Updated, Turns: []turnDoc{},
		SchemaShown: s.SchemaShown, SchemaNote: s.SchemaNote,
	}
	for _, t := range s.Turns {
		d.Turns = append(d.Turns, turnDoc{Role: t.Role, Text: t.Text, Time: t.Time})
	}
	if e := s.Execution; e != nil {
		d.Execution = &executionDoc{ID: e.ID, From: string(e.From), Started: e.Started.UTC(), Deadline: e.Deadline.UTC()}
	}
	d.EarlierInputs = s.EarlierInputs
	if in := s.LastInput; in != nil {
		r := in.Reply
		d.LastInput = &inputDoc{RequestID: in.RequestID, Text: r.Text, SQLToConfirm: r.SQLToConfirm, Action: r.Action,
			SchemaShown: r.SchemaShown, SchemaNote: r.SchemaNote, JobID: in.JobID}
		for _, o := range r.Options {
			d.LastInput.Options = append(d.LastInput.Options, optionDoc{Value: o.Value, Label: o.Label})
		}
		if t := r.Result; t != nil {
			rd := &resultDoc{Columns: t.Columns, Rows: make([]rowDoc, len(t.Rows)), Truncated: t.Truncated}
			for i, row := range t.Rows {
				rd.Rows[i].Values = row
			}
			d.LastInput.Result = rd
		}
	}
	return d
}

func fromDoc(d doc) *session.Session {
	s := &session.Session{
		ID: d.ID, Scope: session.Scope{TenantID: d.TenantID, ProjectID: d.ProjectID},
		JobKind: d.JobKind, Stage: session.Stage(d.Stage), Params: d.Params, PendingSQL: d.PendingSQL,
		Version: d.Version, Created: d.Created.UTC(), Updated: d.Updated.UTC(),
		SchemaShown: d.SchemaShown, SchemaNote: d.SchemaNote,
	}
	if s.Params == nil {
		s.Params = map[string]string{}
	}
	if e := d.Execution; e != nil {
		s.Execution = &session.Execution{ID: e.ID, From: session.Stage(e.From), Started: e.Started.UTC(), Deadline: e.Deadline.UTC()}
	}
	s.EarlierInputs = d.EarlierInputs
	if in := d.LastInput; in != nil {
		s.LastInput = &session.AppliedInput{RequestID: in.RequestID, JobID: in.JobID, Reply: session.Reply{
			Text: in.Text, SQLToConfirm: in.SQLToConfirm, Action: in.Action, SchemaShown: in.SchemaShown, SchemaNote: in.SchemaNote,
		}}
		for _, o := range in.Options {
			s.LastInput.Reply.Options = append(s.LastInput.Reply.Options, session.Option{Value: o.Value, Label: o.Label})
		}
		if t := in.Result; t != nil {
			r := &connections.Result{Columns: t.Columns, Rows: make([][]any, len(t.Rows)), Truncated: t.Truncated}
			for i, row := range t.Rows {
				r.Rows[i] = row.Values
			}
			s.LastInput.Reply.Result = r
		}
	}
	for _, t := range d.Turns {
		s.Turns = append(s.Turns, session.Turn{Role: t.Role, Text: t.Text, Time: t.Time.UTC()})
	}
	return s
}

func scopeFilter(scope session.Scope, id string) bson.D {
	return bson.D{{Key: "_id", Value: id}, {Key: "tenant_id", Value: scope.TenantID}, {Key: "project_id", Value: scope.ProjectID}}
}

// Create inserts s (version 0).
func (st *Store) Create(ctx context.Context, s *session.Session) error {
	s.Version = 0
	if _, err := st.coll.InsertOne(ctx, toDoc(s)); err != nil {
		return fmt.Errorf("mongostore: create session: %w", mongox.Translate(err))
	}
	return nil
}

// Get returns the session id of scope, or session.ErrNotFound.
func (st *Store) Get(ctx context.Context, scope session.Scope, id string) (*session.Session, error) {
	var d doc
	err := mongox.FindByID(ctx, st.coll, id, bson.D{{Key: "tenant_id", Value: scope.TenantID}, {Key: "project_id", Value: scope.ProjectID}}, &d)
	switch {
	case errors.Is(err, mongox.ErrNotFound):
		return nil, session.ErrNotFound
	case err != nil:
		return nil, fmt.Errorf("mongostore: get session: %w", err)
	}
	return fromDoc(d), nil
}

// Update writes s if the stored version is s.Version, then increments
// s.Version. session.ErrConflict if another write came first,
// session.ErrNotFound if the session is gone.
func (st *Store) Update(ctx context.Context, s *session.Session) error {
	d := toDoc(s)
	err := mongox.UpdateVersioned(ctx, st.coll, scopeFilter(s.Scope, s.ID), s.Version, bson.M{"$set": bson.M{
		"job_kind": d.JobKind, "stage": d.Stage, "params": d.Params, "pending_sql": d.PendingSQL,
		"execution": d.Execution, "turns": d.Turns, "updated": d.Updated, "schema_version": schemaVersion,
		"schema_tables_shown": d.SchemaShown, "schema_note": d.SchemaNote,
		"last_input": d.LastInput, "earlier_inputs": d.EarlierInputs,
	}})
	switch {
	case errors.Is(err, mongox.ErrConflict):
		return session.ErrConflict
	case errors.Is(err, mongox.ErrNotFound):
		return session.ErrNotFound
	case err != nil:
		return fmt.Errorf("mongostore: update session: %w", err)
	}
	s.Version++
	return nil
}

// ClaimExecution inserts the claim of s.Execution, keyed by its id, with
// what runs; session.ErrExecuting when the id was claimed before.
func (st *Store) ClaimExecution(ctx context.Context, s *session.Session) error {
	e := s.Execution
	if e == nil {
		return errors.New("mongostore: claim execution: the session has none")
	}
	sql, table := s.PendingSQL, s.Params["table_name"]
	switch e.From {
	case session.StageConfirmWrite:
		sql = s.Params["executed_sql"]
	case session.StageConfirmEmail:
		sql = s.Params["email_sql"]
	case session.StageExecuteCompareSQL:
		sql, table = s.Params["compare_first_sql"]+";\n"+s.Params["compare_second_sql"], s.Params["compare_table"]
	}
	rec := bson.D{
		{Key: "_id", Value: e.ID},
		{Key: "tenant_id", Value: s.Scope.TenantID},
		{Key: "project_id", Value: s.Scope.ProjectID},
		{Key: "session_id", Value: s.ID},
		{Key: "connection", Value: s.Params["connection"]},
		{Key: "from", Value: string(e.From)},
		{Key: "sql", Value: sql},
		{Key: "table", Value: table},
		{Key: "started", Value: e.Started.UTC()},
		{Key: "deadline", Value: e.Deadline.UTC()},
	}
	if !e.Until.IsZero() {
		rec = append(rec, bson.E{Key: "until", Value: e.Until.UTC()})
	}
	_, err := st.executions.InsertOne(ctx, rec)
	err = mongox.Translate(err)
	switch {
	case errors.Is(err, mongox.ErrDuplicate):
		return session.ErrExecuting
	case err != nil:
		return fmt.Errorf("mongostore: claim execution %s: %w", e.ID, err)
	}
	return nil
}

// RenewExecution implements session.Store: one update by _id, which only
// the execution's executor makes.
func (st *Store) RenewExecution(ctx context.Context, id string, until time.Time) error {
	_, err := st.executions.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "until", Value: until.UTC()}}}})
	if err != nil {
		return fmt.Errorf("mongostore: renew execution %s: %w", id, mongox.Translate(err))
	}
	return nil
}

// ExecutionUntil implements session.Store: one read by _id.
func (st *Store) ExecutionUntil(ctx context.Context, id string) (time.Time, bool, error) {
	var rec struct {
		Until time.Time `bson:"until"`
	}
	err := st.executions.FindOne(ctx, bson.D{{Key: "_id", Value: id}},
		options.FindOne().SetProjection(bson.D{{Key: "until", Value: 1}})).Decode(&rec)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, fmt.Errorf("mongostore: read execution %s: %w", id, mongox.Translate(err))
	}
	return rec.Until.UTC(), true, nil
}
