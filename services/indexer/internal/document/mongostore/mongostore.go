// Package mongostore keeps documents, chunks, extraction jobs and their
// claims in MongoDB (or FerretDB). Every state change is a single-document
// write; events that go with a change ride in the same write, in the
// record's outbox (see libs/events), so state and events never diverge.
//
// # Lookups by _id
//
// FerretDB v1 (SQLite) finds documents by an exact {_id: x} filter only
// (the embedded server indexes that lookup); any other filter makes it
// parse every document of the collection, and documents hold their raw
// content. So everything ingest, extraction, retrieval and delete do is a
// read, write or delete by _id:
//   - documents, jobs and claims are read by _id with the scope checked in
//     Go (mongox.FindByID), and updated with mongox.UpdateVersioned or
//     mongox.UpdateIf, which check their conditions in Go for a single
//     writer and in the filter otherwise;
//   - chunk ids derive from the document, its content hash and a sequence
//     number (document.ChunkID), so the document record, which keeps its
//     current chunk set and the sets earlier content left to remove
//     (stale_chunks), names every chunk to write, read or delete; a search
//     reads its hits' chunks one FindOne each, concurrently;
//   - the record also keeps the entity keys the document may mention in the
//     graph (graph_mentions), so the graph store removes mentions by _id;
//   - a replica's search shard follows the record (see package intake):
//     IndexState reads the few fields that say what the shard must hold
//     (base_job names the extraction whose digest the base chunk carries),
//     ReadChunks the chunks with their vectors, each by _id.
//
// Still scanning, on purpose: ListDocuments, FindByTerms (paged listings),
// Unfinished, PendingJobs, HandledBelow and Scopes (start-up
// reconciliation), EachChunk and CountChunks (index rebuilds and their
// check), DocumentChunks (tests and tooling), and the outbox relays' sweeps
// at start and every SweepInterval (a safety net: each write names its
// document to the relay).
//
// # Writers
//
// With many writers (replicas on MongoDB, the default) every conditional
// write is one single-document update with its conditions in the filter,
// which MongoDB applies atomically, the relay reads what it relays
// (NotifyDocument), and claims rest on unique inserts. For a single writer
// (mongox.SingleWriter: agentmesh up on its embedded FerretDB) conditions
// are checked in Go under the document's lock (mongox.LockDocument), and
// the relay is handed the entries each write appended, in write order,
// under that lock (NotifyEntries). Writes of many records at once (a
// document's chunks) hold each record's lock (mongox.LockDocuments):
// FerretDB applies an update as an unisolated read and write, so two
// writers of one record in one process could otherwise lose one.
//
// A record's outbox is published before the record is removed
// (DeleteDocument calls FlushDocument): with many writers a relay reads
// what it publishes, and the chunk change a delete carries must reach
// the other replicas.
//
// What is assumed of MongoDB: a single-document update or delete is atomic
// with its filter, an upsert by _id that races another is retried by the
// server, and a unique _id rejects the second insert. FerretDB v1 gives
// only the last between clients, so replicas sharing one FerretDB (the
// cluster suite may run so) can lose a racing conditional update; claims,
// which are unique inserts, stay exclusive there too.
//
// # Queries and indexes (MongoDB)
//
// Every query of the store and of its relays, and the index EnsureIndexes
// makes for it (TestEveryQueryIsIndexed checks the shapes the store sends
// against the indexes); lookups and conditional writes by _id (with the
// scope and conditions beside it) need only _id_:
//
//	query                                                 collection   index
//	ListDocuments: {tenant, project, deleting: false,     documents    {tenant, project, deleting, _id, create_time}
//	  _id $gt the cursor, create_time range}, sort {_id: 1}, limit
//	  with a source type: {..., source_type}              documents    {tenant, project, source_type, deleting, _id, create_time}
//	FindByTerms: {tenant, project, extract_terms $all,    documents    {tenant, project, extract_terms, deleting, _id}
//	  deleting: false, _id $gt}, sort {_id: 1}, limit
//	Unfinished: $or [{deleting: true}, {indexed: false}]  documents    {deleting} and {indexed, ingest_until}
//	DeadIngests: {indexed: false, ingest_until $lt},      documents    {indexed, ingest_until}
//	  limit
//	HandledBelow: {extractor_versions.<x> $lt,            documents    none: a scan (below)
//	  deleting: false, _id $gt}, sort {_id: 1}
//	Scopes: $group by tenant and project                  documents    none: a scan (below)
//	DocumentChunks: {tenant, project, doc_id} by seq      chunks       {tenant, project, doc_id, seq}
//	EachChunk, CountChunks: {tenant, project, _id $gt}    chunks       {tenant, project, _id}
//	PendingJobs: {status $in, create_time $lt}            jobs         {status, create_time}
//	  sort {create_time: 1}, limit
//	relay sweeps: {"outbox.0": {$exists: true}}           documents,   outbox_pending (sparse,
//	  paged by _id                                        jobs           events.OutboxIndex; many writers)
//
// HandledBelow and Scopes read every document on purpose, off the request
// path: HandledBelow pages once through the documents after an
// extractor's schema changed (its range is on a field per extractor), and
// Scopes groups them once at start. EnsureIndexes drops the indexes these
// superseded ({tenant, project, _id}, {tenant, project, source_type, _id},
// {tenant, project, extract_terms}: without "deleting" they left every
// listing to fetch documents to test it) and jobs' {tenant, project,
// document_id}, which no query used. What is assumed of MongoDB: the
// planner serves equalities, then the sort, then ranges from one index
// (ESR), $all by one of its values in a multikey index, an $or by one
// index per branch, and {$exists: true} from a sparse index.
package mongostore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	ClaimsCollection    = "indexer_claims"
)

