// Package document holds the indexer's records — documents with their
// extracts, chunks, extraction jobs — their ids, and the rules for
// finding documents by extract fields. Storage is in package mongostore.
package document

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
)

// Errors of the document store.
var (
	// ErrNotFound means no such document, chunk or job in the scope.
	ErrNotFound = errors.New("document: not found")
	// ErrConflict means the record changed since it was read.
	ErrConflict = errors.New("document: changed concurrently")
	// ErrClaimLost means a claim's holder no longer holds it: another
	// took it over after it lapsed, or it was released.
	ErrClaimLost = errors.New("document: claim lost")
)

// BusyError means another holder has the claim until Until (unless it
// renews it or lets it go first).
type BusyError struct {
	Holder string
	Until  time.Time
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("document: claimed by %s until %s", e.Holder, e.Until.Format(time.RFC3339Nano))
}

// Scope is a tenant's project; every record belongs to one.
type Scope struct {
	// Tenant is the tenant id.
	Tenant string
	// Project is the project id; empty is the tenant's default project.
	Project string
}

// Document is a stored document.
type Document struct {
	// ID is derived from the scope and the source URL (see ID).
	ID    string
	Scope Scope
	// SourceType, SourceURL and Title are as ingested.
	SourceType indexerv1.SourceType
	SourceURL  string
	Title      string
	// RawContent is the text as ingested; ContentHash its SHA-256, hex.
	RawContent  string
	ContentHash string
	// ContentType is the detected content type; ContentTypeReason the
	// signals behind it.
	ContentType       string
	ContentTypeReason string
	// VisionSummary describes image attachments, if vision ran.
	VisionSummary string
	// Extracts of the current content.
	Extracts []extract.Extract
	// ExtractorVersions maps each extractor that handled the current
	// content to its schema version at the time.
	ExtractorVersions map[string]int
	// ChunkCount is the number of chunks indexed, the base chunk included.
	ChunkCount int
	// Routing is intake's decision, and RoutingReason the rule behind it.
	Routing       indexerv1.Routing
	RoutingReason string
	// ExtractionJobID is the latest extraction job; ExtractionStatus its
	// status.
	ExtractionJobID  string
	ExtractionStatus indexerv1.ExtractionJobStatus
	// Indexed is true once the current content's chunks are in the
	// search indexes and the graph.
	Indexed bool
	// Deleting is true while a delete is removing the document from the
	// indexes; such a document is invisible.
	Deleting bool
	// PipelineErrors are non-fatal problems of the last ingest (vision
	// unavailable, ...).
	PipelineErrors []string
	// AttachmentText is what the attachments added to the text at ingest
	// (the PDFs' text layers, at most pipeline.MaxKeptAttachmentText
	// bytes): the attachments themselves are not stored, so an ingest
	// that reconciliation finishes reads their text from here.
	AttachmentText string
	// Pipeline is the qualifier's state of the current content (see
	// package pipeline); nil for a document ingested before it existed.
	Pipeline *indexerv1.IntakePipeline
	// LiftedJobID is the analysis job a LIFT_UP routing hands the
	// document to (see LiftedJobID).
	LiftedJobID string
	// StaleChunks are the chunk sets of earlier content (or an earlier
	// chunking) that may still be in the store, the indexes and the graph:
	// the ingest that replaced them removes them, by id, and then forgets
	// them (MarkIndexed). Recorded in the write that replaces the content,
	// so a crash in between leaks nothing.
	StaleChunks []ChunkSet
	// GraphMentions are the entity keys the document may MENTION in the
	// graph (a superset: keys are added before the graph is written, and
	// narrowed to the extracts' entities after), so a content change or a
	// delete removes its mentions by id.
	GraphMentions []string
	// IngestUntil is the claim of the ingest writing this content while the
	// document is not yet indexed: that ingest renews it while it runs
	// (every third of its TTL), so once it has passed, the ingest is dead
	// and reconciliation finishes the document. Zero on documents written
	// before the claim existed (their ingest is given IngestGrace).
	IngestUntil time.Time
	// CreateTime and UpdateTime are set by the store.
	CreateTime, UpdateTime time.Time
	// Version increments on every write (optimistic concurrency).
	Version int64
}

