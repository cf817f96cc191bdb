package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/heartbeat"
	"github.com/agentmesh/agentmesh/services/indexer/internal/chunk"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	docstore "github.com/agentmesh/agentmesh/services/indexer/internal/document/mongostore"
	"github.com/agentmesh/agentmesh/services/indexer/internal/graph"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
	"github.com/agentmesh/agentmesh/services/indexer/internal/pipeline"
)

// Attachment is a file that came with a document.
type Attachment = pipeline.Attachment

// IngestInput is a document to bring in. The caller has validated it.
type IngestInput struct {
	Scope       document.Scope
	SourceType  indexerv1.SourceType
	SourceURL   string
	Title       string
	RawContent  string
	Attachments []Attachment
}

// IngestResult reports an ingest.
type IngestResult struct {
	// Document is the stored document.
	Document *document.Document
	// Unchanged is true when the content was already indexed as is.
	Unchanged bool
	// JobID is the extraction job queued, if one was.
	JobID string
}

// ErrDeleting means the document is being deleted; retry later.
var ErrDeleting = errors.New("intake: the document is being deleted")

// Ingest stores and indexes a document. Ingesting content that is already
// indexed does nothing, and content whose ingest is under way waits for
// it (both report Unchanged); new content replaces the document's chunks,
// graph structure and extracts (an extraction job recomputes them).
// Concurrent writers of one document are resolved by optimistic
// concurrency.
func (s *Service) Ingest(ctx context.Context, in IngestInput) (IngestResult, error) {
	res, err := s.ingest(ctx, in)
	s.countIngest(ctx, res, err)
	return res, err
}

func (s *Service) ingest(ctx context.Context, in IngestInput) (IngestResult, error) {
	hash := document.Hash(in.RawContent)
	id := document.ID(in.Scope, in.SourceURL, hash)
	for attempt := 0; ; attempt++ {
		existing, err := s.Docs.LoadDocument(ctx, in.Scope, id)
		switch {
		case errors.Is(err, document.ErrNotFound):
			existing = nil
		case err != nil:
			return IngestResult{}, err
		case existing.Deleting:
			return IngestResult{}, ErrDeleting
		case existing.ContentHash == hash && existing.Indexed:
			existing.RawContent = ""
			return IngestResult{Document: existing, Unchanged: true}, nil
		}
		var prior priorRun
		if existing != nil && existing.ContentHash == hash {
			if s.ingestLive(existing) {
				// An ingest of this content is under way (a client that
				// sent it again after a timeout, in this replica or
				// another): wait for it rather than run the pipeline,
				// its model calls included, a second time beside it.
				d, err := s.awaitIngest(ctx, existing)
				switch {
				case errors.Is(err, errIngestUnfinished), errors.Is(err, document.ErrNotFound):
					// It died meanwhile (read it again and finish it), or
					// the document is being deleted or gone (read again).
					continue
				case err != nil:
					return IngestResult{}, err
				case d.ContentHash != hash:
					continue // other content replaced it meanwhile: this one is new again
				}
				d.RawContent = ""
				return IngestResult{Document: d, Unchanged: true}, nil
			}
			// An earlier ingest of this content stopped before the end (a
			// work item delivered again after a crash): finish it, as
			// reconciliation would, under its correlation id, reusing
			// its vision results.
			prior = priorRun{pipeline: existing.Pipeline, attachmentText: existing.AttachmentText}
		}
		res, err := s.ingestVersion(ctx, in, id, hash, existing, prior)
		if errors.Is(err, document.ErrConflict) && !errors.Is(err, errSuperseded) && !errors.Is(err, errIngestDisplaced) && attempt < 3 {
			continue
		}
		return res, err
	}
}

// keepIngest renews the claim of the ingest of doc every third of its
// TTL until the returned function is called, or the document is indexed,
// changed or deleted, or another ingest took it over after the claim
// lapsed (its first write names another job): then there is nothing left
// to claim.
func (s *Service) keepIngest(ctx context.Context, doc *document.Document, lose context.CancelCauseFunc) (stop func()) {
	ttl := s.cfg.JobLeaseTTL
	return heartbeat.Keep(ctx, ttl/3, func(ctx context.Context) bool {
		rctx, cancel := context.WithTimeout(ctx, ttl/3)
		defer cancel()
		ok, err := s.Docs.RenewIngest(rctx, doc.Scope, doc.ID, doc.ContentHash, doc.ExtractionJobID, s.now().Add(ttl))
		if err != nil {
			s.Logger.Warn("renewing an ingest's claim failed; retrying", slog.String("document_id", doc.ID), slog.Any("error", err))
			return true
		}
		if !ok && s.takenOver(rctx, doc) {
			s.Logger.Warn("another ingest took over this one after its claim lapsed; it stops", slog.String("document_id", doc.ID),
				slog.String("job_id", doc.ExtractionJobID))
			lose(errIngestDisplaced)
		}
		return ok
	})
}

