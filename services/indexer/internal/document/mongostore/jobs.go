package mongostore

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/events"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
)

// jobRecord is an extraction job as stored.
type jobRecord struct {
	ID          string               `bson:"_id"`
	Tenant      string               `bson:"tenant"`
	Project     string               `bson:"project"`
	DocumentID  string               `bson:"document_id"`
	ContentHash string               `bson:"content_hash"`
	Reason      string               `bson:"reason"`
	Status      int32                `bson:"status"`
	Runs        []runRecord          `bson:"runs"`
	Attempts    int                  `bson:"attempts"`
	Error       string               `bson:"error"`
	CreateTime  time.Time            `bson:"create_time"`
	StartTime   time.Time            `bson:"start_time"`
	EndTime     time.Time            `bson:"end_time"`
	Outbox      []events.OutboxEntry `bson:"outbox,omitempty"`
}

type runRecord struct {
	Extractor     string `bson:"extractor"`
	SchemaVersion int    `bson:"schema_version"`
	Status        int32  `bson:"status"`
	ExtractCount  int    `bson:"extract_count"`
	Error         string `bson:"error"`
	DurationUS    int64  `bson:"duration_us"`
}

func toRunRecords(rs []document.Run) []runRecord {
	out := make([]runRecord, len(rs))
	for i, r := range rs {
		out[i] = runRecord{Extractor: r.Extractor, SchemaVersion: r.SchemaVersion, Status: int32(r.Status),
			ExtractCount: r.ExtractCount, Error: r.Error, DurationUS: r.Duration.Microseconds()}
	}
	return out
}

func (r *jobRecord) toJob() *document.Job {
	j := &document.Job{ID: r.ID, Scope: document.Scope{Tenant: r.Tenant, Project: r.Project}, DocumentID: r.DocumentID,
		ContentHash: r.ContentHash, Reason: r.Reason, Status: indexerv1.ExtractionJobStatus(r.Status), Attempts: r.Attempts,
		Error: r.Error, CreateTime: r.CreateTime, StartTime: r.StartTime, EndTime: r.EndTime}
	for _, rr := range r.Runs {
		j.Runs = append(j.Runs, document.Run{Extractor: rr.Extractor, SchemaVersion: rr.SchemaVersion,
			Status: indexerv1.ExtractorRunStatus(rr.Status), ExtractCount: rr.ExtractCount, Error: rr.Error,
			Duration: time.Duration(rr.DurationUS) * time.Microsecond})
	}
	return j
}

// CreateJob stores a new job with its outbox entries (its "queued" event
// and its work item: the job and the message that runs it are one write).
func (s *Store) CreateJob(ctx context.Context, j *document.Job, outbox ...events.OutboxEntry) error {
	r := jobRecord{ID: j.ID, Tenant: j.Scope.Tenant, Project: j.Scope.Project, DocumentID: j.DocumentID, ContentHash: j.ContentHash,
		Reason: j.Reason, Status: int32(j.Status), Runs: toRunRecords(j.Runs), Attempts: j.Attempts, Error: j.Error,
		CreateTime: j.CreateTime, StartTime: j.StartTime, EndTime: j.EndTime, Outbox: outbox}
	// The lock orders this write's entries before those of the job's next
	// write, which may follow at once on another goroutine.
	defer mongox.LockDocument(s.jobs, j.ID)()
	if _, err := s.jobs.InsertOne(ctx, r); err != nil {
		s.out.unsure(s.jobs, j.ID, outbox, err)
		return translate(err)
	}
	s.out.wrote(s.jobs, j.ID, outbox)
	return nil
}

// GetJob returns a job of the scope.
func (s *Store) GetJob(ctx context.Context, sc document.Scope, id string) (*document.Job, error) {
	var r jobRecord
	if err := mongox.FindByID(ctx, s.jobs, id, scopeFilter(sc), &r, options.FindOne().SetProjection(bson.D{{Key: "outbox", Value: 0}})); err != nil {
		return nil, translate(err)
	}
	return r.toJob(), nil
}

// UpdateJob writes a job's state with its events if its stored status is
// still from, the status its writer read: a job that another worker moved
// on meanwhile, to its end in particular, is not written. It reports
// whether it wrote.
func (s *Store) UpdateJob(ctx context.Context, j *document.Job, from indexerv1.ExtractionJobStatus, outbox ...events.OutboxEntry) (bool, error) {
	update := bson.M{"$set": bson.M{
		"status": int32(j.Status), "runs": toRunRecords(j.Runs), "attempts": j.Attempts, "error": j.Error,
		"start_time": j.StartTime, "end_time": j.EndTime,
	}}
	if len(outbox) > 0 {
		update["$push"] = events.OutboxPush(outbox...)
	}
	return s.updateJob(ctx, j, from, update, outbox)
}

// RequeueJob appends outbox entries (a work item again) to a job whose
// status is still j.Status, and reports whether it did.
func (s *Store) RequeueJob(ctx context.Context, j *document.Job, outbox ...events.OutboxEntry) (bool, error) {
	return s.updateJob(ctx, j, j.Status, bson.M{"$push": events.OutboxPush(outbox...)}, outbox)
}

func (s *Store) updateJob(ctx context.Context, j *document.Job, from indexerv1.ExtractionJobStatus, update bson.M, outbox []events.OutboxEntry) (bool, error) {
	cond := scopeFilter(j.Scope, bson.E{Key: "status", Value: int32(from)})
	ok, err := mongox.UpdateIf(ctx, s.jobs, j.ID, cond, update, func() { s.out.wrote(s.jobs, j.ID, outbox) })
	s.out.unsure(s.jobs, j.ID, outbox, err)
	return ok, translate(err)
}

// PendingJobs returns jobs queued or running since before cutoff: their
// work message may have been lost, so reconciliation queues them again.
// It scans.
func (s *Store) PendingJobs(ctx context.Context, cutoff time.Time, limit int) ([]*document.Job, error) {
	f := bson.D{
		{Key: "status", Value: bson.M{"$in": bson.A{int32(indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_QUEUED), int32(indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_RUNNING)}}},
		{Key: "create_time", Value: bson.M{"$lt": cutoff}},
	}
	var recs []jobRecord
	if err := mongox.FindAll(ctx, s.jobs, f, &recs, options.Find().SetSort(bson.D{{Key: "create_time", Value: 1}}).SetLimit(int64(limit)).SetProjection(bson.D{{Key: "outbox", Value: 0}})); err != nil {
		return nil, translate(err)
	}
	out := make([]*document.Job, len(recs))
	for i := range recs {
		out[i] = recs[i].toJob()
	}
	return out, nil
}