// Chunk kinds.
const (
	// KindBase is a document's summary chunk: title, type, extract digest.
	KindBase = "base"
	// KindContent is a piece of the content.
	KindContent = "content"
	// KindVision is the vision summary of the attachments.
	KindVision = "vision"
)

// Chunk is an indexed piece of a document. The document's title, URL and
// types are copied in, so a search hit and an index rebuild need no join.
type Chunk struct {
	ID          string
	Scope       Scope
	DocID       string
	Seq         int
	Kind        string
	Text        string
	Start, End  int
	ContentHash string
	Title       string
	SourceURL   string
	SourceType  indexerv1.SourceType
	ContentType string
	// Vector is the embedding by Embedder; kept so rebuilds need no
	// embedding calls.
	Vector   []float32
	Embedder string
}

// ChunkSet names the chunks of one version of a document: chunk ids are
// derived from the document, the content hash and the sequence number (see
// ChunkID), so the hash and the count name every chunk.
type ChunkSet struct {
	Hash  string
	Count int
}

// ChunkIDs returns the ids of the chunks of set.
func ChunkIDs(docID string, set ChunkSet) []string {
	ids := make([]string, set.Count)
	for seq := range ids {
		ids[seq] = ChunkID(docID, set.Hash, seq)
	}
	return ids
}

// Chunks returns the document's current chunk set.
func (d *Document) Chunks() ChunkSet { return ChunkSet{Hash: d.ContentHash, Count: d.ChunkCount} }

// Job is an extraction job.
type Job struct {
	ID          string
	Scope       Scope
	DocumentID  string
	ContentHash string
	// Reason is why it was queued: ReasonIngest, ReasonContentChanged,
	// ReasonSchemaUpgrade or ReasonReconcile.
	Reason     string
	Status     indexerv1.ExtractionJobStatus
	Runs       []Run
	Attempts   int
	Error      string
	CreateTime time.Time
	StartTime  time.Time
	EndTime    time.Time
}

// Job reasons.
const (
	ReasonIngest         = "ingest"
	ReasonContentChanged = "content_changed"
	ReasonSchemaUpgrade  = "schema_upgrade"
	ReasonReconcile      = "reconcile"
)

// Run is one extractor's outcome in a job.
type Run struct {
	Extractor     string
	SchemaVersion int
	Status        indexerv1.ExtractorRunStatus
	ExtractCount  int
	Error         string
	Duration      time.Duration
}

// Terminal reports whether a job status is final.
func Terminal(s indexerv1.ExtractionJobStatus) bool {
	switch s {
	case indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED,
		indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_PARTIALLY_FAILED,
		indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_FAILED,
		indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUPERSEDED:
		return true
	}
	return false
}

// Hash returns the hex SHA-256 of content.
func Hash(content string) string {
	s := sha256.Sum256([]byte(content))
	return hex.EncodeToString(s[:])
}

// ID derives a document id: a document is its scope plus its source URL,
// so re-ingesting the URL updates the same document. Without a URL the
// content hash stands in, so the same text ingested twice is one document.
func ID(s Scope, sourceURL, contentHash string) string {
	key := "url\x00" + sourceURL
	if sourceURL == "" {
		key = "hash\x00" + contentHash
	}
	sum := sha256.Sum256([]byte(s.Tenant + "\x00" + s.Project + "\x00" + key))
	return "doc_" + hex.EncodeToString(sum[:12])
}

// ChunkID names chunk seq of one version (content hash) of a document, so
// chunks of old content never collide with new ones.
func ChunkID(docID, contentHash string, seq int) string {
	return fmt.Sprintf("%s_%s_%04d", docID, contentHash[:12], seq)
}

// JobID names a new extraction job.
func JobID(docID string, now time.Time) string {
	return fmt.Sprintf("xj_%s_%x", docID[len("doc_"):], now.UnixNano())
}
