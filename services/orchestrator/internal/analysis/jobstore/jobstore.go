// Package jobstore stores analysis jobs in MongoDB (or FerretDB v1), one
// document per job, each write a single-document write that carries the
// job's outbox entries with it. It implements analysis.Store and
// translates driver errors to the analysis package's errors.
//
// # FerretDB v1
//
// FerretDB v1 (SQLite backend) pushes a filter down to SQLite only when it
// is exactly {_id: <string>}; any other filter — {_id, version},
// {_id, tenant_id}, {status: ...} — reads and decodes every document of
// the collection, so its cost grows with the history. Its secondary indexes
// serve no query either, while every write re-parses the document once per
// indexed field to maintain them. On FerretDB (detected with buildInfo) the
// store therefore keeps every read and write of the job lifecycle to
// {_id: id} filters:
//   - Get reads by _id and checks the scope in Go;
//   - Update checks the version with a read by _id and writes by _id,
//     both under the document lock (below), which is what makes the check
//     and the write atomic on FerretDB in the first place;
//   - Unfinished answers from an in-process index of the jobs that may be
//     unfinished (see openIndex), seeded by one scan when the store opens;
//   - the secondary indexes are not created (and dropped if an older
//     version created them).
//
// On MongoDB the store uses the atomic {_id, version} filter and the
// indexed queries.
package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

// Collection is the collection analysis jobs live in.
const Collection = "analysis_jobs"

// Store is the MongoDB implementation of analysis.Store. It is safe for
// concurrent use.
//
// FerretDB v1 applies an update as an unisolated read followed by a write of
// the whole document, so neither the version check of Update nor the
// outbox relay's removals would be atomic against other updates of the same
// document. Store therefore serialises its updates per document in this
// process with mongox.LockDocument, which the outbox relay takes too;
// on MongoDB the lock is merely redundant. Several processes writing one
// FerretDB are not protected (nor is the index of unfinished jobs kept
// for FerretDB complete then); the embedded FerretDB serves one process.
type Store struct {
	coll *mongo.Collection
	// ferret is true on FerretDB v1: see the package comment.
	ferret bool
	// open tracks possibly unfinished jobs; FerretDB only.
	open *openIndex
}

var _ analysis.Store = (*Store)(nil)

// indexes are the secondary indexes of the collection (MongoDB only).
var indexes = []mongox.Index{
	{Name: "list", Keys: bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "create_time", Value: -1}, {Key: "_id", Value: -1}}},
	{Name: "children", Keys: bson.D{{Key: "parent_id", Value: 1}, {Key: "seq", Value: 1}}},
	{Name: "unfinished", Keys: bson.D{{Key: "status", Value: 1}, {Key: "_id", Value: 1}}},
}

// New returns a store on db's analysis_jobs collection after ensuring its
// indexes. On FerretDB it drops them instead and seeds the index of
// unfinished jobs with one scan of the collection.
func New(ctx context.Context, db *mongo.Database) (*Store, error) {
	coll := db.Collection(Collection)
	ferret, err := isFerretDB(ctx, db)
	if err != nil {
		return nil, err
	}
	s := &Store{coll: coll, ferret: ferret}
	if !ferret {
		if err := mongox.EnsureIndexes(ctx, coll, indexes...); err != nil {
			return nil, err
		}
		return s, nil
	}
	if err := dropIndexes(ctx, coll); err != nil {
		return nil, err
	}
	s.open = newOpenIndex()
	if err := s.seedOpen(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// isFerretDB reports whether db is served by FerretDB, which adds
// ferretdbVersion to buildInfo.
func isFerretDB(ctx context.Context, db *mongo.Database) (bool, error) {
	var info bson.M
	if err := db.RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		return false, fmt.Errorf("jobstore: buildInfo: %w", err)
	}
	_, ok := info["ferretdbVersion"]
	return ok, nil
}

// dropIndexes drops the secondary indexes an earlier version created on
// FerretDB, where they cost every write and serve no query.
func dropIndexes(ctx context.Context, coll *mongo.Collection) error {
	specs, err := coll.Indexes().ListSpecifications(ctx)
	if err != nil {
		return fmt.Errorf("jobstore: list indexes: %w", err)
	}
	for _, spec := range specs {
		for _, ix := range indexes {
			if spec.Name == ix.Name {
				if err := coll.Indexes().DropOne(ctx, ix.Name); err != nil {
					return fmt.Errorf("jobstore: drop index %s: %w", ix.Name, err)
				}
			}
		}
	}
	return nil
}

// Collection returns the underlying collection, for the outbox relay.
func (s *Store) Collection() *mongo.Collection { return s.coll }

// Insert implements analysis.Store.
func (s *Store) Insert(ctx context.Context, j *analysis.Job, outbox ...events.OutboxEntry) error {
	doc, err := toDoc(j)
	if err != nil {
		return err
	}
	if len(outbox) > 0 {
		doc = append(doc, bson.E{Key: events.OutboxField, Value: outbox})
	}
	done := s.open.writing(j.ID)
	_, err = s.coll.InsertOne(ctx, doc)
	done(j, err == nil)
	return translate("insert "+j.ID, err)
}

// Update implements analysis.Store.
func (s *Store) Update(ctx context.Context, j *analysis.Job, version int64, outbox ...events.OutboxEntry) error {
	next := *j
	next.Version = version + 1
	doc, err := toDoc(&next)
	if err != nil {
		return err
	}
	set := make(bson.D, 0, len(doc))
	for _, e := range doc {
		if e.Key != "_id" {
			set = append(set, e)
		}
	}
	update := bson.M{"$set": set}
	if len(outbox) > 0 {
		update["$push"] = events.OutboxPush(outbox...)
	}
	if s.ferret {
		err = s.updateByID(ctx, &next, version, update)
	} else {
		err = s.updateVersioned(ctx, j.ID, version, update)
	}
	if err != nil {
		return err
	}
	j.Version = next.Version
	return nil
}

// updateVersioned applies update if the job is still at version, in one
// atomic write (MongoDB).
func (s *Store) updateVersioned(ctx context.Context, id string, version int64, update bson.M) error {
	unlock := mongox.LockDocument(s.coll, id)
	res, err := s.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "version", Value: version}}, update)
	unlock()
	if err != nil {
		return translate("update "+id, err)
	}
	if res.MatchedCount == 1 {
		return nil
	}
	n, err := s.coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return translate("update "+id, err)
	}
	if n == 0 {
		return fmt.Errorf("jobstore: update %s: %w", id, analysis.ErrNotFound)
	}
	return fmt.Errorf("jobstore: update %s at version %d: %w", id, version, analysis.ErrConflict)
}

