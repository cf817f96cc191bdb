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
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
)

// JobsCollection holds one document per job that ran, _id the execution
// id. Listings are by scope, newest first, or by scope and session: the
// two indexes made in New serve them.
const JobsCollection = "sql_jobs"

var jobIndexes = []mongox.Index{
	{Keys: bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "started", Value: -1}, {Key: "_id", Value: -1}}, Name: "scope_started"},
	{Keys: bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "session_id", Value: 1}, {Key: "started", Value: -1}, {Key: "_id", Value: -1}}, Name: "scope_session_started"},
}

type jobDoc struct {
	ID          string            `bson:"_id"`
	TenantID    string            `bson:"tenant_id"`
	ProjectID   string            `bson:"project_id"`
	SessionID   string            `bson:"session_id"`
	Kind        string            `bson:"kind"`
	Name        string            `bson:"name"`
	Connection  string            `bson:"connection"`
	SQL         string            `bson:"sql"`
	SecondSQL   string            `bson:"second_sql"`
	Params      map[string]string `bson:"params"`
	RowCount    int64             `bson:"row_count"`
	DurationMS  int64             `bson:"duration_ms"`
	Destination string            `bson:"destination"`
	Started     time.Time         `bson:"started"`
}

func fromJobDoc(d jobDoc) session.Job {
	return session.Job{
		ID: d.ID, SessionID: d.SessionID, Scope: session.Scope{TenantID: d.TenantID, ProjectID: d.ProjectID},
		Kind: d.Kind, Name: d.Name, Connection: d.Connection, SQL: d.SQL, SecondSQL: d.SecondSQL, Params: d.Params,
		RowCount: d.RowCount, Duration: time.Duration(d.DurationMS) * time.Millisecond, Destination: d.Destination,
		Started: d.Started.UTC(),
	}
}

// AddJob inserts j; a second insert of its id (the same execution
// recorded again) changes nothing.
func (st *Store) AddJob(ctx context.Context, j *session.Job) error {
	_, err := st.jobs.InsertOne(ctx, jobDoc{
		ID: j.ID, TenantID: j.Scope.TenantID, ProjectID: j.Scope.ProjectID, SessionID: j.SessionID,
		Kind: j.Kind, Name: j.Name, Connection: j.Connection, SQL: j.SQL, SecondSQL: j.SecondSQL, Params: j.Params,
		RowCount: j.RowCount, DurationMS: j.Duration.Milliseconds(), Destination: j.Destination, Started: j.Started.UTC(),
	})
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("mongostore: add job: %w", mongox.Translate(err))
	}
	return nil
}

// jobOrder is the jobs' listing order: newest first.
var jobOrder = mongox.Keyset{Field: "started", Descending: true}

// ListJobs returns the jobs of scope that q selects, newest first (by
// start, then by id), at most q.Limit.
func (st *Store) ListJobs(ctx context.Context, scope session.Scope, q session.JobQuery) ([]session.Job, error) {
	filter := bson.D{{Key: "tenant_id", Value: scope.TenantID}, {Key: "project_id", Value: scope.ProjectID}}
	if q.SessionID != "" {
		filter = append(filter, bson.E{Key: "session_id", Value: q.SessionID})
	}
	if a := q.After; a != nil {
		// Start times are kept to the millisecond, as BSON dates are.
		started := a.Time.UTC().Truncate(time.Millisecond)
		filter = append(filter, jobOrder.After(started, a.ID))
	}
	var docs []jobDoc
	if err := mongox.FindAll(ctx, st.jobs, filter, &docs, options.Find().SetSort(jobOrder.Sort()).SetLimit(int64(q.Limit))); err != nil {
		return nil, fmt.Errorf("mongostore: list jobs: %w", mongox.Translate(err))
	}
	out := make([]session.Job, 0, len(docs))
	for _, d := range docs {
		out = append(out, fromJobDoc(d))
	}
	return out, nil
}

// GetJob returns job id of scope, or session.ErrJobNotFound.
func (st *Store) GetJob(ctx context.Context, scope session.Scope, id string) (*session.Job, error) {
	var d jobDoc
	err := mongox.FindByID(ctx, st.jobs, id, bson.D{{Key: "tenant_id", Value: scope.TenantID}, {Key: "project_id", Value: scope.ProjectID}}, &d)
	switch {
	case errors.Is(err, mongox.ErrNotFound):
		return nil, session.ErrJobNotFound
	case err != nil:
		return nil, fmt.Errorf("mongostore: get job: %w", err)
	}
	j := fromJobDoc(d)
	return &j, nil
}