// takenOver reports whether another ingest of the same content took doc
// over: its record names another job. Only then does the ingest stop: one
// whose content was replaced or is being deleted goes on, to undo its
// chunks once its MarkIndexed fails.
func (s *Service) takenOver(ctx context.Context, doc *document.Document) bool {
	cur, err := s.Docs.LoadDocument(ctx, doc.Scope, doc.ID)
	return err == nil && !cur.Deleting && cur.ContentHash == doc.ContentHash && cur.ExtractionJobID != doc.ExtractionJobID
}

// priorRun is what an interrupted ingest of the same content left, which
// reconciliation finishes with: the attachments are not stored, so their
// vision results and their text are reused rather than read again.
type priorRun struct {
	pipeline       *indexerv1.IntakePipeline // nil: a fresh ingest
	attachmentText string                    // document.Document.AttachmentText
}

// ingestVersion runs the pipeline for one content version; prior is set
// when reconciliation finishes an interrupted ingest of this content.
func (s *Service) ingestVersion(ctx context.Context, in IngestInput, id, hash string, existing *document.Document, prior priorRun) (_ IngestResult, err error) {
	log := s.Logger.With(slog.String("document_id", id), slog.String("tenant", in.Scope.Tenant))
	now := s.now()
	jobID := document.JobID(id, now)
	// The intake's correlation id names its phase events and base node: a
	// run that finishes an interrupted one keeps that one's.
	correlation := prior.pipeline.GetCorrelationId()
	if correlation == "" {
		correlation = jobID
	}
	urn := in.SourceURL
	if urn == "" {
		urn = "urn:agentmesh:indexer:document:" + id
	}
	q := s.qualifier.Qualify(ctx, pipeline.Input{Scope: in.Scope.Proto(), CorrelationID: correlation, SourceURN: urn, SourceType: in.SourceType,
		Title: in.Title, Text: in.RawContent, Attachments: in.Attachments, Prior: prior.pipeline, PriorAttachmentText: prior.attachmentText})
	p := q.Pipeline
	pipelineErrors := pipeline.Errors(p)
	for _, e := range pipelineErrors {
		log.Warn("qualifier phase failed; the pipeline goes on", slog.String("error", e))
	}
	reason := document.ReasonIngest
	version := int64(0)
	if existing != nil {
		version = existing.Version
		if existing.ContentHash != hash {
			reason = document.ReasonContentChanged
		}
	}
	doc := &document.Document{
		ID: id, Scope: in.Scope, SourceType: in.SourceType, SourceURL: in.SourceURL, Title: in.Title,
		RawContent: in.RawContent, ContentHash: hash, ContentType: q.FineType, ContentTypeReason: q.FineReason,
		VisionSummary: q.VisionText, AttachmentText: q.AttachmentText, PipelineErrors: pipelineErrors, Version: version, Pipeline: p,
		ExtractionStatus: indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_QUEUED,
	}
	chunks := s.chunkDocument(doc, "", q.Body, q.Sections)
	p.Indexing.ChunkCount = int32(len(chunks))
	indexing := s.qualifierPhase(pipeline.PhaseIndexing)
	if err := s.embedChunks(ctx, chunks); err != nil {
		return IngestResult{}, err
	}
	doc.ChunkCount = len(chunks)
	if existing != nil {
		doc.StaleChunks = staleChunks(existing, doc.Chunks())
		doc.GraphMentions = existing.GraphMentions
	}
	job := &document.Job{ID: jobID, Scope: in.Scope, DocumentID: id, ContentHash: hash, Reason: reason,
		Status: indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_QUEUED, CreateTime: now}
	doc.ExtractionJobID = job.ID

	// The document first: from here on a crash leaves it not indexed, and
	// reconciliation redoes the rest — once this ingest's claim, which it
	// renews while it runs, has lapsed, so that it never redoes an ingest
	// still under way and finishes a dead one within a claim's TTL.
	phaseEvents, err := s.phaseEvents(ctx, doc, correlation, correlation, p.GetPhases()...)
	if err != nil {
		return IngestResult{}, err
	}
	defer s.ingests.enter(id)()
	doc.IngestUntil = now.Add(s.cfg.JobLeaseTTL)
	// Over the claim read with existing: should its ingest have renewed
	// it since (it was slow, not dead), this one stops with a conflict.
	// (A new version of the content supersedes the ingest of the old one
	// instead: that one's MarkIndexed fails on the content.)
	var over time.Time
	if existing != nil && existing.ContentHash == hash {
		over = existing.IngestUntil
	}
	if err := s.Docs.SaveContent(ctx, doc, over, now, phaseEvents...); err != nil {
		return IngestResult{}, err
	}
	defer func() {
		if err != nil {
			s.failed.add(doc.Scope, doc.ID) // FinishFailedIngests
		}
	}()
	// An ingest another took over once its claim had lapsed (it stalled)
	// stops at its next renewal: the other writes the same chunks.
	claimed, lose := context.WithCancelCause(ctx)
	defer lose(nil)
	defer func() {
		if err != nil && errors.Is(context.Cause(claimed), errIngestDisplaced) {
			err = fmt.Errorf("intake: ingest of %s: %w", id, errIngestDisplaced)
		}
	}()
	ctx = claimed
	stopClaim := s.keepIngest(ctx, doc, lose)
	defer stopClaim()
	if s.afterSave != nil {
		if err := s.afterSave(doc.ID); err != nil {
			return IngestResult{}, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.IngestGrace)
	defer cancel()
	if err := s.index(ctx, doc, chunks, existing != nil && existing.ContentHash != hash); err != nil {
		return IngestResult{}, err
	}
	// The job before the indexed flag: a crash between them leaves the
	// document to reconciliation, whose new job supersedes this one.
	if err := s.queueJob(ctx, job); err != nil {
		return IngestResult{}, err
	}
	change, err := s.changeEntries(ctx, doc.Scope, doc.ID, doc.Chunks())
	if err != nil {
		return IngestResult{}, err
	}
	// Every chunk is stored and linked PART_OF the base node (index).
	p.Indexing.ProcessedCount = int32(len(chunks))
	indexed := indexing.end(p)
	ev, err := s.phaseEvents(ctx, doc, correlation, correlation, indexed)
	if err != nil {
		return IngestResult{}, err
	}
	change = append(ev, change...)
	unlock := s.lockOwnChange(doc.ID)
	defer unlock()
	ok, err := s.Docs.MarkIndexedPipeline(ctx, doc.Scope, doc.ID, hash, doc.StaleChunks,
		docstore.PipelineProgress{Phase: indexed, Processed: len(chunks)}, change...)
	if err != nil {
		return IngestResult{}, fmt.Errorf("intake: mark indexed: %w", err)
	}
	if !ok {
		unlock()
		cur, err := s.undoIngest(ctx, doc)
		switch {
		case err != nil:
			return IngestResult{}, err
		case cur == nil || cur.Deleting:
			return IngestResult{}, ErrDeleting
		}
		return IngestResult{}, fmt.Errorf("intake: ingest of %s: %w", id, errSuperseded)
	}
	doc.Indexed = true
	doc.StaleChunks = nil
	doc.RawContent = ""
	if !s.local {
		// This replica's shard now, from the chunks at hand; the others
		// follow the change in the outbox. Should this fail, this
		// replica follows its own change too.
		if err := s.convergeLocked(ctx, doc.Scope, doc.ID, nil, &held{chunks: chunks}); err != nil {
			log.Warn("search index not updated; it follows the change from the stream", slog.Any("error", err))
		}
	}
	unlock()
	log.Info("document indexed", slog.String("content_type", doc.ContentType), slog.String("qualifier_type", p.GetContentType().GetType().String()),
		slog.Int("chunks", len(chunks)), slog.String("job_id", job.ID))
	return IngestResult{Document: doc, JobID: job.ID}, nil
}

// staleChunks returns the chunk sets a new version of existing, with chunk
// set cur, leaves to remove: those existing had left, and its own.
func staleChunks(existing *document.Document, cur document.ChunkSet) []document.ChunkSet {
	var out []document.ChunkSet
	for _, cs := range append(slices.Clone(existing.StaleChunks), existing.Chunks()) {
		if cs.Count > 0 && cs != cur && !slices.Contains(out, cs) {
			out = append(out, cs)
		}
	}
	return out
}

// idsOf returns the ids of the chunks of sets, but those of except.
func idsOf(docID string, sets []document.ChunkSet, except []document.Chunk) []string {
	keep := make(map[string]bool, len(except))
	for _, c := range except {
		keep[c.ID] = true
	}
	var out []string
	for _, cs := range sets {
		for _, id := range document.ChunkIDs(docID, cs) {
			if !keep[id] {
				keep[id] = true
				out = append(out, id)
			}
		}
	}
	return out
}

// index writes the chunks to the store, the graph and, for a single
// writer, the search shard, removing the document's stale chunks from
// each. (With replicas the shards follow the write that marks the
// document indexed.) contentChanged drops the entity links of the old
// content.
func (s *Service) index(ctx context.Context, doc *document.Document, chunks []document.Chunk, contentChanged bool) error {
	stale := idsOf(doc.ID, doc.StaleChunks, chunks)
	if err := s.Docs.ReplaceChunks(ctx, chunks, stale); err != nil {
		return fmt.Errorf("intake: store chunks: %w", err)
	}
	if s.local {
		hc := toHybrid(chunks)
		err := s.Indexes.Write(hscope(doc.Scope), func(tx hybrid.Tx) error {
			if err := tx.DeleteDocument(ctx, doc.ID); err != nil {
				return err
			}
			return tx.Add(hc)
		})
		if err != nil {
			return fmt.Errorf("intake: search indexes: %w", err)
		}
	}
	gs := graph.Scope(doc.Scope)
	chunkNodes := make([]graph.Node, len(chunks))
	for i, c := range chunks {
		chunkNodes[i] = graph.Node{Key: chunkKey(c.ID), Kind: graph.KindChunk, Label: label(c.Text),
			Props: map[string]any{"document_id": doc.ID, "seq": float64(c.Seq), "kind": c.Kind, "span_start": float64(c.Start), "span_end": float64(c.End)}}
	}
	if err := s.Graph.ReplaceDocument(ctx, gs, doc.ID, docNode(doc), chunkNodes, chunkKeys(stale)); err != nil {
		return fmt.Errorf("intake: graph: %w", err)
	}
	if contentChanged && len(doc.GraphMentions) > 0 {
		if err := s.Graph.ReplaceMentions(ctx, gs, doc.ID, docKey(doc.ID), nil, doc.GraphMentions); err != nil {
			return fmt.Errorf("intake: graph: %w", err)
		}
	}
	return nil
}

// errIngestDisplaced stops an ingest another took over after its claim
// lapsed (it stalled past JobLeaseTTL): that one finishes the document.
var errIngestDisplaced = fmt.Errorf("another ingest took the document over after this one's claim lapsed: %w", document.ErrConflict)

// errSuperseded means another ingest of the document replaced its content
// before this one could mark it indexed. Retrying would undo that ingest.
var errSuperseded = fmt.Errorf("a newer ingest of the document came first: %w", document.ErrConflict)

// undoIngest removes what an ingest of doc wrote once its content was
// replaced, or the document deleted, before it could mark it indexed: the
// newer version, or the delete, may have cleaned up before these writes
// landed. Nothing is removed if doc's content is current (again). It
// returns the document as it is now, nil if gone.
func (s *Service) undoIngest(ctx context.Context, doc *document.Document) (*document.Document, error) {
	cur, err := s.Docs.LoadDocument(ctx, doc.Scope, doc.ID)
	switch {
	case errors.Is(err, document.ErrNotFound):
		cur = nil
	case err != nil:
		return nil, err
	case !cur.Deleting && cur.ContentHash == doc.ContentHash:
		return cur, nil
	}
	ids := document.ChunkIDs(doc.ID, doc.Chunks())
	if s.local { // with replicas, no shard got them: shards hold only what a record says
		if err := s.Indexes.Write(hscope(doc.Scope), func(tx hybrid.Tx) error { return tx.Delete(ids) }); err != nil {
			return nil, fmt.Errorf("intake: search indexes: %w", err)
		}
	}
	gs, keys := graph.Scope(doc.Scope), chunkKeys(ids)
	if cur == nil || cur.Deleting {
		err = s.Graph.DeleteDocument(ctx, gs, doc.ID, docKey(doc.ID), keys, nil)
	} else {
		// The current version's node, and none of its chunks, which this
		// ingest did not write.
		err = s.Graph.ReplaceDocument(ctx, gs, doc.ID, docNode(cur), nil, keys)
	}
	if err != nil {
		return nil, fmt.Errorf("intake: graph: %w", err)
	}
	return cur, s.Docs.DeleteChunks(ctx, ids)
}

func chunkKey(id string) string { return "chunk:" + id }

// chunkKeys returns the graph keys of chunks with these ids.
func chunkKeys(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = chunkKey(id)
	}
	return out
}

