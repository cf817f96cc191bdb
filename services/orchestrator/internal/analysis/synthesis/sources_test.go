package synthesis_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/synthesis"
)

// outcomes: a price call with data, a search that returned two documents,
// a financials call that failed and one that returned nothing.
var outcomes = []synthesis.Outcome{
	{Tool: "get_stock_price", Title: `get_stock_price {ticker: "BHP"}`, Status: "complete", Data: json.RawMessage(`{"price":45.1}`)},
	{Tool: "search_documents", Title: `search_documents {query: "BHP guidance"}`, Status: "complete",
		Data: json.RawMessage(`{"hits":[{"document_id":"doc-7","title":"FY24 report","text":"..."},{"document_id":"doc-9","text":"..."}]}`)},
	{Tool: "get_financials", Title: `get_financials {ticker: "BHP"}`, Status: "failed", Error: "market data returned HTTP 503"},
	{Tool: "get_document_extracts", Title: `get_document_extracts {document_id: "doc-404"}`, Status: "complete", Data: json.RawMessage(`null`)},
}

func TestCheckSources(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		source any
		reason string // "" = supported; else a part of unsupported_reason
	}{
		{"tool name", "get_stock_price", ""},
		{"call title", `get_stock_price {ticker: "BHP"}`, ""},
		{"surrounding spaces", "  get_stock_price ", ""},
		{"document id from a search hit", "doc-9", ""},
		{"list of sources", []any{"get_stock_price", "doc-7"}, ""},
		{"invented", "Bloomberg terminal", `"Bloomberg terminal" is not a tool that returned data`},
		{"tool that failed", "get_financials", "HTTP 503"},
		{"call that returned nothing", `get_document_extracts {document_id: "doc-404"}`, "returned no data"},
		{"document id never returned", "doc-404", "is not a tool that returned data"},
		{"tool never called", "get_weather", "tools with data: get_stock_price, search_documents"},
		{"other case", "GET_STOCK_PRICE", "is not a tool"},
		{"empty", "", "no source given"},
		{"null", nil, "no source given"},
		{"list with an invented one", []any{"get_stock_price", "my memory"}, `"my memory"`},
		{"not a name", 42.0, "is not a name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The claim sits deep in a custom shape; the model marked it
			// supported itself, which must not stick.
			claim := map[string]any{"text": "x", "source": tc.source, "supported": true, "unsupported_reason": "model's own"}
			answer := map[string]any{"sections": []any{map[string]any{"claims": []any{claim}}}}
			checked, unsupported := synthesis.CheckSources(answer, outcomes)
			if checked != 1 {
				t.Fatalf("checked %d claims, want 1", checked)
			}
			reason, hasReason := claim["unsupported_reason"].(string)
			if tc.reason == "" {
				if claim["supported"] != true || hasReason || unsupported != 0 {
					t.Errorf("claim %v, want supported without a reason", claim)
				}
				return
			}
			if claim["supported"] != false || !strings.Contains(reason, tc.reason) || unsupported != 1 {
				t.Errorf("claim %v, want unsupported with a reason containing %q", claim, tc.reason)
			}
		})
	}
}

func TestCheckSourcesWithoutClaims(t *testing.T) {
	t.Parallel()
	answer := map[string]any{"summary": "s", "items": []any{map[string]any{"name": "n"}}}
	if checked, _ := synthesis.CheckSources(answer, outcomes); checked != 0 {
		t.Errorf("checked %d claims in an answer without sources", checked)
	}
	if _, ok := answer["supported"]; ok {
		t.Errorf("answer marked: %v", answer)
	}
}

// TestPromptCarriesBoundedToolData: 20 tool results of ~200 KB each (each
// under a job's 512 KiB cap) make a prompt of about MaxPromptDataBytes,
// not 4 MB: results past what is left are cut, saying so, and every
// result keeps its heading.
func TestPromptCarriesBoundedToolData(t *testing.T) {
	t.Parallel()
	var outs []synthesis.Outcome
	for i := range 20 {
		data, _ := json.Marshal(map[string]string{"filler": strings.Repeat("x", 200_000)})
		outs = append(outs, synthesis.Outcome{Tool: "get_stock_price", Title: "price " + string(rune('A'+i)), Status: "complete", Data: data})
	}
	p := synthesis.Prompt("q", outs, nil)
	if len(p) > synthesis.MaxPromptDataBytes+64<<10 {
		t.Errorf("prompt of %d bytes, want about %d", len(p), synthesis.MaxPromptDataBytes)
	}
	if !strings.Contains(p, "[cut: ") || !strings.Contains(p, "### price T") {
		t.Errorf("the prompt does not say what was cut, or lost a heading")
	}
}
