package mcpserver

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
)

// maxHitText bounds the text of one hit, so a search stays readable.
const maxHitText = 2000

// SearchInput is search_documents' arguments.
type SearchInput struct {
	Query string `json:"query" jsonschema:"what to search for, in plain words"`
	Limit int32  `json:"limit,omitempty" jsonschema:"passages to return, 1 to 50; default 10"`
}

// Hit is one passage found.
type Hit struct {
	DocumentID string  `json:"document_id"`
	Title      string  `json:"title,omitempty"`
	SourceURL  string  `json:"source_url,omitempty"`
	Text       string  `json:"text"`
	Score      float64 `json:"score"`
}

// SearchOutput is search_documents' result.
type SearchOutput struct {
	Hits []Hit `json:"hits"`
}

// ExtractsInput is get_document_extracts' arguments.
type ExtractsInput struct {
	DocumentID  string            `json:"document_id,omitempty" jsonschema:"return the extracts of this document"`
	ExtractType string            `json:"extract_type,omitempty" jsonschema:"or: extracts of this type across documents, e.g. financial, meeting, technical"`
	FieldEquals map[string]string `json:"field_equals,omitempty" jsonschema:"with extract_type: exact matches on extract fields, e.g. {\"ticker\": \"BHP\"}"`
}

// Extract is one structured extract made at ingestion.
type Extract struct {
	DocumentID string         `json:"document_id"`
	Title      string         `json:"title,omitempty"`
	SourceURL  string         `json:"source_url,omitempty"`
	Type       string         `json:"type"`
	Data       map[string]any `json:"data"`
	Confidence float64        `json:"confidence"`
}

// ExtractsOutput is get_document_extracts' result.
type ExtractsOutput struct {
	Extracts []Extract `json:"extracts"`
}

func (t *tools) addDocumentTools(s *mcp.Server) {
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)}
	mcp.AddTool(s, &mcp.Tool{
		Name:        "search_documents",
		Title:       "Search documents",
		Description: "Search the organisation's indexed documents (hybrid keyword and semantic search). Returns the best matching passages with their document id, title and source URL.",
		Annotations: readOnly,
	}, t.searchDocuments)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "get_document_extracts",
		Title:       "Get document extracts",
		Description: "Get structured data extracted from documents at ingestion time (e.g. type \"financial\" with ticker, revenue, EPS; \"meeting\" with decisions and action items). Name a document_id, or an extract_type with optional field filters.",
		Annotations: readOnly,
	}, t.documentExtracts)
}

func (t *tools) searchDocuments(ctx context.Context, _ *mcp.CallToolRequest, in SearchInput) (*mcp.CallToolResult, SearchOutput, error) {
	if err := required("query", in.Query); err != nil {
		return nil, SearchOutput{}, err
	}
	if in.Limit < 0 || in.Limit > 50 {
		return nil, SearchOutput{}, fmt.Errorf("limit must be 1 to 50, not %d", in.Limit)
	}
	if in.Limit == 0 {
		in.Limit = 10
	}
	ctx, scope, err := t.callScope(ctx)
	if err != nil {
		return nil, SearchOutput{}, err
	}
	resp, err := t.search.Search(ctx, &indexerv1.SearchRequest{Scope: scope, Query: in.Query, Limit: in.Limit})
	if err != nil {
		return nil, SearchOutput{}, serviceError("search", err)
	}
	out := SearchOutput{Hits: []Hit{}}
	for _, h := range resp.GetHits() {
		text := h.GetText()
		if r := []rune(text); len(r) > maxHitText {
			text = string(r[:maxHitText]) + "…"
		}
		out.Hits = append(out.Hits, Hit{DocumentID: h.GetDocumentId(), Title: h.GetTitle(), SourceURL: h.GetSourceUrl(), Text: text, Score: h.GetScore()})
	}
	return nil, out, nil
}

func (t *tools) documentExtracts(ctx context.Context, _ *mcp.CallToolRequest, in ExtractsInput) (*mcp.CallToolResult, ExtractsOutput, error) {
	if (in.DocumentID == "") == (in.ExtractType == "") {
		return nil, ExtractsOutput{}, fmt.Errorf("give exactly one of document_id and extract_type")
	}
	ctx, scope, err := t.callScope(ctx)
	if err != nil {
		return nil, ExtractsOutput{}, err
	}
	var docs []*indexerv1.Document
	if in.DocumentID != "" {
		resp, err := t.docs.GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: scope, DocumentId: in.DocumentID})
		if err != nil {
			return nil, ExtractsOutput{}, serviceError("get document", err)
		}
		docs = append(docs, resp.GetDocument())
	} else {
		resp, err := t.docs.FindDocumentsByExtract(ctx, &indexerv1.FindDocumentsByExtractRequest{
			Scope: scope, ExtractType: in.ExtractType, FieldEquals: in.FieldEquals, PageSize: 20,
		})
		if err != nil {
			return nil, ExtractsOutput{}, serviceError("find documents by extract", err)
		}
		docs = resp.GetDocuments()
	}
	out := ExtractsOutput{Extracts: []Extract{}}
	for _, d := range docs {
		for _, x := range d.GetExtracts() {
			if in.ExtractType != "" && x.GetType() != in.ExtractType {
				continue
			}
			data := x.GetData().AsMap()
			if data == nil {
				data = map[string]any{}
			}
			if !fieldsMatch(data, in.FieldEquals) {
				continue
			}
			out.Extracts = append(out.Extracts, Extract{
				DocumentID: d.GetId(), Title: d.GetTitle(), SourceURL: d.GetSourceUrl(),
				Type: x.GetType(), Data: data, Confidence: x.GetConfidence(),
			})
		}
	}
	return nil, out, nil
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
