package openapirules_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/agentmesh/agentmesh/gateway/openapi"
	"github.com/agentmesh/agentmesh/gateway/openapi/openapirules"
)

// TestServedDocumentStatesTheContracts: the OpenAPI document the gateway
// serves carries the constraints the protos declare (make generate applied
// them), so clients read the same ranges the services enforce.
func TestServedDocumentStatesTheContracts(t *testing.T) {
	t.Parallel()
	files, err := openapirules.ServiceFiles()
	if err != nil {
		t.Fatal(err)
	}
	again, err := openapirules.Apply(openapi.Spec, files)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, openapi.Spec) {
		t.Fatal("the committed OpenAPI document lacks rules the protos declare: run make generate")
	}
	var doc struct {
		Paths       map[string]map[string]struct{ Parameters []map[string]any }
		Definitions map[string]struct {
			Required   []string
			Properties map[string]map[string]any
		}
	}
	if err := json.Unmarshal(openapi.Spec, &doc); err != nil {
		t.Fatal(err)
	}
	prop := func(def, field, key string) any { return doc.Definitions[def].Properties[field][key] }
	param := func(path, method, name, key string) any {
		for _, p := range doc.Paths[path][method].Parameters {
			if p["name"] == name {
				return p[key]
			}
		}
		return nil
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"temperature maximum", prop("v1GenerationOptions", "temperature", "maximum"), 2.0},
		{"temperature minimum", prop("v1GenerationOptions", "temperature", "minimum"), 0.0},
		{"topP maximum", prop("v1GenerationOptions", "topP", "maximum"), 1.0},
		{"budgetTokens minimum", prop("v1ThinkingOptions", "budgetTokens", "minimum"), 1.0},
		{"effort values", prop("v1ThinkingOptions", "effort", "enum"), []any{"low", "medium", "high"}},
		{"messages minItems", prop("v1ChatRequest", "messages", "minItems"), 1.0},
		{"search limit maximum", prop("v1SearchRequest", "limit", "maximum"), 100.0},
		{"tenant id pattern", prop("v1Scope", "tenantId", "pattern"), `^[!-)+-\-/-=?-~]*$`},
		{"query param pageSize minimum", param("/v1/conversations", "get", "pageSize", "minimum"), 0.0},
		{"query param scope.projectId maxLength", param("/v1/conversations", "get", "scope.projectId", "maxLength"), 128.0},
		{"path param maxLength", param("/v1/conversations/{conversationId}", "get", "conversationId", "maxLength"), 128.0},
		{"graph depth maximum", param("/v1/graph/nodes/{key}/neighbors", "get", "depth", "maximum"), 5.0},
	}
	for _, c := range checks {
		if g, _ := json.Marshal(c.got); string(g) != mustJSON(c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	req := doc.Definitions["v1ChatRequest"].Required
	if len(req) != 1 || req[0] != "model" {
		t.Errorf("v1ChatRequest required = %v, want [model]", req)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
