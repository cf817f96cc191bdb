package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	docstore "github.com/agentmesh/agentmesh/services/indexer/internal/document/mongostore"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intake"
	"github.com/agentmesh/agentmesh/services/indexer/internal/pipeline"
)

// Limits on ingested documents.
type Limits struct {
	// MaxContentBytes caps raw_content.
	MaxContentBytes int
	// MaxAttachments caps the number of attachments.
	MaxAttachments int
	// MaxAttachmentBytes caps one attachment.
	MaxAttachmentBytes int
}

// visionImageTypes are the declared types an attachment's bytes must
// match.
var visionImageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/jpg": true, "image/gif": true, "image/webp": true}

// Documents implements DocumentService.
type Documents struct {
	indexerv1.UnimplementedDocumentServiceServer
	svc    *intake.Service
	limits Limits
}

var _ indexerv1.DocumentServiceServer = (*Documents)(nil)

// NewDocuments returns the DocumentService server.
func NewDocuments(svc *intake.Service, limits Limits) *Documents {
	if limits.MaxContentBytes <= 0 {
		limits.MaxContentBytes = 8 << 20
	}
	if limits.MaxAttachments <= 0 {
		limits.MaxAttachments = 16
	}
	if limits.MaxAttachmentBytes <= 0 {
		limits.MaxAttachmentBytes = 10 << 20
	}
	return &Documents{svc: svc, limits: limits}
}

// resolve resolves the request's scope (grpcx.Scope validates the tenant
// and reconciles it with the gateway's metadata).
func resolve(ctx context.Context, s *commonv1.Scope) (document.Scope, error) {
	sc, err := grpcx.Scope(ctx, s)
	if err != nil {
		return document.Scope{}, err
	}
	return document.Scope{Tenant: sc.GetTenantId(), Project: sc.GetProjectId()}, nil
}

