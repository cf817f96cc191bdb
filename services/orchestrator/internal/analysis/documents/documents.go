// Package documents provides the search_documents and get_document_extracts
// tools through the indexer's contract: SearchService.Search for hybrid
// retrieval, DocumentService.FindDocumentsByExtract and GetDocument for the
// structured extracts made at ingestion time. The tools return structured
// data (hits, extracts), never whole raw documents.
package documents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/tools"
)

// Tool names.
const (
	ToolSearch   = "search_documents"
	ToolExtracts = "get_document_extracts"
)

// maxHitText bounds the text of one hit handed to synthesis.
const maxHitText = 2000

// SearchDefinition is what the planner sees of search_documents.
var SearchDefinition = tools.Definition{
	Name:        ToolSearch,
	Description: "Search the organisation's indexed documents (hybrid keyword and semantic search). Returns the best matching passages with their document id, title and source URL.",
	Parameters: json.RawMessage(`{
		"type": "object",
		"additionalProperties": false,
		"properties": {
			"query": {"type": "string", "minLength": 1, "maxLength": 1000, "description": "What to search for"},
			"limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Passages to return; default 10"}
		},
		"required": ["query"]
	}`),
}

// ExtractsDefinition is what the planner sees of get_document_extracts.
var ExtractsDefinition = tools.Definition{
	Name:        ToolExtracts,
	Description: "Get structured data extracted from documents at ingestion time (e.g. type \"financial\" with ticker, revenue, EPS; \"meeting\" with decisions and action items). Either name a document_id, or an extract_type with optional field filters.",
	Parameters: json.RawMessage(`{
		"type": "object",
		"additionalProperties": false,
		"properties": {
			"document_id": {"type": "string", "minLength": 1, "description": "Return the extracts of this document"},
			"extract_type": {"type": "string", "minLength": 1, "description": "Extract type, e.g. financial, meeting, technical"},
			"field_equals": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Exact matches on extract fields, e.g. {\"ticker\": \"BHP\"}"}
		},
		"anyOf": [{"required": ["document_id"]}, {"required": ["extract_type"]}]
	}`),
}

// Client is the part of the indexer's generated clients the tools use.
type Client interface {
	Search(ctx context.Context, in *indexerv1.SearchRequest, opts ...grpc.CallOption) (*indexerv1.SearchResponse, error)
}

// DocumentClient is the DocumentService part the tools use.
type DocumentClient interface {
	GetDocument(ctx context.Context, in *indexerv1.GetDocumentRequest, opts ...grpc.CallOption) (*indexerv1.GetDocumentResponse, error)
	FindDocumentsByExtract(ctx context.Context, in *indexerv1.FindDocumentsByExtractRequest, opts ...grpc.CallOption) (*indexerv1.FindDocumentsByExtractResponse, error)
}

var (
	_ Client         = (indexerv1.SearchServiceClient)(nil)
	_ DocumentClient = (indexerv1.DocumentServiceClient)(nil)
)

// Register defines both tools in reg with executors calling the indexer.
func Register(reg *tools.Registry, search Client, docs DocumentClient) error {
	if err := reg.Define(SearchDefinition); err != nil {
		return err
	}
	if err := reg.Handle(ToolSearch, tools.ExecutorFunc(func(ctx context.Context, call tools.Call) (tools.Result, error) {
		return runSearch(ctx, search, call)
	})); err != nil {
		return err
	}
	if err := reg.Define(ExtractsDefinition); err != nil {
		return err
	}
	return reg.Handle(ToolExtracts, tools.ExecutorFunc(func(ctx context.Context, call tools.Call) (tools.Result, error) {
		return runExtracts(ctx, docs, call)
	}))
}

// hit is one search result as the tool returns it.
type hit struct {
	DocumentID string  `json:"document_id"`
	Title      string  `json:"title,omitempty"`
	SourceURL  string  `json:"source_url,omitempty"`
	Text       string  `json:"text"`
	Score      float64 `json:"score"`
}

