package jobservice_test

import (
	"strings"
	"testing"
	"time"

	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

// claimAt returns the object at path (keys and indexes) in v.
func claimAt(t *testing.T, v any, path ...any) map[string]any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			s, _ := v.([]any)
			if k >= len(s) {
				t.Fatalf("no element %d at %v in %s", k, path, mustJSON(v))
			}
			v = s[k]
		}
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("no object at %v", path)
	}
	return m
}

// wantSupported checks the mark code put on a claim of the stored result.
func wantSupported(t *testing.T, claim map[string]any, supported bool, reason string) {
	t.Helper()
	got, _ := claim["unsupported_reason"].(string)
	if claim["supported"] != supported || !strings.Contains(got, reason) || (supported && got != "") {
		t.Errorf("claim %s: want supported %v with reason containing %q", mustJSON(claim), supported, reason)
	}
}

// A synthesis model that invents a source, cites a tool that failed, and
// writes its own data_sources: the stored result keeps every finding, marks
// the unsupported ones with the reason, and carries the data_sources and
// data_gaps our code computed.
func TestInventedFindingSourcesAreMarkedUnsupported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.scriptBHPPlan()
	e.market.set(func(m *market) { m.status["/v1/financials"] = 503 })
	e.scriptSynthesis(map[string]any{
		"summary": "BHP trades at 45.10 AUD; analysts rate it a strong buy.",
		"findings": []any{
			map[string]any{"statement": "BHP trades at 45.10 AUD.", "source": "get_stock_price"},
			map[string]any{"statement": "Analysts rate BHP a strong buy.", "source": "Bloomberg terminal", "supported": true},
			map[string]any{"statement": "BHP's P/E is 11.2.", "source": "get_financials"},
		},
		"data_sources": []any{"get_stock_price", "Bloomberg terminal"},
	})
	e.start(analysis.Hooks{})

	root := e.submit("Analyse BHP for investment", "generic_analysis")
	final := e.waitStatus(root.GetId(), complete, 20*time.Second)
	out := outputMap(final)
	wantSupported(t, claimAt(t, out, "findings", 0), true, "")
	wantSupported(t, claimAt(t, out, "findings", 1), false, `"Bloomberg terminal" is not a tool that returned data`)
	wantSupported(t, claimAt(t, out, "findings", 2), false, "HTTP 503")
	if mustJSON(out["data_sources"]) != `["get_stock_price"]` || len(out["data_gaps"].([]any)) != 1 {
		t.Errorf("data_sources %v data_gaps %v", out["data_sources"], out["data_gaps"])
	}
	// The synthesis job holds the same result.
	if synth := childrenOf(final, typeSynthesis); len(synth) != 1 || mustJSON(outputMap(synth[0])) != mustJSON(out) {
		t.Errorf("synthesis job output differs from the analysis result")
	}
}

// customClaims is a caller's closed schema with no data_sources or
// data_gaps, whose sourced claims sit two levels down.
const customClaims = `{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "headline": {"type": "string"},
    "sections": {"type": "array", "items": {
      "type": "object", "additionalProperties": false,
      "properties": {"claims": {"type": "array", "items": {
        "type": "object", "additionalProperties": false,
        "properties": {"text": {"type": "string"}, "source": {"type": "string"}},
        "required": ["text", "source"]
      }}},
      "required": ["claims"]
    }}
  },
  "required": ["headline", "sections"]
}`

// A caller-supplied schema without data_sources and data_gaps still gets
// them, in the schema the model is sent and in the stored result (the
// model's own values replaced), and its nested claims are checked.
func TestCustomSchemaGetsDataSourcesAndCheckedClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.scriptBHPPlan()
	synth := e.scriptSynthesis(map[string]any{
		"headline": "BHP at 45.10 AUD",
		"sections": []any{map[string]any{"claims": []any{
			map[string]any{"text": "BHP trades at 45.10 AUD.", "source": `get_stock_price {ticker: "BHP"}`},
			map[string]any{"text": "Iron ore output rose 8%.", "source": "annual report 2023"},
		}}},
		"data_sources": []any{"annual report 2023"},
	})
	e.start(analysis.Hooks{})

	resp, err := e.client.SubmitAnalysis(e.ctx(10*time.Second), &orchestratorv1.SubmitAnalysisRequest{
		Scope: e.scope, Query: "Analyse BHP for investment", OutputJsonSchema: customClaims,
	})
	if err != nil {
		t.Fatal(err)
	}
	final := e.waitStatus(resp.GetJob().GetId(), complete, 20*time.Second)
	out := outputMap(final)
	if mustJSON(out["data_sources"]) != `["get_stock_price","get_financials"]` || mustJSON(out["data_gaps"]) != `[]` {
		t.Errorf("data_sources %v data_gaps %v", out["data_sources"], out["data_gaps"])
	}
	wantSupported(t, claimAt(t, out, "sections", 0, "claims", 0), true, "")
	wantSupported(t, claimAt(t, out, "sections", 0, "claims", 1), false, `"annual report 2023"`)

	// The model was sent a schema declaring the service's fields.
	if synth.Hits() != 1 {
		t.Fatalf("synthesis calls %d", synth.Hits())
	}
	var sent map[string]any
	for _, r := range e.sim.ChatRequests() {
		if r.Rule == "synthesis" {
			sent = r.Schema
		}
	}
	props, _ := sent["properties"].(map[string]any)
	claim := claimAt(t, sent, "properties", "sections", "items", "properties", "claims", "items", "properties")
	if props["data_sources"] == nil || props["data_gaps"] == nil || claim["supported"] == nil || claim["unsupported_reason"] == nil {
		t.Errorf("schema sent to the model: %s", mustJSON(sent))
	}
}