// IngestDocument validates and ingests a document.
func (d *Documents) IngestDocument(ctx context.Context, req *indexerv1.IngestDocumentRequest) (*indexerv1.IngestDocumentResponse, error) {
	sc, err := resolve(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	// The contract's rules (source_type, raw_content required, title and
	// URL lengths) ran before this handler; what follows depends on
	// configuration or content.
	switch {
	case strings.TrimSpace(req.GetRawContent()) == "":
		return nil, grpcx.InvalidArgument("raw_content", "is required")
	case len(req.GetRawContent()) > d.limits.MaxContentBytes:
		return nil, grpcx.InvalidArgument("raw_content", "is %d bytes; the limit is %d", len(req.GetRawContent()), d.limits.MaxContentBytes)
	case len(req.GetAttachments()) > d.limits.MaxAttachments:
		return nil, grpcx.InvalidArgument("attachments", "at most %d attachments", d.limits.MaxAttachments)
	}
	if u := req.GetSourceUrl(); u != "" {
		parsed, err := url.Parse(u)
		if err != nil || parsed.Scheme == "" || strings.ContainsAny(u, " \t\n") {
			return nil, grpcx.InvalidArgument("source_url", "must be an absolute URL (scheme://...) of at most 4096 bytes")
		}
	}
	if req.GetSourceType() == indexerv1.SourceType_SOURCE_TYPE_EMAIL {
		// A message with a header block must parse as one: a broken .eml
		// is refused rather than indexed as text.
		if _, err := pipeline.ParseEmail(req.GetRawContent()); err != nil && !errors.Is(err, pipeline.ErrNotEmail) {
			return nil, grpcx.InvalidArgument("raw_content", "is not a well-formed e-mail: %v", err)
		}
	}
	in := intake.IngestInput{Scope: sc, SourceType: req.GetSourceType(), SourceURL: req.GetSourceUrl(), Title: strings.TrimSpace(req.GetTitle()), RawContent: req.GetRawContent()}
	for i, a := range req.GetAttachments() {
		field := fmt.Sprintf("attachments[%d]", i)
		switch {
		case a.GetMimeType() == "" || !strings.Contains(a.GetMimeType(), "/"):
			return nil, grpcx.InvalidArgument(field+".mime_type", "is required (type/subtype)")
		case len(a.GetData()) == 0:
			return nil, grpcx.InvalidArgument(field+".data", "is empty")
		case len(a.GetData()) > d.limits.MaxAttachmentBytes:
			return nil, grpcx.InvalidArgument(field+".data", "is %d bytes; the limit is %d", len(a.GetData()), d.limits.MaxAttachmentBytes)
		}
		// The bytes decide what an image is; one declared as a type vision
		// reads must be one.
		if declared := strings.ToLower(strings.TrimSpace(strings.Split(a.GetMimeType(), ";")[0])); visionImageTypes[declared] {
			if img, sniffed := pipeline.SniffImage(a.GetData()); img == "" {
				return nil, grpcx.InvalidArgument(field+".data", "is declared %s but is not a PNG, JPEG, GIF or WEBP image (its bytes are %s)", declared, sniffed)
			}
		}
		// A PDF's too: pdftotext and pdftoppm would read anything else as
		// a broken PDF.
		if declared := strings.ToLower(strings.TrimSpace(strings.Split(a.GetMimeType(), ";")[0])); declared == "application/pdf" {
			if sniffed := http.DetectContentType(a.GetData()); sniffed != "application/pdf" {
				return nil, grpcx.InvalidArgument(field+".data", "is declared application/pdf but is not a PDF (its bytes are %s)", sniffed)
			}
		}
		in.Attachments = append(in.Attachments, intake.Attachment{Name: a.GetName(), MimeType: a.GetMimeType(), Data: a.GetData()})
	}
	res, err := d.svc.Ingest(ctx, in)
	if err != nil {
		return nil, toStatus(err)
	}
	return &indexerv1.IngestDocumentResponse{Document: res.Document.Proto(false), Unchanged: res.Unchanged, ExtractionJobId: res.JobID}, nil
}

// GetDocument returns a document with raw content and extracts.
func (d *Documents) GetDocument(ctx context.Context, req *indexerv1.GetDocumentRequest) (*indexerv1.GetDocumentResponse, error) {
	sc, err := resolve(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	doc, err := d.svc.Docs.GetDocument(ctx, sc, req.GetDocumentId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &indexerv1.GetDocumentResponse{Document: doc.Proto(true)}, nil
}

// ListDocuments lists a scope's documents in id order.
func (d *Documents) ListDocuments(ctx context.Context, req *indexerv1.ListDocumentsRequest) (*indexerv1.ListDocumentsResponse, error) {
	sc, err := resolve(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	size := pageSize(req.GetPageSize())
	lf := docstore.ListFilter{SourceType: req.GetSourceType()}
	if lf.CreatedFrom, lf.CreatedTo, err = grpcx.CreateTimeRange(req.GetCreateTimeFrom(), req.GetCreateTimeTo()); err != nil {
		return nil, err
	}
	hash := grpcx.PageFilter("list", sc.Tenant, sc.Project, req.GetSourceType().String(),
		lf.CreatedFrom.Format(time.RFC3339Nano), lf.CreatedTo.Format(time.RFC3339Nano))
	after, err := decodeToken(req.GetPageToken(), hash)
	if err != nil {
		return nil, err
	}
	docs, err := d.svc.Docs.ListDocuments(ctx, sc, lf, after, size+1)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &indexerv1.ListDocumentsResponse{}
	if len(docs) > size {
		docs = docs[:size]
		resp.NextPageToken = encodeToken(docs[size-1].ID, hash)
	}
	for _, doc := range docs {
		resp.Documents = append(resp.Documents, doc.Proto(false))
	}
	return resp, nil
}

// DeleteDocument removes a document from the store, every index and the
// graph.
func (d *Documents) DeleteDocument(ctx context.Context, req *indexerv1.DeleteDocumentRequest) (*indexerv1.DeleteDocumentResponse, error) {
	sc, err := resolve(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	if err := d.svc.Delete(ctx, sc, req.GetDocumentId()); err != nil {
		return nil, toStatus(err)
	}
	return &indexerv1.DeleteDocumentResponse{}, nil
}

// FindDocumentsByExtract finds documents with an extract of a type whose
// fields equal the filter (case-insensitively for text, numerically for
// numbers), all in the same extract.
func (d *Documents) FindDocumentsByExtract(ctx context.Context, req *indexerv1.FindDocumentsByExtractRequest) (*indexerv1.FindDocumentsByExtractResponse, error) {
	sc, err := resolve(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	typ := strings.TrimSpace(req.GetExtractType())
	if typ == "" {
		return nil, grpcx.InvalidArgument("extract_type", "is required, e.g. \"financial\"")
	}
	keys := make([]string, 0, len(req.GetFieldEquals()))
	for k := range req.GetFieldEquals() {
		if strings.TrimSpace(k) == "" {
			return nil, grpcx.InvalidArgument("field_equals", "field names must not be empty")
		}
		keys = append(keys, k+"="+req.GetFieldEquals()[k])
	}
	sort.Strings(keys)
	size := pageSize(req.GetPageSize())
	hash := grpcx.PageFilter(append([]string{"extract", sc.Tenant, sc.Project, typ}, keys...)...)
	after, err := decodeToken(req.GetPageToken(), hash)
	if err != nil {
		return nil, err
	}
	docs, more, err := d.svc.FindByExtract(ctx, sc, typ, req.GetFieldEquals(), after, size)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &indexerv1.FindDocumentsByExtractResponse{}
	for _, doc := range docs {
		resp.Documents = append(resp.Documents, doc.Proto(false))
	}
	if more && len(docs) > 0 {
		resp.NextPageToken = encodeToken(docs[len(docs)-1].ID, hash)
	}
	return resp, nil
}

// RebuildIndexes rebuilds a scope's search indexes from the store, or
// every scope's when the request names no tenant and the caller is not
// scoped to one by the gateway.
func (d *Documents) RebuildIndexes(ctx context.Context, req *indexerv1.RebuildIndexesRequest) (*indexerv1.RebuildIndexesResponse, error) {
	var target *document.Scope
	md, _ := metadata.FromIncomingContext(ctx)
	if req.GetScope().GetTenantId() != "" || len(md.Get(grpcx.TenantMetadataKey)) > 0 {
		sc, err := resolve(ctx, req.GetScope())
		if err != nil {
			return nil, err
		}
		target = &sc
	}
	st, err := d.svc.Rebuild(ctx, target)
	if err != nil {
		return nil, toStatus(err)
	}
	return &indexerv1.RebuildIndexesResponse{Documents: st.Documents, Chunks: st.Chunks}, nil
}

// GetExtractionJob returns an extraction job with each extractor's outcome.
func (d *Documents) GetExtractionJob(ctx context.Context, req *indexerv1.GetExtractionJobRequest) (*indexerv1.GetExtractionJobResponse, error) {
	sc, err := resolve(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	j, err := d.svc.GetJob(ctx, sc, req.GetJobId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &indexerv1.GetExtractionJobResponse{Job: j.Proto()}, nil
}

// WatchIntake streams the intake.* events of a document's current intake
// and ends after its finished event.
func (d *Documents) WatchIntake(req *indexerv1.WatchIntakeRequest, stream indexerv1.DocumentService_WatchIntakeServer) error {
	ctx := stream.Context()
	sc, err := resolve(ctx, req.GetScope())
	if err != nil {
		return err
	}
	ids, err := d.svc.Events.EventIDs(ctx)
	if err != nil {
		return toStatus(err)
	}
	after := ids.Seq(req.GetAfterSequence())
	if after > 0 && d.svc.Events != nil {
		last, err := d.svc.Events.LastSequence(ctx, events.StreamEvents)
		if err != nil {
			return toStatus(err)
		}
		if after > last {
			// The stream's newest id is not named: it counts every tenant's
			// events.
			return grpcx.InvalidArgument("after_sequence", "%d is beyond the events: it is no event id of this watch", req.GetAfterSequence())
		}
	}
	err = d.svc.Watch(ctx, sc, req.GetDocumentId(), after, func(seq uint64, name string, ev *indexerv1.IntakePhaseEvent) error {
		return stream.Send(&indexerv1.WatchIntakeResponse{Sequence: ids.ID(seq), Name: name, Event: ev})
	})
	return toStatus(err)
}