// Store is the document store. It is safe for concurrent use.
type Store struct {
	docs, chunks, jobs, claims *mongo.Collection
	// single is mongox.SingleWriter of the database: see the package doc.
	single bool
	// out hands written outbox entries to the relays (see outbox.go).
	out outbox
}

// New returns a store on db.
func New(db *mongo.Database) *Store {
	s := &Store{docs: db.Collection(DocumentsCollection), chunks: db.Collection(ChunksCollection),
		jobs: db.Collection(JobsCollection), claims: db.Collection(ClaimsCollection), single: mongox.SingleWriter(db)}
	s.out.init(s)
	return s
}

// EnsureIndexes creates the indexes the scanning queries use (see the
// package doc).
func (s *Store) EnsureIndexes(ctx context.Context) error {
	scope := func(more ...bson.E) bson.D {
		return append(bson.D{{Key: "tenant", Value: 1}, {Key: "project", Value: 1}}, more...)
	}
	deleting, id := bson.E{Key: "deleting", Value: 1}, bson.E{Key: "_id", Value: 1}
	created := bson.E{Key: "create_time", Value: 1}
	docs := []mongox.Index{
		{Keys: scope(deleting, id, created)},
		{Keys: scope(bson.E{Key: "source_type", Value: 1}, deleting, id, created)},
		{Keys: scope(bson.E{Key: "extract_terms", Value: 1}, deleting, id)},
		{Keys: bson.D{{Key: "indexed", Value: 1}, {Key: "ingest_until", Value: 1}}},
		{Keys: bson.D{{Key: "deleting", Value: 1}}},
	}
	jobs := []mongox.Index{{Keys: bson.D{{Key: "status", Value: 1}, {Key: "create_time", Value: 1}}}}
	// The relays' sweeps: with many writers only, as FerretDB, a single
	// writer's store, reads by no index.
	if !s.single {
		docs = append(docs, events.OutboxIndex)
		jobs = append(jobs, events.OutboxIndex)
	}
	if err := mongox.EnsureIndexes(ctx, s.docs, docs...); err != nil {
		return err
	}
	if err := mongox.EnsureIndexes(ctx, s.chunks,
		mongox.Index{Keys: scope(bson.E{Key: "doc_id", Value: 1}, bson.E{Key: "seq", Value: 1})},
		mongox.Index{Keys: scope(id)},
	); err != nil {
		return err
	}
	if err := mongox.EnsureIndexes(ctx, s.jobs, jobs...); err != nil {
		return err
	}
	// Those the indexes above superseded (they lacked "deleting", which
	// every listing filters on, the creation time a listing may range
	// over, or the claim DeadIngests ranges over), and one no query uses.
	if err := mongox.DropIndexes(ctx, s.docs,
		"tenant_1_project_1__id_1", "tenant_1_project_1_source_type_1__id_1", "tenant_1_project_1_extract_terms_1",
		"tenant_1_project_1_deleting_1__id_1", "tenant_1_project_1_source_type_1_deleting_1__id_1", "indexed_1"); err != nil {
		return err
	}
	return mongox.DropIndexes(ctx, s.jobs, "tenant_1_project_1_document_id_1")
}

