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

// TestMergeAddsHandWrittenRoutes: a fragment's route joins the generated
// document after its paths, and cannot replace a generated operation or
// definition; the served document holds the upload route.
func TestMergeAddsHandWrittenRoutes(t *testing.T) {
	t.Parallel()
	spec := []byte(`{"swagger":"2.0","paths":{"/v1/documents":{"post":{"operationId":"DocumentService_IngestDocument"}}},"definitions":{"v1Doc":{"type":"object"}}}`)
	upload := []byte(`{"paths":{"/v1/documents:upload":{"post":{"operationId":"UploadDocument","consumes":["multipart/form-data"]}}}}`)
	for _, tc := range []struct {
		name      string
		fragments [][]byte
		want      string // the merged document, or
		err       string // what the error says
	}{
		{name: "a new route", fragments: [][]byte{upload},
			want: `{"swagger":"2.0","paths":{"/v1/documents":{"post":{"operationId":"DocumentService_IngestDocument"}},"/v1/documents:upload":{"post":{"operationId":"UploadDocument","consumes":["multipart/form-data"]}}},"definitions":{"v1Doc":{"type":"object"}}}`},
		{name: "merged twice", fragments: [][]byte{upload, upload},
			want: `{"swagger":"2.0","paths":{"/v1/documents":{"post":{"operationId":"DocumentService_IngestDocument"}},"/v1/documents:upload":{"post":{"operationId":"UploadDocument","consumes":["multipart/form-data"]}}},"definitions":{"v1Doc":{"type":"object"}}}`},
		{name: "another method of a generated path", fragments: [][]byte{[]byte(`{"paths":{"/v1/documents":{"put":{"operationId":"Replace"}}}}`)},
			want: `{"swagger":"2.0","paths":{"/v1/documents":{"post":{"operationId":"DocumentService_IngestDocument"},"put":{"operationId":"Replace"}}},"definitions":{"v1Doc":{"type":"object"}}}`},
		{name: "a generated operation replaced", fragments: [][]byte{[]byte(`{"paths":{"/v1/documents":{"post":{"operationId":"Mine"}}}}`)},
			err: "POST /v1/documents is generated already"},
		{name: "a generated definition replaced", fragments: [][]byte{[]byte(`{"definitions":{"v1Doc":{"type":"string"}}}`)},
			err: `definition "v1Doc" is generated already`},
		{name: "more than paths and definitions", fragments: [][]byte{[]byte(`{"info":{"title":"mine"}}`)},
			err: "a fragment holds only paths and definitions"},
		{name: "not JSON", fragments: [][]byte{[]byte(`{"paths":`)}, err: "fragment 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := openapirules.Merge(spec, tc.fragments...)
			if tc.err != "" {
				if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.err)) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var a, b any
			if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(tc.want), &b) != nil {
				t.Fatalf("not JSON: %s", got)
			}
			if ga, _ := json.Marshal(a); string(ga) != string(mustCompact(t, tc.want)) || !bytes.Contains(got, []byte("\n  \"paths\"")) {
				t.Errorf("merged\n%s\nwant\n%s", got, tc.want)
			}
			// Key order is kept: the fragment's path comes after the generated one.
			if i, j := bytes.Index(got, []byte(`"/v1/documents"`)), bytes.Index(got, []byte(`"/v1/documents:upload"`)); j >= 0 && j < i {
				t.Errorf("the fragment's path comes first:\n%s", got)
			}
		})
	}

	var served struct {
		Paths map[string]map[string]struct {
			OperationID string   `json:"operationId"`
			Consumes    []string `json:"consumes"`
			Parameters  []struct {
				Name, In, Type string
			} `json:"parameters"`
			Responses map[string]any `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(openapi.Spec, &served); err != nil {
		t.Fatal(err)
	}
	op, ok := served.Paths["/v1/documents:upload"]["post"]
	if !ok || len(op.Consumes) != 1 || op.Consumes[0] != "multipart/form-data" || op.Responses["413"] == nil {
		t.Fatalf("served upload route %+v: want POST, multipart/form-data, a 413: run make generate", op)
	}
	if p := op.Parameters; len(p) == 0 || p[0].Name != "file" || p[0].In != "formData" || p[0].Type != "file" {
		t.Errorf("upload parameters %+v: want a file part first", p)
	}
}

func mustCompact(t *testing.T, s string) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	return b
}
