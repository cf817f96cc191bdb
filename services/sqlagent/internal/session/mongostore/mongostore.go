// Package mongostore keeps SQL agent sessions in MongoDB: one document per
// session in collection "sql_sessions", filtered by tenant and project on
// every read and write, updated with optimistic concurrency on `version`.
package mongostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
)

// Collection is the collection sessions live in.
const Collection = "sql_sessions"

// schemaVersion is the document layout version.
const schemaVersion = 1

// Store implements session.Store on MongoDB.
type Store struct {
	coll *mongo.Collection
}

var _ session.Store = (*Store)(nil)

// New returns a Store on db and ensures its indexes.
func New(ctx context.Context, db *mongo.Database) (*Store, error) {
	coll := db.Collection(Collection)
	if err := mongox.EnsureIndexes(ctx, coll, mongox.Index{
		Keys: bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "updated", Value: -1}},
		Name: "scope_updated",
	}); err != nil {
		return nil, err
	}
	return &Store{coll: coll}, nil
}

type turnDoc struct {
	Role string    `bson:"role"`
	Text string    `bson:"text"`
	Time time.Time `bson:"time"`
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
	Turns         []turnDoc         `bson:"turns"`
	Created       time.Time         `bson:"created"`
	Updated       time.Time         `bson:"updated"`
}

func toDoc(s *session.Session) doc {
	d := doc{
		ID: s.ID, TenantID: s.Scope.TenantID, ProjectID: s.Scope.ProjectID, SchemaVersion: schemaVersion,
		Version: s.Version, JobKind: s.JobKind, Stage: string(s.Stage), Params: s.Params,
		PendingSQL: s.PendingSQL, Created: s.Created, Updated: s.Updated, Turns: []turnDoc{},
	}
	for _, t := range s.Turns {
		d.Turns = append(d.Turns, turnDoc{Role: t.Role, Text: t.Text, Time: t.Time})
	}
	return d
}

func fromDoc(d doc) *session.Session {
	s := &session.Session{
		ID: d.ID, Scope: session.Scope{TenantID: d.TenantID, ProjectID: d.ProjectID},
		JobKind: d.JobKind, Stage: session.Stage(d.Stage), Params: d.Params, PendingSQL: d.PendingSQL,
		Version: d.Version, Created: d.Created.UTC(), Updated: d.Updated.UTC(),
	}
	if s.Params == nil {
		s.Params = map[string]string{}
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
	err := mongox.Translate(st.coll.FindOne(ctx, scopeFilter(scope, id)).Decode(&d))
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
		"turns": d.Turns, "updated": d.Updated, "schema_version": schemaVersion,
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