func runSearch(ctx context.Context, c Client, call tools.Call) (tools.Result, error) {
	var args struct {
		Query string `json:"query"`
		Limit int32  `json:"limit"`
	}
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return tools.Result{}, fmt.Errorf("arguments: %w", err)
	}
	if args.Limit == 0 {
		args.Limit = 10
	}
	resp, err := c.Search(ctx, &indexerv1.SearchRequest{Scope: call.Scope, Query: args.Query, Limit: args.Limit})
	if err != nil {
		return tools.Result{}, indexerError("search", err)
	}
	hits := make([]hit, 0, len(resp.GetHits()))
	for _, h := range resp.GetHits() {
		text := h.GetText()
		if r := []rune(text); len(r) > maxHitText {
			text = string(r[:maxHitText]) + "…"
		}
		hits = append(hits, hit{DocumentID: h.GetDocumentId(), Title: h.GetTitle(), SourceURL: h.GetSourceUrl(), Text: text, Score: h.GetScore()})
	}
	if len(hits) == 0 {
		return tools.Result{}, nil
	}
	data, err := json.Marshal(map[string]any{"hits": hits})
	return tools.Result{Data: data}, err
}

// extract is one structured extract as the tool returns it.
type extract struct {
	DocumentID string         `json:"document_id"`
	Title      string         `json:"title,omitempty"`
	SourceURL  string         `json:"source_url,omitempty"`
	Type       string         `json:"type"`
	Data       map[string]any `json:"data"`
	Confidence float64        `json:"confidence"`
}

func runExtracts(ctx context.Context, c DocumentClient, call tools.Call) (tools.Result, error) {
	var args struct {
		DocumentID  string            `json:"document_id"`
		ExtractType string            `json:"extract_type"`
		FieldEquals map[string]string `json:"field_equals"`
	}
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return tools.Result{}, fmt.Errorf("arguments: %w", err)
	}
	var docs []*indexerv1.Document
	if args.DocumentID != "" {
		resp, err := c.GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: call.Scope, DocumentId: args.DocumentID})
		if status.Code(err) == codes.NotFound {
			return tools.Result{}, nil
		}
		if err != nil {
			return tools.Result{}, indexerError("get document", err)
		}
		docs = append(docs, resp.GetDocument())
	} else {
		resp, err := c.FindDocumentsByExtract(ctx, &indexerv1.FindDocumentsByExtractRequest{
			Scope: call.Scope, ExtractType: args.ExtractType, FieldEquals: args.FieldEquals, PageSize: 20,
		})
		if err != nil {
			return tools.Result{}, indexerError("find documents by extract", err)
		}
		docs = resp.GetDocuments()
	}
	var out []extract
	for _, d := range docs {
		for _, x := range d.GetExtracts() {
			if args.ExtractType != "" && x.GetType() != args.ExtractType {
				continue
			}
			if !fieldsMatch(x.GetData().AsMap(), args.FieldEquals) {
				continue
			}
			out = append(out, extract{
				DocumentID: d.GetId(), Title: d.GetTitle(), SourceURL: d.GetSourceUrl(),
				Type: x.GetType(), Data: x.GetData().AsMap(), Confidence: x.GetConfidence(),
			})
		}
	}
	if len(out) == 0 {
		return tools.Result{}, nil
	}
	data, err := json.Marshal(map[string]any{"extracts": out})
	return tools.Result{Data: data}, err
}

// fieldsMatch reports whether data has every field of want with that value
// (compared as text, as the indexer's filter does).
func fieldsMatch(data map[string]any, want map[string]string) bool {
	for k, v := range want {
		if fmt.Sprint(data[k]) != v {
			return false
		}
	}
	return true
}

// indexerError keeps the indexer's status message and says which call failed.
func indexerError(op string, err error) error {
	if st, ok := status.FromError(err); ok {
		return fmt.Errorf("indexer %s: %s: %s", op, st.Code(), st.Message())
	}
	return errors.Join(fmt.Errorf("indexer %s", op), err)
}
