package grpcapi

import (
	"context"
	"strings"
	"unicode/utf8"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intake"
)

// Search implements SearchService.
type Search struct {
	indexerv1.UnimplementedSearchServiceServer
	svc *intake.Service
}

var _ indexerv1.SearchServiceServer = (*Search)(nil)

// NewSearch returns the SearchService server.
func NewSearch(svc *intake.Service) *Search { return &Search{svc: svc} }

var modes = map[indexerv1.SearchMode]hybrid.Mode{
	indexerv1.SearchMode_SEARCH_MODE_UNSPECIFIED: hybrid.ModeHybrid,
	indexerv1.SearchMode_SEARCH_MODE_HYBRID:      hybrid.ModeHybrid,
	indexerv1.SearchMode_SEARCH_MODE_KEYWORD:     hybrid.ModeKeyword,
	indexerv1.SearchMode_SEARCH_MODE_VECTOR:      hybrid.ModeVector,
}

// Search returns the best chunks of the scope for a query.
func (s *Search) Search(ctx context.Context, req *indexerv1.SearchRequest) (*indexerv1.SearchResponse, error) {
	sc, err := resolve(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	q := strings.TrimSpace(req.GetQuery())
	switch {
	case q == "":
		return nil, grpcx.InvalidArgument("query", "is required")
	case utf8.RuneCountInString(q) > 2000:
		return nil, grpcx.InvalidArgument("query", "must be at most 2000 characters")
	case req.GetLimit() < 0:
		return nil, grpcx.InvalidArgument("limit", "must not be negative")
	}
	mode, ok := modes[req.GetMode()]
	if !ok {
		return nil, grpcx.InvalidArgument("mode", "is not a known search mode")
	}
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = 10
	}
	limit = min(limit, 100)
	var f *hybrid.Filter
	if len(req.GetSourceTypes())+len(req.GetContentTypes())+len(req.GetDocumentIds()) > 0 {
		f = &hybrid.Filter{ContentTypes: req.GetContentTypes(), Docs: req.GetDocumentIds()}
		for _, t := range req.GetSourceTypes() {
			if !validSourceType(t) {
				return nil, grpcx.InvalidArgument("source_types", "%v is not a source type", t)
			}
			f.SourceTypes = append(f.SourceTypes, int32(t))
		}
		for _, id := range req.GetDocumentIds() {
			if id == "" {
				return nil, grpcx.InvalidArgument("document_ids", "must not contain empty ids")
			}
		}
	}
	hits, err := s.svc.Search(ctx, intake.SearchQuery{Scope: sc, Text: q, Limit: limit, Mode: mode, Filter: f})
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &indexerv1.SearchResponse{}
	for _, h := range hits {
		resp.Hits = append(resp.Hits, &indexerv1.SearchHit{
			ChunkId: h.Chunk.ID, DocumentId: h.Chunk.DocID, Title: h.Chunk.Title, SourceUrl: h.Chunk.SourceURL, Text: h.Chunk.Text,
			Score: h.Score, KeywordScore: h.KeywordScore, VectorScore: h.VectorScore,
			SourceType: h.Chunk.SourceType, ContentType: h.Chunk.ContentType,
		})
	}
	return resp, nil
}