// updateByID applies update if the job is still at version (FerretDB):
// the version is checked by a read and the write selects by _id alone, so
// both are pushed down to SQLite; the document lock, which every writer of
// the document in this process takes, makes the pair atomic.
func (s *Store) updateByID(ctx context.Context, next *analysis.Job, version int64, update bson.M) error {
	id := next.ID
	unlock := mongox.LockDocument(s.coll, id)
	defer unlock()
	var cur struct {
		Version int64 `bson:"version"`
	}
	err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, options.FindOne().SetProjection(bson.D{{Key: "version", Value: 1}})).Decode(&cur)
	if err != nil {
		return translate("update "+id, err)
	}
	if cur.Version != version {
		return fmt.Errorf("jobstore: update %s at version %d: %w", id, version, analysis.ErrConflict)
	}
	done := s.open.writing(id)
	res, err := s.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, update)
	if err == nil && res.MatchedCount != 1 {
		err = fmt.Errorf("jobstore: update %s: %w", id, analysis.ErrNotFound)
	}
	done(next, err == nil)
	if err != nil {
		return translate("update "+id, err)
	}
	return nil
}

// Get implements analysis.Store. It selects by _id alone and checks the
// scope in Go: FerretDB pushes nothing else down (see the package comment).
func (s *Store) Get(ctx context.Context, tenant, project, id string) (*analysis.Job, error) {
	j, err := s.getByID(ctx, id)
	if err != nil {
		return nil, err
	}
	if j.Tenant != tenant || j.Project != project {
		return nil, fmt.Errorf("jobstore: get %s: %w", id, analysis.ErrNotFound)
	}
	return j, nil
}

// getByID reads job id of any scope.
func (s *Store) getByID(ctx context.Context, id string) (*analysis.Job, error) {
	var j analysis.Job
	err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, options.FindOne().SetProjection(noOutbox)).Decode(&j)
	if err != nil {
		return nil, translate("get "+id, err)
	}
	return &j, nil
}

// List implements analysis.Store. The continuation key is
// "<create time in ms>|<id>" of the last job returned.
func (s *Store) List(ctx context.Context, q analysis.ListQuery) ([]*analysis.Job, string, error) {
	filter := bson.D{{Key: "tenant_id", Value: q.Tenant}, {Key: "project_id", Value: q.Project}}
	if q.Status != "" {
		filter = append(filter, bson.E{Key: "status", Value: q.Status})
	}
	if q.Type != "" {
		filter = append(filter, bson.E{Key: "type", Value: q.Type})
	}
	if q.ParentID != "" {
		filter = append(filter, bson.E{Key: "parent_id", Value: q.ParentID})
	}
	timeRange := bson.D{}
	if !q.From.IsZero() {
		timeRange = append(timeRange, bson.E{Key: "$gte", Value: q.From})
	}
	if !q.To.IsZero() {
		timeRange = append(timeRange, bson.E{Key: "$lt", Value: q.To})
	}
	if len(timeRange) > 0 {
		filter = append(filter, bson.E{Key: "create_time", Value: timeRange})
	}
	if q.After != "" {
		t, id, err := parseKey(q.After)
		if err != nil {
			return nil, "", err
		}
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "create_time", Value: bson.D{{Key: "$lt", Value: t}}}},
			bson.D{{Key: "create_time", Value: t}, {Key: "_id", Value: bson.D{{Key: "$lt", Value: id}}}},
		}})
	}
	limit := max(q.Limit, 1)
	opts := options.Find().SetSort(bson.D{{Key: "create_time", Value: -1}, {Key: "_id", Value: -1}}).
		SetLimit(int64(limit + 1)).SetProjection(noOutbox)
	jobs, err := s.find(ctx, "list", filter, opts)
	if err != nil {
		return nil, "", err
	}
	if len(jobs) <= limit {
		return jobs, "", nil
	}
	jobs = jobs[:limit]
	last := jobs[limit-1]
	return jobs, strconv.FormatInt(last.CreateTime.UnixMilli(), 10) + "|" + last.ID, nil
}