func scopeFilter(sc document.Scope, more ...bson.E) bson.D {
	return append(bson.D{{Key: "tenant", Value: sc.Tenant}, {Key: "project", Value: sc.Project}}, more...)
}

// byID is the filter of one record.
func byID(id string) bson.D { return bson.D{{Key: "_id", Value: id}} }

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
	AttachmentText    string               `bson:"attachment_text,omitempty"`
	ContentHash       string               `bson:"content_hash"`
	ContentType       string               `bson:"content_type"`
	ContentTypeReason string               `bson:"content_type_reason"`
	VisionSummary     string               `bson:"vision_summary,omitempty"`
	Extracts          []extractRecord      `bson:"extracts"`
	ExtractTerms      []string             `bson:"extract_terms"`
	ExtractorVersions map[string]int       `bson:"extractor_versions"`
	ChunkCount        int                  `bson:"chunk_count"`
	StaleChunks       []chunkSetRecord     `bson:"stale_chunks,omitempty"`
	GraphMentions     []string             `bson:"graph_mentions,omitempty"`
	Routing           int32                `bson:"routing"`
	RoutingReason     string               `bson:"routing_reason"`
	ExtractionJobID   string               `bson:"extraction_job_id"`
	ExtractionStatus  int32                `bson:"extraction_status"`
	BaseJob           string               `bson:"base_job,omitempty"`
	Indexed           bool                 `bson:"indexed"`
	Deleting          bool                 `bson:"deleting"`
	PipelineErrors    []string             `bson:"pipeline_errors,omitempty"`
	Pipeline          *pipelineRecord      `bson:"pipeline,omitempty"`
	LiftedJobID       string               `bson:"lifted_job_id,omitempty"`
	IngestUntil       time.Time            `bson:"ingest_until,omitempty"`
	CreateTime        time.Time            `bson:"create_time"`
	UpdateTime        time.Time            `bson:"update_time"`
	Version           int64                `bson:"version"`
	Outbox            []events.OutboxEntry `bson:"outbox,omitempty"`
}

// chunkSetRecord is a document.ChunkSet as stored. MarkIndexed removes
// entries by exact value, so the encoding must not vary: always this type.
type chunkSetRecord struct {
	Hash  string `bson:"hash"`
	Count int64  `bson:"count"`
}

func toChunkSetRecords(sets []document.ChunkSet) []chunkSetRecord {
	out := make([]chunkSetRecord, len(sets))
	for i, cs := range sets {
		out[i] = chunkSetRecord{Hash: cs.Hash, Count: int64(cs.Count)}
	}
	return out
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
	d := &document.Document{
		ID: r.ID, Scope: document.Scope{Tenant: r.Tenant, Project: r.Project},
		SourceType: indexerv1.SourceType(r.SourceType), SourceURL: r.SourceURL, Title: r.Title,
		RawContent: r.RawContent, AttachmentText: r.AttachmentText, ContentHash: r.ContentHash, ContentType: r.ContentType, ContentTypeReason: r.ContentTypeReason,
		VisionSummary: r.VisionSummary, Extracts: exs, ExtractorVersions: r.ExtractorVersions, ChunkCount: r.ChunkCount,
		Routing: indexerv1.Routing(r.Routing), RoutingReason: r.RoutingReason,
		ExtractionJobID: r.ExtractionJobID, ExtractionStatus: indexerv1.ExtractionJobStatus(r.ExtractionStatus),
		Indexed: r.Indexed, Deleting: r.Deleting, PipelineErrors: r.PipelineErrors, GraphMentions: r.GraphMentions,
		IngestUntil: r.IngestUntil, CreateTime: r.CreateTime, UpdateTime: r.UpdateTime, Version: r.Version,
	}
	if d.Pipeline, err = r.Pipeline.toPipeline(); err != nil {
		return nil, err
	}
	d.LiftedJobID = r.LiftedJobID
	for _, cs := range r.StaleChunks {
		d.StaleChunks = append(d.StaleChunks, document.ChunkSet{Hash: cs.Hash, Count: int(cs.Count)})
	}
	return d, nil
}

