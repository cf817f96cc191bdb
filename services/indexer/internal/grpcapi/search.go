package grpcapi

import (
	"context"
	"strings"

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
	// The contract bounds the query's length, the limit (0 to 100) and the
	// enums before this handler runs.
	q := strings.TrimSpace(req.GetQuery())
	if q == "" {
		return nil, grpcx.InvalidArgument("query", "is required")
	}
	mode := modes[req.GetMode()]
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = 10
	}
	var f *hybrid.Filter
	if len(req.GetSourceTypes())+len(req.GetContentTypes())+len(req.GetDocumentIds()) > 0 {
		f = &hybrid.Filter{ContentTypes: req.GetContentTypes(), Docs: req.GetDocumentIds()}
		for _, t := range req.GetSourceTypes() {
			f.SourceTypes = append(f.SourceTypes, int32(t))
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