// Unfinished implements analysis.Store. On FerretDB it reads the candidates
// of the index of unfinished jobs by _id instead of scanning.
func (s *Store) Unfinished(ctx context.Context, updatedBefore time.Time, afterID string, limit int) ([]*analysis.Job, error) {
	limit = max(limit, 1)
	if s.ferret {
		return s.unfinishedOpen(ctx, updatedBefore, afterID, limit)
	}
	filter := bson.D{
		unfinishedStatus,
		{Key: "update_time", Value: bson.D{{Key: "$lt", Value: updatedBefore}}},
	}
	if afterID != "" {
		filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$gt", Value: afterID}}})
	}
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(limit)).SetProjection(noOutbox)
	return s.find(ctx, "unfinished", filter, opts)
}

// unfinishedStatus selects jobs whose status is not terminal.
var unfinishedStatus = bson.E{Key: "status", Value: bson.D{{Key: "$in", Value: bson.A{analysis.StatusPending, analysis.StatusRunning, analysis.StatusWaiting}}}}

// unfinishedOpen is Unfinished from the index of unfinished jobs: it reads
// by _id each candidate that may match, drops those found finished or gone
// from the index, and returns the others that match, in id order.
func (s *Store) unfinishedOpen(ctx context.Context, updatedBefore time.Time, afterID string, limit int) ([]*analysis.Job, error) {
	var out []*analysis.Job
	for _, c := range s.open.candidates(updatedBefore, afterID) {
		j, err := s.getByID(ctx, c.id)
		if errors.Is(err, analysis.ErrNotFound) {
			s.open.observed(c, nil)
			continue
		}
		if err != nil {
			return nil, err
		}
		s.open.observed(c, j)
		if j.Status.Terminal() || !j.UpdateTime.Before(updatedBefore) {
			continue
		}
		out = append(out, j)
		if len(out) == limit {
			break
		}
	}
	return out, nil
}

// seedOpen fills the index of unfinished jobs with one scan.
func (s *Store) seedOpen(ctx context.Context) error {
	opts := options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "status", Value: 1}, {Key: "update_time", Value: 1}})
	cur, err := s.coll.Find(ctx, bson.D{unfinishedStatus}, opts)
	if err != nil {
		return translate("seed unfinished", err)
	}
	var jobs []*analysis.Job
	if err := cur.All(ctx, &jobs); err != nil {
		return translate("seed unfinished", err)
	}
	for _, j := range jobs {
		s.open.seed(j.ID, j.UpdateTime)
	}
	return nil
}

// noOutbox keeps pending events out of reads.
var noOutbox = bson.D{{Key: events.OutboxField, Value: 0}}

func (s *Store) find(ctx context.Context, op string, filter bson.D, opts *options.FindOptionsBuilder) ([]*analysis.Job, error) {
	cur, err := s.coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, translate(op, err)
	}
	var jobs []*analysis.Job
	if err := cur.All(ctx, &jobs); err != nil {
		return nil, translate(op, err)
	}
	return jobs, nil
}

// toDoc encodes a job as an ordered document.
func toDoc(j *analysis.Job) (bson.D, error) {
	raw, err := bson.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("jobstore: encode %s: %w", j.ID, err)
	}
	var doc bson.D
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("jobstore: encode %s: %w", j.ID, err)
	}
	return doc, nil
}

// parseKey splits a continuation key.
func parseKey(key string) (time.Time, string, error) {
	ms, id, ok := strings.Cut(key, "|")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || id == "" {
		return time.Time{}, "", fmt.Errorf("jobstore: malformed continuation key: %w", &analysis.FieldError{Field: "page_token", Reason: "malformed"})
	}
	return time.UnixMilli(n).UTC(), id, nil
}

// translate maps driver errors to the analysis errors.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	err = mongox.Translate(err)
	switch {
	case errors.Is(err, mongox.ErrNotFound):
		return fmt.Errorf("jobstore: %s: %w", op, analysis.ErrNotFound)
	case errors.Is(err, mongox.ErrDuplicate):
		return fmt.Errorf("jobstore: %s: %w", op, analysis.ErrExists)
	}
	return fmt.Errorf("jobstore: %s: %w", op, err)
}