// Projections of document reads.
var (
	withoutOutbox = options.FindOne().SetProjection(bson.D{{Key: "outbox", Value: 0}})
	withoutRaw    = bson.D{{Key: "raw_content", Value: 0}, {Key: "attachment_text", Value: 0}, {Key: "outbox", Value: 0}}
)

// GetDocument returns a document of the scope, raw content included;
// deleting documents are not found.
func (s *Store) GetDocument(ctx context.Context, sc document.Scope, id string) (*document.Document, error) {
	d, err := s.readDocument(ctx, sc, id, withoutOutbox)
	if err != nil {
		return nil, err
	}
	if d.Deleting {
		return nil, document.ErrNotFound
	}
	return d, nil
}

// LoadDocument returns a document of the scope without its raw content,
// even if it is being deleted.
func (s *Store) LoadDocument(ctx context.Context, sc document.Scope, id string) (*document.Document, error) {
	return s.readDocument(ctx, sc, id, options.FindOne().SetProjection(withoutRaw))
}

func (s *Store) readDocument(ctx context.Context, sc document.Scope, id string, opts *options.FindOneOptionsBuilder) (*document.Document, error) {
	var r docRecord
	if err := mongox.FindByID(ctx, s.docs, id, scopeFilter(sc), &r, opts); err != nil {
		return nil, translate(err)
	}
	return r.toDocument()
}

// SaveContent writes a new version of a document's content: raw content,
// hash, titles and types, chunk count, the chunk sets left to remove
// (d.StaleChunks), the queued extraction job, the pipeline state of its
// ingest phases (d.Pipeline); it clears the extracts, routing, lifted job
// and the indexed flag, since they belong to the old content, and keeps
// graph_mentions (the new content's extraction narrows them). The outbox
// entries (the phases' events) go in the same write. d.Version must be
// the version read (0 for a new document); it returns
// document.ErrConflict if the record moved on, and sets d.Version to the
// new version. over is the ingest claim (IngestUntil) read with that
// version: a renewal since then — an ingest still at work, whose renewals
// do not move the version — is a conflict too. Zero checks no claim.
func (s *Store) SaveContent(ctx context.Context, d *document.Document, over time.Time, now time.Time, outbox ...events.OutboxEntry) error {
	pipe, err := toPipelineRecord(d.Pipeline)
	if err != nil {
		return err
	}
	set := bson.M{
		"source_type": int32(d.SourceType), "source_url": d.SourceURL, "title": d.Title,
		"raw_content": d.RawContent, "attachment_text": d.AttachmentText, "content_hash": d.ContentHash,
		"content_type": d.ContentType, "content_type_reason": d.ContentTypeReason, "vision_summary": d.VisionSummary,
		"extracts": bson.A{}, "extract_terms": bson.A{}, "extractor_versions": bson.M{},
		"chunk_count": d.ChunkCount, "stale_chunks": toChunkSetRecords(d.StaleChunks),
		"routing": int32(indexerv1.Routing_ROUTING_UNSPECIFIED), "routing_reason": "",
		"extraction_job_id": d.ExtractionJobID, "extraction_status": int32(d.ExtractionStatus),
		"indexed": false, "deleting": false, "pipeline_errors": d.PipelineErrors, "update_time": now, "base_job": "",
		"pipeline": pipe, "lifted_job_id": "", "ingest_until": d.IngestUntil,
	}
	if d.Version == 0 {
		rec := bson.M{"_id": d.ID, "tenant": d.Scope.Tenant, "project": d.Scope.Project, "create_time": now, "version": int64(1)}
		for k, v := range set {
			rec[k] = v
		}
		if len(outbox) > 0 {
			rec[events.OutboxField] = outbox
		}
		unlock := mongox.LockDocument(s.docs, d.ID)
		_, err := s.docs.InsertOne(ctx, rec)
		if err == nil {
			s.out.wrote(s.docs, d.ID, outbox)
		}
		s.out.unsure(s.docs, d.ID, outbox, err)
		unlock()
		if err != nil {
			return translate(err)
		}
		d.Version, d.CreateTime, d.UpdateTime = 1, now, now
		return nil
	}
	update := bson.M{"$set": set}
	if len(outbox) > 0 {
		update["$push"] = events.OutboxPush(outbox...)
	}
	var cond bson.D
	if !over.IsZero() {
		cond = bson.D{{Key: "ingest_until", Value: over}}
	}
	if err := mongox.UpdateVersionedIf(ctx, s.docs, scopeFilter(d.Scope, bson.E{Key: "_id", Value: d.ID}), d.Version, cond, update); err != nil {
		s.out.unsure(s.docs, d.ID, outbox, err)
		return translate(err)
	}
	// After the write, outside its lock (UpdateVersioned holds it): the
	// entries of this ingest's later writes are handed over after these.
	s.out.wrote(s.docs, d.ID, outbox)
	d.Version++
	d.UpdateTime = now
	return nil
}

