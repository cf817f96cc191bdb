package httpgateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

// TestSingleValuedQueryParameterGivenTwice: a query parameter of a field
// that is not repeated, given twice (under one name or its JSON and proto
// spellings), is a 400 naming it as the request wrote it, with a
// fieldViolations detail, like the gateway's other 400s; a repeated field
// takes several values.
func TestSingleValuedQueryParameterGivenTwice(t *testing.T) {
	t.Parallel()
	g := &graphFake{keys: make(chan string, 8)}
	m := startMesh(t, httpgateway.Config{}, fakes{graph: g, conversations: &conversationFake{
		list: func(context.Context, *orchestratorv1.ListConversationsRequest) (*orchestratorv1.ListConversationsResponse, error) {
			return &orchestratorv1.ListConversationsResponse{}, nil
		},
	}})
	for _, tc := range []struct {
		path, field, message string
	}{
		{"/v1/documents?scope.projectId=alpha&scope.projectId=beta", "scope.projectId", "scope.projectId: takes one value, got 2"},
		{"/v1/conversations?scope.project_id=alpha&scope.project_id=beta&pageSize=1", "scope.project_id", "scope.project_id: takes one value, got 2"},
		{"/v1/conversations?pageSize=1&page_size=2", "pageSize", "pageSize: takes one value, got 2 (as pageSize and page_size)"},
		// A repeated parameter's values are each checked: the graph has
		// two edge types, and a third matched nothing before.
		{"/v1/graph/neighbors?key=doc:abc&edgeTypes=MENTIONS&edgeTypes=CITES", "edgeTypes", `edgeTypes: "CITES" is not one of PART_OF, MENTIONS`},
	} {
		resp, body := do(t, http.MethodGet, m.url+tc.path, "", nil)
		var got struct {
			Code    int
			Message string
			Details []struct {
				Type            string `json:"@type"`
				FieldViolations []struct{ Field, Description string }
			}
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("GET %s: %d %s", tc.path, resp.StatusCode, body)
		}
		if resp.StatusCode != http.StatusBadRequest || got.Code != 3 || got.Message != tc.message ||
			len(got.Details) != 1 || len(got.Details[0].FieldViolations) != 1 || got.Details[0].FieldViolations[0].Field != tc.field {
			t.Errorf("GET %s: %d %s; want 400 %q with a field violation on %s", tc.path, resp.StatusCode, body, tc.message, tc.field)
		}
	}

	resp, body := do(t, http.MethodGet, m.url+"/v1/graph/neighbors?key=doc:abc&edgeTypes=MENTIONS&edgeTypes=PART_OF", "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("repeated field: %d %s", resp.StatusCode, body)
	}
	if key := <-g.keys; key != "doc:abc" {
		t.Errorf("reached the service with key %q", key)
	}
}
