package schemas

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

const validStock = `{"ticker":"BHP","summary":"BHP trades at 45.10 AUD.",
	"current_price":{"value":45.1,"currency":"AUD","as_of":"2025-03-14T06:00:00Z"},
	"metrics":{"pe_ratio":11.2,"market_cap":2.3e11,"dividend_yield":null},
	"data_sources":["get_stock_price"],"data_gaps":[]}`

func TestStockAnalysisSchema(t *testing.T) {
	t.Parallel()
	out, err := NewRegistry().Get(StockAnalysis)
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Validate(decode(t, validStock)); err != nil {
		t.Fatalf("valid answer rejected: %v", err)
	}
	tests := []struct {
		name    string
		mutate  func(m map[string]any)
		mention string
	}{
		{"summary over 500 chars", func(m map[string]any) { m["summary"] = strings.Repeat("a", 501) }, "/summary"},
		{"as_of not a date-time", func(m map[string]any) { m["current_price"].(map[string]any)["as_of"] = "yesterday" }, "/current_price/as_of"},
		{"price value a string", func(m map[string]any) { m["current_price"].(map[string]any)["value"] = "45" }, "/current_price/value"},
		{"ticker missing", func(m map[string]any) { delete(m, "ticker") }, "ticker"},
		{"unknown field", func(m map[string]any) { m["opinion"] = "buy" }, "opinion"},
		{"metric a string", func(m map[string]any) { m["metrics"].(map[string]any)["pe_ratio"] = "high" }, "/metrics/pe_ratio"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := decode(t, validStock)
			tc.mutate(m)
			err := out.Validate(m)
			var ie *InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("Validate = %v, want *InvalidError", err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
	// Null price and metrics are the honest answer when tools failed.
	m := decode(t, validStock)
	m["current_price"], m["metrics"] = nil, nil
	if err := out.Validate(m); err != nil {
		t.Errorf("null price/metrics rejected: %v", err)
	}
}

func TestModelSchemaDoesNotAskForComputedFields(t *testing.T) {
	t.Parallel()
	out, _ := NewRegistry().Get(StockAnalysis)
	ms := decode(t, out.ModelSchema())
	props := ms["properties"].(map[string]any)
	for _, f := range []string{FieldDataSources, FieldDataGaps} {
		// Declared, so a model that writes them anyway is not rejected, and
		// described as the service's to set; never required.
		if d, _ := props[f].(map[string]any)["description"].(string); !strings.Contains(d, "Set by the service") {
			t.Errorf("model schema's %s: %v", f, props[f])
		}
		for _, r := range ms["required"].([]any) {
			if r == f {
				t.Errorf("model schema requires %s", f)
			}
		}
	}
	if _, ok := props["summary"]; !ok {
		t.Error("model schema lost summary")
	}
	// The full schema requires them.
	full := decode(t, out.FullText())
	for _, f := range []string{FieldDataSources, FieldDataGaps} {
		if !slices.Contains(full["required"].([]any), any(f)) {
			t.Errorf("full schema does not require %s", f)
		}
	}
}

// TestComputedFieldsDeclaredInEverySchema: whatever a caller's schema
// says, the answer may carry data_sources, data_gaps and, beside every
// source at any depth, supported and unsupported_reason.
func TestComputedFieldsDeclaredInEverySchema(t *testing.T) {
	t.Parallel()
	marked := map[string]any{
		"title": "Q1", "source": "get_stock_price", "supported": false, "unsupported_reason": "why",
	}
	for _, tc := range []struct {
		name, schema string
		answer       map[string]any
	}{
		{"closed, without the fields", `{"type":"object","additionalProperties":false,"properties":{"a":{"type":"string"}},"required":["a"]}`,
			map[string]any{"a": "x"}},
		{"declares data_sources as a string", `{"type":"object","additionalProperties":false,"properties":{"data_sources":{"type":"string"},"data_gaps":{"type":"array","minItems":3}}}`,
			map[string]any{}},
		{"claims nested in items", `{"type":"object","additionalProperties":false,"properties":{"sections":{"type":"array","items":{"type":"object","additionalProperties":false,
			"properties":{"claims":{"type":"array","items":{"type":"object","additionalProperties":false,"properties":{"title":{"type":"string"},"source":{"type":"string"}}}}}}}}}`,
			map[string]any{"sections": []any{map[string]any{"claims": []any{marked}}}}},
		{"claims behind $ref", `{"type":"object","additionalProperties":false,"$defs":{"claim":{"type":"object","additionalProperties":false,"properties":{"title":{"type":"string"},"source":{"type":"string"}}}},
			"properties":{"main":{"$ref":"#/$defs/claim"}}}`,
			map[string]any{"main": marked}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := NewOutput(Custom, []byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			a := decode(t, mustJSON(t, tc.answer))
			out.Merge(a, []string{"get_stock_price"}, nil)
			if err := out.Validate(a); err != nil {
				t.Errorf("answer with the computed fields rejected: %v", err)
			}
			delete(a, FieldDataGaps)
			if err := out.Validate(a); err == nil || !strings.Contains(err.Error(), FieldDataGaps) {
				t.Errorf("answer without data_gaps: %v", err)
			}
			if out.Text() != tc.schema {
				t.Error("Text is not the schema as supplied")
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMergeOverridesModel(t *testing.T) {
	t.Parallel()
	out, _ := NewRegistry().Get(StockAnalysis)
	m := decode(t, validStock)
	m["data_sources"] = []any{"my memory"}
	out.Merge(m, []string{"get_stock_price"}, []string{`get_financials {ticker: "BHP"}: failed: HTTP 503`})
	if got := m["data_sources"].([]any); len(got) != 1 || got[0] != "get_stock_price" {
		t.Errorf("data_sources = %v", got)
	}
	if got := m["data_gaps"].([]any); len(got) != 1 || !strings.Contains(got[0].(string), "503") {
		t.Errorf("data_gaps = %v", got)
	}
	if err := out.Validate(m); err != nil {
		t.Errorf("merged answer invalid: %v", err)
	}

	// A closed caller schema that does not declare the fields gets them.
	closed, err := NewOutput(Custom, []byte(`{"type":"object","additionalProperties":false,"properties":{"a":{"type":"string"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	cm := map[string]any{"a": "x", "data_gaps": []any{"x"}}
	closed.Merge(cm, nil, []string{"gap"})
	if g, _ := cm["data_gaps"].([]any); len(g) != 1 || g[0] != "gap" || closed.Validate(cm) != nil {
		t.Errorf("closed schema merge = %v: %v", cm, closed.Validate(cm))
	}
	open, _ := NewOutput(Custom, []byte(`{"type":"object"}`))
	om := map[string]any{}
	open.Merge(om, nil, []string{"gap"})
	if g, ok := om["data_gaps"].([]any); !ok || len(g) != 1 {
		t.Errorf("open schema merge = %v", om)
	}
	if s, ok := om["data_sources"].([]any); !ok || len(s) != 0 {
		t.Errorf("data_sources = %#v, want empty array", om["data_sources"])
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	if o, err := r.Resolve("", ""); err != nil || o.Name() != GenericAnalysis {
		t.Errorf("default = %v, %v", o, err)
	}
	if _, err := r.Resolve("nope", ""); !errors.Is(err, ErrUnknownSchema) {
		t.Errorf("unknown = %v", err)
	}
	if o, err := r.Resolve(StockAnalysis, `{"type":"object","properties":{"x":{"type":"integer"}}}`); err != nil || o.Name() != Custom {
		t.Errorf("custom = %v, %v", o, err)
	}
	for name, bad := range map[string]string{
		"not JSON":      `{"type":`,
		"not an object": `{"type":"array"}`,
		"file ref":      `{"type":"object","properties":{"x":{"$ref":"file:///etc/passwd"}}}`,
		"http ref":      `{"type":"object","properties":{"x":{"$ref":"http://example.com/s.json"}}}`,
		"bad keyword":   `{"type":"object","properties":{"x":{"type":"nonsense"}}}`,
		"too large":     `{"type":"object","description":"` + strings.Repeat("x", MaxSchemaBytes) + `"}`,
	} {
		if _, err := r.Resolve("", bad); !errors.Is(err, ErrInvalidSchema) {
			t.Errorf("%s: Resolve = %v, want ErrInvalidSchema", name, err)
		}
	}
}