// RenewIngest moves the claim of the ingest of content hash to until, if
// the document still has that content and is neither indexed nor being
// deleted; it reports whether it did.
func (s *Store) RenewIngest(ctx context.Context, sc document.Scope, id, hash, jobID string, until time.Time) (bool, error) {
	ok, err := mongox.UpdateIf(ctx, s.docs, id, current(sc, hash, bson.E{Key: "indexed", Value: false}, bson.E{Key: "extraction_job_id", Value: jobID}),
		bson.M{"$set": bson.M{"ingest_until": until}}, nil)
	return ok, translate(err)
}

// current is the condition that a document still has content hash and is
// not being deleted.
func current(sc document.Scope, hash string, more ...bson.E) bson.D {
	return append(scopeFilter(sc, bson.E{Key: "content_hash", Value: hash}, bson.E{Key: "deleting", Value: false}), more...)
}

// MarkIndexed records that the chunks of content hash are in the store
// and the graph, and forgets the chunk sets whose removal the ingest
// finished, with the outbox entries (the change other replicas' search
// indexes follow) in the same write. It reports false, writing nothing,
// if the content changed meanwhile or the document is being deleted or
// gone.
func (s *Store) MarkIndexed(ctx context.Context, sc document.Scope, id, hash string, removed []document.ChunkSet, outbox ...events.OutboxEntry) (bool, error) {
	return s.MarkIndexedPipeline(ctx, sc, id, hash, removed, PipelineProgress{}, outbox...)
}

// MarkIndexedPipeline is MarkIndexed that also records the indexing
// phase's progress on the pipeline state, in the same write.
func (s *Store) MarkIndexedPipeline(ctx context.Context, sc document.Scope, id, hash string, removed []document.ChunkSet, pp PipelineProgress, outbox ...events.OutboxEntry) (bool, error) {
	update := bson.M{"$set": bson.M{"indexed": true}, "$inc": bson.M{"version": int64(1)}}
	if len(removed) > 0 {
		update["$pullAll"] = bson.M{"stale_chunks": toChunkSetRecords(removed)}
	}
	if len(outbox) > 0 {
		update["$push"] = events.OutboxPush(outbox...)
	}
	if err := pp.apply(update); err != nil {
		return false, err
	}
	ok, err := mongox.UpdateIf(ctx, s.docs, id, current(sc, hash), update, func() { s.out.wrote(s.docs, id, outbox) })
	s.out.unsure(s.docs, id, outbox, err)
	return ok, translate(err)
}

