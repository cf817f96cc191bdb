// Package retrieval searches the indexer's knowledge base for the chat loop:
// the initial search whose hits become a system message, and the built-in
// rag_search tool the model calls for more.
package retrieval

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

// Options tune a Searcher.
type Options struct {
	// Limit is the number of hits of the initial search and the default of
	// rag_search; 0 means 5.
	Limit int
	// Timeout bounds one search; 0 means 5 s.
	Timeout time.Duration
}

// Searcher queries the indexer's SearchService. It is safe for concurrent
// use.
type Searcher struct {
	client indexerv1.SearchServiceClient
	opts   Options
}

// New returns a Searcher over client.
func New(client indexerv1.SearchServiceClient, opts Options) *Searcher {
	if opts.Limit <= 0 {
		opts.Limit = 5
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	return &Searcher{client: client, opts: opts}
}

// Search returns the best hits for query in scope, best first; limit <= 0
// means the configured default. Errors carry the indexer's gRPC status.
func (s *Searcher) Search(ctx context.Context, scope *commonv1.Scope, query string, limit int) ([]*indexerv1.SearchHit, error) {
	if limit <= 0 {
		limit = s.opts.Limit
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	resp, err := s.client.Search(ctx, &indexerv1.SearchRequest{Scope: scope, Query: query, Limit: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("indexer search: %s", describe(err))
	}
	return resp.GetHits(), nil
}

// describe renders a gRPC error as "CODE: message".
func describe(err error) string {
	if st, ok := status.FromError(err); ok {
		return fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
	return err.Error()
}

// ContextMessage renders hits as the system message that opens a turn.
func ContextMessage(hits []*indexerv1.SearchHit) string {
	var b strings.Builder
	b.WriteString("Context retrieved from the knowledge base for the user's latest message. ")
	b.WriteString("Use it where it is relevant and cite sources by their number. ")
	b.WriteString("If it does not answer the question, search again with rag_search or say what is missing.\n")
	writeHits(&b, hits)
	return b.String()
}

// passageTextLimit caps a passage's text in a turn's events (in runes);
// the model is given the whole text.
const passageTextLimit = 1000

// Passages describes hits for the turn's events, numbered as in
// [ContextMessage].
func Passages(hits []*indexerv1.SearchHit) []*orchestratorv1.RetrievedPassage {
	out := make([]*orchestratorv1.RetrievedPassage, len(hits))
	for i, h := range hits {
		text := strings.TrimSpace(h.GetText())
		if r := []rune(text); len(r) > passageTextLimit {
			text = string(r[:passageTextLimit]) + "…"
		}
		out[i] = &orchestratorv1.RetrievedPassage{
			DocumentId: h.GetDocumentId(), ChunkId: h.GetChunkId(), Title: h.GetTitle(),
			SourceUrl: h.GetSourceUrl(), Score: h.GetScore(), Text: text,
		}
	}
	return out
}

func writeHits(b *strings.Builder, hits []*indexerv1.SearchHit) {
	for i, h := range hits {
		fmt.Fprintf(b, "\n[%d] %s", i+1, h.GetTitle())
		if h.GetSourceUrl() != "" {
			fmt.Fprintf(b, " (%s)", h.GetSourceUrl())
		}
		fmt.Fprintf(b, " document=%s chunk=%s score=%.3f\n%s\n", h.GetDocumentId(), h.GetChunkId(), h.GetScore(), strings.TrimSpace(h.GetText()))
	}
}

// ToolName is the name of the built-in search tool.
const ToolName = "rag_search"

// Tool returns the rag_search tool, searching with s.
func (s *Searcher) Tool() tools.Tool { return ragSearch{s: s} }

type ragSearch struct{ s *Searcher }

var _ tools.Tool = ragSearch{}

// Name implements tools.Tool.
func (ragSearch) Name() string { return ToolName }

// Description implements tools.Tool.
func (ragSearch) Description() string {
	return "Search the knowledge base (indexed documents) for passages relevant to a query. " +
		"Use it when the answer depends on facts from the documents and the context you have does not contain them."
}

// Schema implements tools.Tool.
func (ragSearch) Schema() string {
	return `{
  "type": "object",
  "properties": {
    "query": {"type": "string", "minLength": 1, "description": "What to search for, in natural language or keywords."},
    "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "How many passages to return (default 5)."}
  },
  "required": ["query"],
  "additionalProperties": false
}`
}

// Execute implements tools.Tool: one indexer search in the call's scope.
func (t ragSearch) Execute(ctx context.Context, call tools.Call) (string, error) {
	var args struct {
		Query string `json:"query"`
		Limit int    `json:"limit"`
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil {
		return "", err
	}
	hits, err := t.s.Search(ctx, call.Scope, args.Query, args.Limit)
	if err != nil {
		return "", err
	}
	if len(hits) == 0 {
		return fmt.Sprintf("No passages found for %q.", args.Query), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d passages for %q:\n", len(hits), args.Query)
	writeHits(&b, hits)
	return b.String(), nil
}
