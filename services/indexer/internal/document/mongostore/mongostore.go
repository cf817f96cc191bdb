// Package mongostore keeps documents, chunks and extraction jobs in
// MongoDB (or FerretDB). Every state change is a single-document write;
// events that go with a change ride in the same write, in the record's
// outbox (see libs/events), so state and events never diverge.
//
// FerretDB v1 does not isolate concurrent updates of one document: two
// updates racing on a record can lose one of them (measured: 400
// concurrent $inc/$push updates of one document kept 229). So a Store
// serialises its writes, and relays its outboxes itself (RunOutbox) under
// the same lock, since an outbox sweep's $pullAll is a write too. That is
// enough for one indexer process per database, which is how the indexer
// runs (its search indexes are local to the process anyway).
package mongostore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/events"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
)

// Collection names.
const (
	DocumentsCollection = "indexer_documents"
	ChunksCollection    = "indexer_chunks"
	JobsCollection      = "indexer_extraction_jobs"
)

// Store is the document store. It is safe for concurrent use.
type Store struct {
	docs, chunks, jobs *mongo.Collection

	mu   sync.Mutex    // serialises writes and outbox sweeps (see the package comment)
	wake chan struct{} // capacity 1: an outbox has entries to relay
}

// New returns a store on db.
func New(db *mongo.Database) *Store {
	return &Store{docs: db.Collection(DocumentsCollection), chunks: db.Collection(ChunksCollection), jobs: db.Collection(JobsCollection),
		wake: make(chan struct{}, 1)}
}

// lock takes the write lock; the returned func releases it.
func (s *Store) lock() func() {
	s.mu.Lock()
	return s.mu.Unlock
}