// ExtractionResult is what an extraction job writes to its document.
type ExtractionResult struct {
	Extracts          []extract.Extract
	ExtractorVersions map[string]int
	Routing           indexerv1.Routing
	RoutingReason     string
	Status            indexerv1.ExtractionJobStatus
	JobID             string
	// Mentions are the entity keys the graph now has the document
	// mention: they become its graph_mentions.
	Mentions []string
	// Pipeline is the routing phase's part of the pipeline state.
	Pipeline PipelineProgress
	// LiftedJobID is the analysis job a LIFT_UP hands the document to.
	LiftedJobID string
}

// AddMentions adds entity keys to the document's graph_mentions before
// they are written to the graph, if the document still has content hash,
// is not being deleted and jobID is still its job. It reports whether it
// did.
func (s *Store) AddMentions(ctx context.Context, sc document.Scope, id, hash, jobID string, keys []string) (bool, error) {
	update := bson.M{"$addToSet": bson.M{"graph_mentions": bson.M{"$each": keys}}, "$inc": bson.M{"version": int64(1)}}
	ok, err := mongox.UpdateIf(ctx, s.docs, id, current(sc, hash, bson.E{Key: "extraction_job_id", Value: jobID}), update, nil)
	return ok, translate(err)
}

// CompleteExtraction stores a job's extracts, routing, status and graph
// mentions on the document, and the job as the one whose digest the base
// chunk carries (base_job), with the events in its outbox, if the
// document still has content hash and is not being deleted (and the job
// is still its latest). It reports whether it did.
func (s *Store) CompleteExtraction(ctx context.Context, sc document.Scope, id, hash string, r ExtractionResult, now time.Time, outbox ...events.OutboxEntry) (bool, error) {
	recs, err := toExtractRecords(r.Extracts)
	if err != nil {
		return false, err
	}
	versions := r.ExtractorVersions
	if versions == nil {
		versions = map[string]int{}
	}
	mentions := r.Mentions
	if mentions == nil {
		mentions = []string{}
	}
	update := bson.M{
		"$set": bson.M{
			"extracts": recs, "extract_terms": document.ExtractTerms(r.Extracts), "extractor_versions": versions,
			"routing": int32(r.Routing), "routing_reason": r.RoutingReason, "extraction_status": int32(r.Status),
			"graph_mentions": mentions, "update_time": now, "base_job": r.JobID, "lifted_job_id": r.LiftedJobID,
		},
		"$inc": bson.M{"version": int64(1)},
	}
	if len(outbox) > 0 {
		update["$push"] = events.OutboxPush(outbox...)
	}
	if err := r.Pipeline.apply(update); err != nil {
		return false, err
	}
	ok, err := mongox.UpdateIf(ctx, s.docs, id, current(sc, hash, bson.E{Key: "extraction_job_id", Value: r.JobID}), update,
		func() { s.out.wrote(s.docs, id, outbox) })
	s.out.unsure(s.docs, id, outbox, err)
	return ok, translate(err)
}

// QueueExtraction points the document at a new extraction job, if its
// content is still hash and it is not being deleted. It reports whether
// it did.
func (s *Store) QueueExtraction(ctx context.Context, sc document.Scope, id, hash, jobID string) (bool, error) {
	ok, err := mongox.UpdateIf(ctx, s.docs, id, current(sc, hash), bson.M{
		"$set": bson.M{"extraction_job_id": jobID, "extraction_status": int32(indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_QUEUED)},
		"$inc": bson.M{"version": int64(1)},
	}, nil)
	return ok, translate(err)
}

// SetExtractionStatus records a job's progress on its document, if the
// job is still the document's.
func (s *Store) SetExtractionStatus(ctx context.Context, sc document.Scope, id, jobID string, st indexerv1.ExtractionJobStatus) error {
	_, err := mongox.UpdateIf(ctx, s.docs, id, scopeFilter(sc, bson.E{Key: "extraction_job_id", Value: jobID}),
		bson.M{"$set": bson.M{"extraction_status": int32(st)}}, nil)
	return translate(err)
}