func docKey(id string) string { return "doc:" + id }

// docNode is the document's node: the base node of its intake, which
// every chunk is PART_OF, with the pipeline's base node key and base info.
func docNode(d *document.Document) graph.Node {
	n := graph.Node{Key: docKey(d.ID), Kind: graph.KindDocument, Label: d.Title, Props: map[string]any{
		"document_id": d.ID, "source_url": d.SourceURL, "content_type": d.ContentType,
		"source_type": strings.ToLower(strings.TrimPrefix(d.SourceType.String(), "SOURCE_TYPE_")),
	}}
	if ix := d.Pipeline.GetIndexing(); ix.GetBaseNodeKey() != "" {
		n.Props["base_node_key"], n.Props["base_info"] = ix.GetBaseNodeKey(), ix.GetBaseInfo()
	}
	return n
}

// label shortens text for a node label.
func label(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > 80 {
		s = string([]rune(s)[:79]) + "…"
	}
	return s
}

// chunkDocument builds the document's chunks: the base chunk (seq 0:
// title, type, the pipeline's base info, and digest, the extracts'
// summary once known), the content chunks — sections as given (a log's
// summary, key events, critical details), else body cut by the chunker —
// and the vision summary chunk. Spans are byte offsets in the raw
// content: empty for text that is not in it (base, sections, vision, an
// e-mail body decoded from its MIME encoding).
func (s *Service) chunkDocument(d *document.Document, digest, body string, sections []string) []document.Chunk {
	out := []document.Chunk{s.baseChunk(d, digest)}
	mk := func(kind, text string, start, end int) document.Chunk {
		c := s.newChunk(d, len(out), kind, text)
		c.Start, c.End = start, end
		return c
	}
	for _, sec := range sections {
		out = append(out, mk(document.KindContent, sec, 0, 0))
	}
	if len(sections) == 0 {
		offset := strings.Index(d.RawContent, body)
		for _, c := range chunk.Split(body, s.cfg.Chunk) {
			if offset < 0 {
				out = append(out, mk(document.KindContent, c.Text, 0, 0))
			} else {
				out = append(out, mk(document.KindContent, c.Text, offset+c.Start, offset+c.End))
			}
		}
	}
	if d.VisionSummary != "" {
		out = append(out, mk(document.KindVision, "Images: "+d.VisionSummary, 0, 0))
	}
	return out
}