// notify asks RunOutbox to sweep soon.
func (s *Store) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// RunOutbox publishes the outbox entries of documents and jobs on bus
// until ctx is done: at once (whatever an earlier process left), whenever
// a write adds entries, and every events.RelayPollInterval. Sweeps hold
// the write lock. Errors are logged and retried on the next sweep.
func (s *Store) RunOutbox(ctx context.Context, bus *events.Bus, log *slog.Logger) {
	relays := []*events.Relay{events.NewRelay(bus, s.docs, log), events.NewRelay(bus, s.jobs, log)}
	t := time.NewTicker(events.RelayPollInterval)
	defer t.Stop()
	for {
		if err := s.sweep(ctx, relays); err != nil && ctx.Err() == nil && log != nil {
			log.Warn("outbox sweep incomplete; will retry", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-t.C:
		}
	}
}

// FlushOutbox publishes every pending outbox entry now (at shutdown).
func (s *Store) FlushOutbox(ctx context.Context, bus *events.Bus) error {
	return s.sweep(ctx, []*events.Relay{events.NewRelay(bus, s.docs, nil), events.NewRelay(bus, s.jobs, nil)})
}

func (s *Store) sweep(ctx context.Context, relays []*events.Relay) error {
	defer s.lock()()
	var errs []error
	for _, r := range relays {
		if _, err := r.Sweep(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Documents returns the documents collection, whose outbox a relay serves.
func (s *Store) Documents() *mongo.Collection { return s.docs }

// Jobs returns the jobs collection, whose outbox a relay serves.
func (s *Store) Jobs() *mongo.Collection { return s.jobs }

// EnsureIndexes creates the indexes the queries below use.
func (s *Store) EnsureIndexes(ctx context.Context) error {
	scope := func(more ...bson.E) bson.D {
		return append(bson.D{{Key: "tenant", Value: 1}, {Key: "project", Value: 1}}, more...)
	}
	if err := mongox.EnsureIndexes(ctx, s.docs,
		mongox.Index{Keys: scope(bson.E{Key: "_id", Value: 1})},
		mongox.Index{Keys: scope(bson.E{Key: "source_type", Value: 1}, bson.E{Key: "_id", Value: 1})},
		mongox.Index{Keys: scope(bson.E{Key: "extract_terms", Value: 1})},
		mongox.Index{Keys: bson.D{{Key: "indexed", Value: 1}}},
		mongox.Index{Keys: bson.D{{Key: "deleting", Value: 1}}},
	); err != nil {
		return err
	}
	if err := mongox.EnsureIndexes(ctx, s.chunks,
		mongox.Index{Keys: scope(bson.E{Key: "doc_id", Value: 1}, bson.E{Key: "seq", Value: 1})},
		mongox.Index{Keys: scope(bson.E{Key: "_id", Value: 1})},
	); err != nil {
		return err
	}
	return mongox.EnsureIndexes(ctx, s.jobs,
		mongox.Index{Keys: scope(bson.E{Key: "document_id", Value: 1})},
		mongox.Index{Keys: bson.D{{Key: "status", Value: 1}, {Key: "create_time", Value: 1}}},
	)
}

func scopeFilter(sc document.Scope, more ...bson.E) bson.D {
	return append(bson.D{{Key: "tenant", Value: sc.Tenant}, {Key: "project", Value: sc.Project}}, more...)
}

// translate maps driver errors to the domain's.
func translate(err error) error {
	err = mongox.Translate(err)
	switch {
	case errors.Is(err, mongox.ErrNotFound):
		return fmt.Errorf("%w: %w", document.ErrNotFound, err)
	case errors.Is(err, mongox.ErrDuplicate), errors.Is(err, mongox.ErrConflict):
		return fmt.Errorf("%w: %w", document.ErrConflict, err)
	}
	return err
}

// docRecord is a document as stored.
type docRecord struct {
	ID                string               `bson:"_id"`
	Tenant            string               `bson:"tenant"`
	Project           string               `bson:"project"`
	SourceType        int32                `bson:"source_type"`
	SourceURL         string               `bson:"source_url"`
	Title             string               `bson:"title"`
	RawContent        string               `bson:"raw_content,omitempty"`
	ContentHash       string               `bson:"content_hash"`
	ContentType       string               `bson:"content_type"`
	ContentTypeReason string               `bson:"content_type_reason"`
	VisionSummary     string               `bson:"vision_summary,omitempty"`
	Extracts          []extractRecord      `bson:"extracts"`
	ExtractTerms      []string             `bson:"extract_terms"`
	ExtractorVersions map[string]int       `bson:"extractor_versions"`
	ChunkCount        int                  `bson:"chunk_count"`
	Routing           int32                `bson:"routing"`
	RoutingReason     string               `bson:"routing_reason"`
	ExtractionJobID   string               `bson:"extraction_job_id"`
	ExtractionStatus  int32                `bson:"extraction_status"`
	Indexed           bool                 `bson:"indexed"`
	Deleting          bool                 `bson:"deleting"`
	PipelineErrors    []string             `bson:"pipeline_errors,omitempty"`
	CreateTime        time.Time            `bson:"create_time"`
	UpdateTime        time.Time            `bson:"update_time"`
	Version           int64                `bson:"version"`
	Outbox            []events.OutboxEntry `bson:"outbox,omitempty"`
}

// extractRecord keeps the data as JSON text: it round-trips exactly
// (numbers stay float64, nesting stays maps and slices), while queries go
// through extract_terms.
type extractRecord struct {
	Type          string  `bson:"type"`
	SchemaVersion int     `bson:"schema_version"`
	DataJSON      string  `bson:"data_json"`
	Confidence    float64 `bson:"confidence"`
	SpanStart     int     `bson:"span_start"`
	SpanEnd       int     `bson:"span_end"`
	Extractor     string  `bson:"extractor"`
}

func toExtractRecords(exs []extract.Extract) ([]extractRecord, error) {
	out := make([]extractRecord, len(exs))
	for i, e := range exs {
		b, err := json.Marshal(e.Data)
		if err != nil {
			return nil, fmt.Errorf("mongostore: extract %d data: %w", i, err)
		}
		out[i] = extractRecord{Type: e.Type, SchemaVersion: e.SchemaVersion, DataJSON: string(b), Confidence: e.Confidence,
			SpanStart: e.SpanStart, SpanEnd: e.SpanEnd, Extractor: e.Extractor}
	}
	return out, nil
}

func fromExtractRecords(rs []extractRecord) ([]extract.Extract, error) {
	out := make([]extract.Extract, len(rs))
	for i, r := range rs {
		var data map[string]any
		if err := json.Unmarshal([]byte(r.DataJSON), &data); err != nil {
			return nil, fmt.Errorf("mongostore: extract %d data: %w", i, err)
		}
		out[i] = extract.Extract{Type: r.Type, SchemaVersion: r.SchemaVersion, Data: data, Confidence: r.Confidence,
			SpanStart: r.SpanStart, SpanEnd: r.SpanEnd, Extractor: r.Extractor}
	}
	return out, nil
}

func (r *docRecord) toDocument() (*document.Document, error) {
	exs, err := fromExtractRecords(r.Extracts)
	if err != nil {
		return nil, err
	}
	return &document.Document{
		ID: r.ID, Scope: document.Scope{Tenant: r.Tenant, Project: r.Project},
		SourceType: indexerv1.SourceType(r.SourceType), SourceURL: r.SourceURL, Title: r.Title,
		RawContent: r.RawContent, ContentHash: r.ContentHash, ContentType: r.ContentType, ContentTypeReason: r.ContentTypeReason,
		VisionSummary: r.VisionSummary, Extracts: exs, ExtractorVersions: r.ExtractorVersions, ChunkCount: r.ChunkCount,
		Routing: indexerv1.Routing(r.Routing), RoutingReason: r.RoutingReason,
		ExtractionJobID: r.ExtractionJobID, ExtractionStatus: indexerv1.ExtractionJobStatus(r.ExtractionStatus),
		Indexed: r.Indexed, Deleting: r.Deleting, PipelineErrors: r.PipelineErrors,
		CreateTime: r.CreateTime, UpdateTime: r.UpdateTime, Version: r.Version,
	}, nil
}

// withoutRaw is the projection of listings.
var withoutRaw = bson.D{{Key: "raw_content", Value: 0}, {Key: "outbox", Value: 0}}

// GetDocument returns a document of the scope, raw content included;
// deleting documents are not found.
func (s *Store) GetDocument(ctx context.Context, sc document.Scope, id string) (*document.Document, error) {
	var r docRecord
	err := s.docs.FindOne(ctx, scopeFilter(sc, bson.E{Key: "_id", Value: id}), options.FindOne().SetProjection(bson.D{{Key: "outbox", Value: 0}})).Decode(&r)
	if err != nil {
		return nil, translate(err)
	}
	if r.Deleting {
		return nil, document.ErrNotFound
	}
	return r.toDocument()
}

// LoadDocument returns a document even if it is being deleted.
func (s *Store) LoadDocument(ctx context.Context, sc document.Scope, id string) (*document.Document, error) {
	var r docRecord
	if err := s.docs.FindOne(ctx, scopeFilter(sc, bson.E{Key: "_id", Value: id}), options.FindOne().SetProjection(bson.D{{Key: "outbox", Value: 0}})).Decode(&r); err != nil {
		return nil, translate(err)
	}
	return r.toDocument()
}

// SaveContent writes a new version of a document's content: raw content,
// hash, titles and types, chunk count, the queued extraction job; it
// clears the extracts, routing and the indexed flag, since they belong to
// the old content. d.Version must be the version read (0 for a new
// document); it returns document.ErrConflict if the record moved on, and
// sets d.Version to the new version.
func (s *Store) SaveContent(ctx context.Context, d *document.Document, now time.Time) error {
	defer s.lock()()
	set := bson.M{
		"source_type": int32(d.SourceType), "source_url": d.SourceURL, "title": d.Title,
		"raw_content": d.RawContent, "content_hash": d.ContentHash,
		"content_type": d.ContentType, "content_type_reason": d.ContentTypeReason, "vision_summary": d.VisionSummary,
		"extracts": bson.A{}, "extract_terms": bson.A{}, "extractor_versions": bson.M{},
		"chunk_count": d.ChunkCount, "routing": int32(indexerv1.Routing_ROUTING_UNSPECIFIED), "routing_reason": "",
		"extraction_job_id": d.ExtractionJobID, "extraction_status": int32(d.ExtractionStatus),
		"indexed": false, "deleting": false, "pipeline_errors": d.PipelineErrors, "update_time": now,
	}
	if d.Version == 0 {
		rec := bson.M{"_id": d.ID, "tenant": d.Scope.Tenant, "project": d.Scope.Project, "create_time": now, "version": int64(1)}
		for k, v := range set {
			rec[k] = v
		}
		if _, err := s.docs.InsertOne(ctx, rec); err != nil {
			return translate(err)
		}
		d.Version, d.CreateTime, d.UpdateTime = 1, now, now
		return nil
	}
	err := mongox.UpdateVersioned(ctx, s.docs, scopeFilter(d.Scope, bson.E{Key: "_id", Value: d.ID}), d.Version, bson.M{"$set": set})
	if err != nil {
		return translate(err)
	}
	d.Version++
	d.UpdateTime = now
	return nil
}

// MarkIndexed records that the chunks of content hash are in the indexes
// and the graph. It does nothing if the content changed meanwhile.
func (s *Store) MarkIndexed(ctx context.Context, sc document.Scope, id, hash string) error {
	defer s.lock()()
	_, err := s.docs.UpdateOne(ctx, scopeFilter(sc, bson.E{Key: "_id", Value: id}, bson.E{Key: "content_hash", Value: hash}),
		bson.M{"$set": bson.M{"indexed": true}, "$inc": bson.M{"version": int64(1)}})
	return translate(err)
}

// ExtractionResult is what an extraction job writes to its document.
type ExtractionResult struct {
	Extracts          []extract.Extract
	ExtractorVersions map[string]int
	Routing           indexerv1.Routing
	RoutingReason     string
	Status            indexerv1.ExtractionJobStatus
	JobID             string
}

// CompleteExtraction stores a job's extracts, routing and status on the
// document, with the events in its outbox, if the document still has
// content hash and is not being deleted (and the job is still its latest).
// It reports whether it did.
func (s *Store) CompleteExtraction(ctx context.Context, sc document.Scope, id, hash string, r ExtractionResult, now time.Time, outbox ...events.OutboxEntry) (bool, error) {
	defer s.lock()()
	recs, err := toExtractRecords(r.Extracts)
	if err != nil {
		return false, err
	}
	versions := r.ExtractorVersions
	if versions == nil {
		versions = map[string]int{}
	}
	update := bson.M{
		"$set": bson.M{
			"extracts": recs, "extract_terms": document.ExtractTerms(r.Extracts), "extractor_versions": versions,
			"routing": int32(r.Routing), "routing_reason": r.RoutingReason, "extraction_status": int32(r.Status), "update_time": now,
		},
		"$inc": bson.M{"version": int64(1)},
	}
	if len(outbox) > 0 {
		update["$push"] = events.OutboxPush(outbox...)
	}
	res, err := s.docs.UpdateOne(ctx, scopeFilter(sc, bson.E{Key: "_id", Value: id}, bson.E{Key: "content_hash", Value: hash},
		bson.E{Key: "deleting", Value: false}, bson.E{Key: "extraction_job_id", Value: r.JobID}), update)
	if err != nil {
		return false, translate(err)
	}
	if len(outbox) > 0 {
		s.notify()
	}
	return res.MatchedCount == 1, nil
}

// QueueExtraction points the document at a new extraction job, if its
// content is still hash.
func (s *Store) QueueExtraction(ctx context.Context, sc document.Scope, id, hash, jobID string) (bool, error) {
	defer s.lock()()
	res, err := s.docs.UpdateOne(ctx, scopeFilter(sc, bson.E{Key: "_id", Value: id}, bson.E{Key: "content_hash", Value: hash}, bson.E{Key: "deleting", Value: false}),
		bson.M{"$set": bson.M{"extraction_job_id": jobID, "extraction_status": int32(indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_QUEUED)}, "$inc": bson.M{"version": int64(1)}})
	if err != nil {
		return false, translate(err)
	}
	return res.MatchedCount == 1, nil
}

// SetExtractionStatus records a job's progress on its document.
func (s *Store) SetExtractionStatus(ctx context.Context, sc document.Scope, id, jobID string, st indexerv1.ExtractionJobStatus) error {
	defer s.lock()()
	_, err := s.docs.UpdateOne(ctx, scopeFilter(sc, bson.E{Key: "_id", Value: id}, bson.E{Key: "extraction_job_id", Value: jobID}),
		bson.M{"$set": bson.M{"extraction_status": int32(st)}})
	return translate(err)
}

// MarkDeleting hides a document and flags it for removal from the indexes.
func (s *Store) MarkDeleting(ctx context.Context, sc document.Scope, id string) error {
	defer s.lock()()
	res, err := s.docs.UpdateOne(ctx, scopeFilter(sc, bson.E{Key: "_id", Value: id}),
		bson.M{"$set": bson.M{"deleting": true}, "$inc": bson.M{"version": int64(1)}})
	if err != nil {
		return translate(err)
	}
	if res.MatchedCount == 0 {
		return document.ErrNotFound
	}
	return nil
}

// DeleteDocument removes the document record.
func (s *Store) DeleteDocument(ctx context.Context, sc document.Scope, id string) error {
	defer s.lock()()
	_, err := s.docs.DeleteOne(ctx, scopeFilter(sc, bson.E{Key: "_id", Value: id}))
	return translate(err)
}

// ListDocuments returns up to limit documents of the scope after id
// afterID, in id order, without raw content; sourceType 0 means any.
func (s *Store) ListDocuments(ctx context.Context, sc document.Scope, sourceType indexerv1.SourceType, afterID string, limit int) ([]*document.Document, error) {
	f := scopeFilter(sc)
	if sourceType != indexerv1.SourceType_SOURCE_TYPE_UNSPECIFIED {
		f = append(f, bson.E{Key: "source_type", Value: int32(sourceType)})
	}
	f = append(f, bson.E{Key: "deleting", Value: false})
	return s.findDocs(ctx, f, afterID, limit)
}

// FindByTerms returns up to limit documents of the scope carrying every
// term, after afterID, in id order, without raw content.
func (s *Store) FindByTerms(ctx context.Context, sc document.Scope, terms []string, afterID string, limit int) ([]*document.Document, error) {
	f := scopeFilter(sc, bson.E{Key: "extract_terms", Value: bson.M{"$all": terms}}, bson.E{Key: "deleting", Value: false})
	return s.findDocs(ctx, f, afterID, limit)
}

func (s *Store) findDocs(ctx context.Context, f bson.D, afterID string, limit int) ([]*document.Document, error) {
	if afterID != "" {
		f = append(f, bson.E{Key: "_id", Value: bson.M{"$gt": afterID}})
	}
	return s.find(ctx, f, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(limit)).SetProjection(withoutRaw))
}

// find decodes the documents matching f.
func (s *Store) find(ctx context.Context, f bson.D, opts *options.FindOptionsBuilder) ([]*document.Document, error) {
	cur, err := s.docs.Find(ctx, f, opts)
	if err != nil {
		return nil, translate(err)
	}
	var recs []docRecord
	if err := cur.All(ctx, &recs); err != nil {
		return nil, translate(err)
	}
	out := make([]*document.Document, 0, len(recs))
	for i := range recs {
		d, err := recs[i].toDocument()
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// Unfinished returns documents whose last write did not complete: being
// deleted, or content not (yet) indexed. Startup reconciliation finishes
// them.
func (s *Store) Unfinished(ctx context.Context, limit int) ([]*document.Document, error) {
	f := bson.D{{Key: "$or", Value: bson.A{bson.M{"deleting": true}, bson.M{"indexed": false}}}}
	return s.find(ctx, f, options.Find().SetLimit(int64(limit)).SetProjection(bson.D{{Key: "outbox", Value: 0}}))
}

// HandledBelow returns up to limit documents (id order, after afterID)
// that extractor handled at a schema version below version.
func (s *Store) HandledBelow(ctx context.Context, extractor string, version int, afterID string, limit int) ([]*document.Document, error) {
	f := bson.D{{Key: "extractor_versions." + extractor, Value: bson.M{"$lt": version}}, {Key: "deleting", Value: false}}
	return s.findDocs(ctx, f, afterID, limit)
}

// Scopes lists every scope that has documents.
func (s *Store) Scopes(ctx context.Context) ([]document.Scope, error) {
	cur, err := s.docs.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$group", Value: bson.M{"_id": bson.M{"tenant": "$tenant", "project": "$project"}}}},
	})
	if err != nil {
		return nil, translate(err)
	}
	var rows []struct {
		ID struct {
			Tenant  string `bson:"tenant"`
			Project string `bson:"project"`
		} `bson:"_id"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return nil, translate(err)
	}
	out := make([]document.Scope, len(rows))
	for i, r := range rows {
		out[i] = document.Scope{Tenant: r.ID.Tenant, Project: r.ID.Project}
	}
	return out, nil
}

// chunkRecord is a chunk as stored; the vector is little-endian float32s.
type chunkRecord struct {
	ID          string `bson:"_id"`
	Tenant      string `bson:"tenant"`
	Project     string `bson:"project"`
	DocID       string `bson:"doc_id"`
	Seq         int    `bson:"seq"`
	Kind        string `bson:"kind"`
	Text        string `bson:"text"`
	Start       int    `bson:"start"`
	End         int    `bson:"end"`
	ContentHash string `bson:"content_hash"`
	Title       string `bson:"title"`
	SourceURL   string `bson:"source_url"`
	SourceType  int32  `bson:"source_type"`
	ContentType string `bson:"content_type"`
	Vector      []byte `bson:"vector,omitempty"`
	Embedder    string `bson:"embedder"`
}

func toChunkRecord(c document.Chunk) chunkRecord {
	v := make([]byte, 4*len(c.Vector))
	for i, f := range c.Vector {
		binary.LittleEndian.PutUint32(v[4*i:], math.Float32bits(f))
	}
	return chunkRecord{ID: c.ID, Tenant: c.Scope.Tenant, Project: c.Scope.Project, DocID: c.DocID, Seq: c.Seq, Kind: c.Kind,
		Text: c.Text, Start: c.Start, End: c.End, ContentHash: c.ContentHash, Title: c.Title, SourceURL: c.SourceURL,
		SourceType: int32(c.SourceType), ContentType: c.ContentType, Vector: v, Embedder: c.Embedder}
}

func (r chunkRecord) toChunk() document.Chunk {
	var v []float32
	if len(r.Vector) > 0 {
		v = make([]float32, len(r.Vector)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(r.Vector[4*i:]))
		}
	}
	return document.Chunk{ID: r.ID, Scope: document.Scope{Tenant: r.Tenant, Project: r.Project}, DocID: r.DocID, Seq: r.Seq, Kind: r.Kind,
		Text: r.Text, Start: r.Start, End: r.End, ContentHash: r.ContentHash, Title: r.Title, SourceURL: r.SourceURL,
		SourceType: indexerv1.SourceType(r.SourceType), ContentType: r.ContentType, Vector: v, Embedder: r.Embedder}
}

// ReplaceChunks makes chunks the document's only chunks: chunks of the
// document not among them are deleted, the others written (replacing any
// with the same id, so a retried ingest converges).
func (s *Store) ReplaceChunks(ctx context.Context, sc document.Scope, docID string, chunks []document.Chunk) error {
	defer s.lock()()
	ids := make(bson.A, len(chunks))
	for i, c := range chunks {
		ids[i] = c.ID
	}
	if _, err := s.chunks.DeleteMany(ctx, scopeFilter(sc, bson.E{Key: "doc_id", Value: docID}, bson.E{Key: "_id", Value: bson.M{"$nin": ids}})); err != nil {
		return translate(err)
	}
	return s.putChunks(ctx, chunks)
}

// PutChunks writes chunks, replacing chunks with the same ids.
func (s *Store) PutChunks(ctx context.Context, chunks []document.Chunk) error {
	defer s.lock()()
	return s.putChunks(ctx, chunks)
}

func (s *Store) putChunks(ctx context.Context, chunks []document.Chunk) error {
	if len(chunks) == 0 {
		return nil
	}
	models := make([]mongo.WriteModel, len(chunks))
	for i, c := range chunks {
		r := toChunkRecord(c)
		models[i] = mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: r.ID}}).SetReplacement(r).SetUpsert(true)
	}
	if _, err := s.chunks.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
		return translate(err)
	}
	return nil
}

// DocumentChunks returns a document's chunks in order.
func (s *Store) DocumentChunks(ctx context.Context, sc document.Scope, docID string) ([]document.Chunk, error) {
	cur, err := s.chunks.Find(ctx, scopeFilter(sc, bson.E{Key: "doc_id", Value: docID}), options.Find().SetSort(bson.D{{Key: "seq", Value: 1}}))
	if err != nil {
		return nil, translate(err)
	}
	return decodeChunks(ctx, cur)
}

// GetChunks returns the scope's chunks with these ids, without vectors,
// keyed by id; ids of other scopes or unknown ids are absent.
func (s *Store) GetChunks(ctx context.Context, sc document.Scope, ids []string) (map[string]document.Chunk, error) {
	if len(ids) == 0 {
		return map[string]document.Chunk{}, nil
	}
	cur, err := s.chunks.Find(ctx, scopeFilter(sc, bson.E{Key: "_id", Value: bson.M{"$in": ids}}),
		options.Find().SetProjection(bson.D{{Key: "vector", Value: 0}}))
	if err != nil {
		return nil, translate(err)
	}
	cs, err := decodeChunks(ctx, cur)
	if err != nil {
		return nil, err
	}
	out := make(map[string]document.Chunk, len(cs))
	for _, c := range cs {
		out[c.ID] = c
	}
	return out, nil
}

// EachChunk calls fn with the scope's chunks in id order, batch at a time.
func (s *Store) EachChunk(ctx context.Context, sc document.Scope, batch int, fn func([]document.Chunk) error) error {
	after := ""
	for {
		f := scopeFilter(sc)
		if after != "" {
			f = append(f, bson.E{Key: "_id", Value: bson.M{"$gt": after}})
		}
		cur, err := s.chunks.Find(ctx, f, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(batch)))
		if err != nil {
			return translate(err)
		}
		cs, err := decodeChunks(ctx, cur)
		if err != nil {
			return err
		}
		if len(cs) > 0 {
			if err := fn(cs); err != nil {
				return err
			}
			after = cs[len(cs)-1].ID
		}
		if len(cs) < batch {
			return nil
		}
	}
}

// CountChunks counts the scope's chunks.
func (s *Store) CountChunks(ctx context.Context, sc document.Scope) (int64, error) {
	n, err := s.chunks.CountDocuments(ctx, scopeFilter(sc))
	return n, translate(err)
}

// DeleteChunks removes every chunk of a document.
func (s *Store) DeleteChunks(ctx context.Context, sc document.Scope, docID string) error {
	defer s.lock()()
	_, err := s.chunks.DeleteMany(ctx, scopeFilter(sc, bson.E{Key: "doc_id", Value: docID}))
	return translate(err)
}

func decodeChunks(ctx context.Context, cur *mongo.Cursor) ([]document.Chunk, error) {
	var recs []chunkRecord
	if err := cur.All(ctx, &recs); err != nil {
		return nil, translate(err)
	}
	out := make([]document.Chunk, len(recs))
	for i, r := range recs {
		out[i] = r.toChunk()
	}
	return out, nil
}