// MarkDeleting hides a document and flags it for removal from the indexes,
// with the outbox entries in the same write, and returns it as it is then
// (without raw content), whether or not it was being deleted already.
func (s *Store) MarkDeleting(ctx context.Context, sc document.Scope, id string, outbox ...events.OutboxEntry) (*document.Document, error) {
	defer mongox.LockDocument(s.docs, id)()
	update := bson.M{"$set": bson.M{"deleting": true}, "$inc": bson.M{"version": int64(1)}}
	if len(outbox) > 0 {
		update["$push"] = events.OutboxPush(outbox...)
	}
	proj := options.FindOne().SetProjection(withoutRaw)
	var r docRecord
	if s.single {
		// Under the lock, the record read is the record updated.
		if err := mongox.FindByID(ctx, s.docs, id, scopeFilter(sc), &r, proj); err != nil {
			return nil, translate(err)
		}
		if _, err := s.docs.UpdateOne(ctx, byID(id), update); err != nil {
			s.out.unsure(s.docs, id, outbox, err)
			return nil, translate(err)
		}
		s.out.wrote(s.docs, id, outbox)
		r.Deleting = true
		r.Version++
		return r.toDocument()
	}
	// Read after the marking: what it returns names every part written
	// before (writes that name parts, AddMentions, check deleting).
	// (FerretDB's findAndModify takes no projection.)
	res, err := s.docs.UpdateOne(ctx, scopeFilter(sc, bson.E{Key: "_id", Value: id}), update)
	if err != nil {
		return nil, translate(err)
	}
	if res.MatchedCount == 0 {
		return nil, document.ErrNotFound
	}
	s.out.wrote(s.docs, id, outbox)
	return s.readDocument(ctx, sc, id, proj)
}

// DeleteDocument removes the document record; a record already gone is no
// error. The entries of its outbox are published first, while the relay
// runs (see FlushDocument): the record takes its pending events with it.
func (s *Store) DeleteDocument(ctx context.Context, sc document.Scope, id string) error {
	if err := s.FlushDocument(ctx, id); err != nil {
		return fmt.Errorf("mongostore: publish the events of %s before removing it: %w", id, err)
	}
	_, err := mongox.DeleteIf(ctx, s.docs, id, scopeFilter(sc))
	return translate(err)
}

// IndexState reads what the document's record says the search indexes
// must hold of it (one read by _id of a few fields). A record of another
// scope, or none, is document.Absent.
func (s *Store) IndexState(ctx context.Context, sc document.Scope, id string) (document.IndexState, error) {
	var r struct {
		ContentHash string `bson:"content_hash"`
		ChunkCount  int    `bson:"chunk_count"`
		Indexed     bool   `bson:"indexed"`
		Deleting    bool   `bson:"deleting"`
		BaseJob     string `bson:"base_job"`
		Version     int64  `bson:"version"`
	}
	// The scope's fields too: FindByID checks them in what it reads.
	opts := options.FindOne().SetProjection(bson.D{{Key: "tenant", Value: 1}, {Key: "project", Value: 1},
		{Key: "content_hash", Value: 1}, {Key: "chunk_count", Value: 1},
		{Key: "indexed", Value: 1}, {Key: "deleting", Value: 1}, {Key: "base_job", Value: 1}, {Key: "version", Value: 1}})
	err := mongox.FindByID(ctx, s.docs, id, scopeFilter(sc), &r, opts)
	if errors.Is(err, mongox.ErrNotFound) {
		return document.Absent, nil
	}
	if err != nil {
		return document.IndexState{}, translate(err)
	}
	return document.IndexState{Found: true, Indexed: r.Indexed, Deleting: r.Deleting,
		Chunks: document.ChunkSet{Hash: r.ContentHash, Count: r.ChunkCount}, BaseJob: r.BaseJob, Version: r.Version}, nil
}

// SingleWriter reports whether this process is the database's only
// writer (mongox.SingleWriter).
func (s *Store) SingleWriter() bool { return s.single }