// baseChunk is the document's base chunk (seq 0), the searchable base
// info of its base node.
func (s *Service) baseChunk(d *document.Document, digest string) document.Chunk {
	return s.newChunk(d, 0, document.KindBase, baseText(d, digest))
}

func (s *Service) newChunk(d *document.Document, seq int, kind, text string) document.Chunk {
	return document.Chunk{ID: document.ChunkID(d.ID, d.ContentHash, seq), Scope: d.Scope, DocID: d.ID, Seq: seq, Kind: kind,
		Text: text, ContentHash: d.ContentHash, Title: d.Title, SourceURL: d.SourceURL,
		SourceType: d.SourceType, ContentType: d.ContentType, Embedder: s.Embedder.Name()}
}

// baseText is the base chunk: what the document is, in a few lines.
func baseText(d *document.Document, digest string) string {
	var b strings.Builder
	if d.Title != "" {
		b.WriteString(d.Title + "\n")
	}
	fmt.Fprintf(&b, "%s (%s)", strings.ReplaceAll(d.ContentType, "_", " "), strings.ToLower(strings.TrimPrefix(d.SourceType.String(), "SOURCE_TYPE_")))
	if d.SourceURL != "" {
		b.WriteString(" " + d.SourceURL)
	}
	if info := d.Pipeline.GetIndexing().GetBaseInfo(); info != "" {
		b.WriteString("\n" + info)
	}
	if digest != "" {
		b.WriteString("\n" + digest)
	}
	return b.String()
}

// embedChunks embeds the chunks' texts in place.
func (s *Service) embedChunks(ctx context.Context, cs []document.Chunk) error {
	texts := make([]string, len(cs))
	for i, c := range cs {
		texts[i] = c.Text
	}
	vs, err := s.Embedder.Embed(ctx, texts)
	if err != nil {
		return fmt.Errorf("intake: embed: %w", err)
	}
	for i := range cs {
		cs[i].Vector = vs[i]
		cs[i].Embedder = s.Embedder.Name()
	}
	return nil
}

func toHybrid(cs []document.Chunk) []hybrid.Chunk {
	out := make([]hybrid.Chunk, len(cs))
	for i, c := range cs {
		out[i] = hybrid.Chunk{Key: c.ID, Doc: c.DocID, Title: c.Title, Text: c.Text, SourceType: int32(c.SourceType), ContentType: c.ContentType, Vector: c.Vector}
	}
	return out
}
