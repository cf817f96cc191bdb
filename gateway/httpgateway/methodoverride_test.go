package httpgateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

// TestMethodOverrideIsRefused: grpc-gateway would let a form-encoded POST
// carrying X-HTTP-Method-Override act as any method (a DELETE, or a GET whose
// parameters skip the unknown-query-parameter check), and a form-encoded POST
// to a GET-only path act as that GET. The gateway documents neither: the
// header is a 400 naming it, whatever the method and body, before any
// service sees the request, and a form POST to a GET-only path is the 405
// any other POST there gets.
func TestMethodOverrideIsRefused(t *testing.T) {
	t.Parallel()
	reached := make(chan string, 16)
	m := startMesh(t, httpgateway.Config{}, fakes{conversations: &conversationFake{
		get: func(_ context.Context, r *orchestratorv1.GetConversationRequest) (*orchestratorv1.GetConversationResponse, error) {
			reached <- "GetConversation"
			return &orchestratorv1.GetConversationResponse{Conversation: &orchestratorv1.Conversation{Id: r.GetConversationId()}}, nil
		},
		list: func(context.Context, *orchestratorv1.ListConversationsRequest) (*orchestratorv1.ListConversationsResponse, error) {
			reached <- "ListConversations"
			return &orchestratorv1.ListConversationsResponse{}, nil
		},
	}})
	const form = "application/x-www-form-urlencoded"
	refused := []struct {
		name, method, path, override, contentType, body string
	}{
		{"POST acting as DELETE", "POST", "/v1/conversations/c1", "DELETE", form, "{}"},
		{"POST acting as GET with a body parameter", "POST", "/v1/jobs", "GET", form, "foo=bar"},
		{"POST acting as GET of a route that exists", "POST", "/v1/conversations", "GET", form, "pageSize=1"},
		{"lower-case override", "POST", "/v1/conversations/c1", "delete", form, ""},
		{"JSON POST", "POST", "/v1/conversations", "GET", "application/json", "{}"},
		{"GET", "GET", "/v1/conversations", "GET", "", ""},
		{"empty value", "POST", "/v1/conversations/c1", "", form, "{}"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(context.Background(), tc.method, m.url+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			req.Header["X-Http-Method-Override"] = []string{tc.override}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got struct {
				Code    int
				Message string
				Details []struct {
					FieldViolations []struct{ Field string } `json:"fieldViolations"`
				}
			}
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatalf("status %d, body not JSON: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != http.StatusBadRequest || got.Code != 3 || !strings.HasPrefix(got.Message, "X-HTTP-Method-Override: ") ||
				len(got.Details) != 1 || len(got.Details[0].FieldViolations) != 1 || got.Details[0].FieldViolations[0].Field != "X-HTTP-Method-Override" {
				t.Errorf("status %d, body %+v; want 400 naming X-HTTP-Method-Override", resp.StatusCode, got)
			}
		})
	}

	t.Run("form POST to a GET-only path", func(t *testing.T) {
		resp, body := do(t, "POST", m.url+"/v1/conversations/c1", "", nil)
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("JSON POST: status %d: %s", resp.StatusCode, body)
		}
		req, err := http.NewRequestWithContext(context.Background(), "POST", m.url+"/v1/conversations/c1", strings.NewReader("view=full"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", form)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("form POST: status %d, want 405 as for any POST", resp.StatusCode)
		}
	})

	// The checks above ran in parallel subtests; none may have reached the
	// service.
	t.Cleanup(func() {
		select {
		case rpc := <-reached:
			t.Errorf("%s reached the service", rpc)
		default:
		}
	})
}