// ListFilter selects the documents of a listing; zero values select all.
type ListFilter struct {
	// SourceType keeps documents of that source type.
	SourceType indexerv1.SourceType
	// CreatedFrom and CreatedTo keep documents stored at or after
	// CreatedFrom and before CreatedTo.
	CreatedFrom, CreatedTo time.Time
}

// ListDocuments returns up to limit documents of the scope matching lf
// after id afterID, in id order, without raw content. It scans (see the
// package doc).
func (s *Store) ListDocuments(ctx context.Context, sc document.Scope, lf ListFilter, afterID string, limit int) ([]*document.Document, error) {
	f := scopeFilter(sc)
	if lf.SourceType != indexerv1.SourceType_SOURCE_TYPE_UNSPECIFIED {
		f = append(f, bson.E{Key: "source_type", Value: int32(lf.SourceType)})
	}
	if created := mongox.TimeRange(lf.CreatedFrom, lf.CreatedTo); len(created) > 0 {
		f = append(f, bson.E{Key: "create_time", Value: created})
	}
	f = append(f, bson.E{Key: "deleting", Value: false})
	return s.findDocs(ctx, f, afterID, limit)
}

// FindByTerms returns up to limit documents of the scope carrying every
// term, after afterID, in id order, without raw content. It scans.
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
	var recs []docRecord
	if err := mongox.FindAll(ctx, s.docs, f, &recs, opts); err != nil {
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
// deleted, or content not (yet) indexed. Start-up reconciliation finishes
// them. It scans.
func (s *Store) Unfinished(ctx context.Context, limit int) ([]*document.Document, error) {
	f := bson.D{{Key: "$or", Value: bson.A{bson.M{"deleting": true}, bson.M{"indexed": false}}}}
	return s.find(ctx, f, options.Find().SetLimit(int64(limit)).SetProjection(bson.D{{Key: "outbox", Value: 0}}))
}

// DeadIngests returns up to limit documents whose ingest is neither done
// nor being renewed: not indexed, their ingest claim (IngestUntil) ended
// before now. Only what names them is read (scope, id, the claim, the
// version, the flags): the caller reads each it finishes again, and leaves
// those being deleted (Deleting) to the delete.
func (s *Store) DeadIngests(ctx context.Context, now time.Time, limit int) ([]*document.Document, error) {
	f := bson.D{{Key: "indexed", Value: false}, {Key: "ingest_until", Value: bson.M{"$lt": now}}}
	header := bson.D{{Key: "tenant", Value: 1}, {Key: "project", Value: 1}, {Key: "ingest_until", Value: 1},
		{Key: "update_time", Value: 1}, {Key: "version", Value: 1}, {Key: "indexed", Value: 1}, {Key: "deleting", Value: 1}}
	return s.find(ctx, f, options.Find().SetLimit(int64(limit)).SetProjection(header))
}

// HandledBelow returns up to limit documents (id order, after afterID)
// that extractor handled at a schema version below version. It scans.
func (s *Store) HandledBelow(ctx context.Context, extractor string, version int, afterID string, limit int) ([]*document.Document, error) {
	f := bson.D{{Key: "extractor_versions." + extractor, Value: bson.M{"$lt": version}}, {Key: "deleting", Value: false}}
	return s.findDocs(ctx, f, afterID, limit)
}

// Scopes lists every scope that has documents. It scans.
func (s *Store) Scopes(ctx context.Context) ([]document.Scope, error) {
	var rows []struct {
		ID struct {
			Tenant  string `bson:"tenant"`
			Project string `bson:"project"`
		} `bson:"_id"`
	}
	byScope := mongo.Pipeline{{{Key: "$group", Value: bson.M{"_id": bson.M{"tenant": "$tenant", "project": "$project"}}}}}
	if err := mongox.AggregateAll(ctx, s.docs, byScope, &rows); err != nil {
		return nil, translate(err)
	}
	out := make([]document.Scope, len(rows))
	for i, r := range rows {
		out[i] = document.Scope{Tenant: r.ID.Tenant, Project: r.ID.Project}
	}
	return out, nil
}
