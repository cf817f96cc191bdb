// Package knowledge searches a tenant's knowledge base through the
// indexer's SearchService, for the SQL agent to learn which tables a
// question is about from the documents that name them (a data dictionary,
// a runbook).
package knowledge

import (
	"context"
	"fmt"
	"unicode/utf8"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
)

// maxQueryChars is the longest query SearchRequest takes; a longer
// question is cut, not refused.
const maxQueryChars = 2000

// hitLimit is how many passages one search returns.
const hitLimit = 10

// Search is a session.Knowledge over the indexer. It is safe for
// concurrent use.
type Search struct {
	client indexerv1.SearchServiceClient
}

var _ session.Knowledge = (*Search)(nil)

// New returns a Search through client.
func New(client indexerv1.SearchServiceClient) *Search { return &Search{client: client} }

// Search returns the title and text of the best passages of scope's
// knowledge base for query, best first; the indexer's error, wrapped,
// when the search fails.
func (s *Search) Search(ctx context.Context, scope session.Scope, query string) ([]string, error) {
	if utf8.RuneCountInString(query) > maxQueryChars {
		query = string([]rune(query)[:maxQueryChars])
	}
	resp, err := s.client.Search(ctx, &indexerv1.SearchRequest{
		Scope: &commonv1.Scope{TenantId: scope.TenantID, ProjectId: scope.ProjectID},
		Query: query, Limit: hitLimit,
	})
	if err != nil {
		return nil, fmt.Errorf("knowledge: search: %w", err)
	}
	var out []string
	for _, h := range resp.GetHits() {
		out = append(out, h.GetTitle()+"\n"+h.GetText())
	}
	return out, nil
}
