package httpgateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

func TestRESTRoundTripUsesLowerCamelJSON(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	gotList := make(chan *orchestratorv1.ListConversationsRequest, 1)
	m := startMesh(t, httpgateway.Config{}, fakes{
		model: &modelFake{list: func(context.Context, *modelv1.ListModelsRequest) (*modelv1.ListModelsResponse, error) {
			return &modelv1.ListModelsResponse{Models: []*modelv1.LogicalModel{{
				Name: "chat", Available: true,
				Targets: []*modelv1.RouteTarget{{Provider: "ollama", ProviderModel: "qwen3:8b", Available: true}},
			}}}, nil
		}},
		conversations: &conversationFake{
			create: func(_ context.Context, r *orchestratorv1.CreateConversationRequest) (*orchestratorv1.CreateConversationResponse, error) {
				return &orchestratorv1.CreateConversationResponse{Conversation: &orchestratorv1.Conversation{
					Id: "c1", Title: r.GetTitle(), Strategy: r.GetStrategy(), CreateTime: timestamppb.New(created),
				}}, nil
			},
			get: func(_ context.Context, r *orchestratorv1.GetConversationRequest) (*orchestratorv1.GetConversationResponse, error) {
				return &orchestratorv1.GetConversationResponse{Conversation: &orchestratorv1.Conversation{
					Id: r.GetConversationId(),
					Messages: []*orchestratorv1.ConversationMessage{{
						Id: "m1", Role: "assistant", ToolCalls: []*orchestratorv1.ToolInvocation{{Id: "t1", Name: "rag_search", ArgumentsJson: `{"q":"x"}`}},
					}},
				}}, nil
			},
			list: func(_ context.Context, r *orchestratorv1.ListConversationsRequest) (*orchestratorv1.ListConversationsResponse, error) {
				gotList <- r
				return &orchestratorv1.ListConversationsResponse{NextPageToken: "p2"}, nil
			},
		},
	})

	t.Run("GET /v1/models", func(t *testing.T) {
		resp, body := do(t, "GET", m.url+"/v1/models", "", nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("status %d, content type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		var got struct {
			Models []struct {
				Name    string `json:"name"`
				Targets []map[string]any
			}
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Models) != 1 || got.Models[0].Name != "chat" || got.Models[0].Targets[0]["providerModel"] != "qwen3:8b" {
			t.Fatalf("body = %s", body)
		}
		if strings.Contains(string(body), "provider_model") || strings.Contains(string(body), `"detail"`) {
			t.Errorf("want lowerCamelCase names and no unset fields: %s", body)
		}
	})

	t.Run("POST /v1/conversations", func(t *testing.T) {
		resp, body := do(t, "POST", m.url+"/v1/conversations", `{"title":"hello","strategy":"deepseek_single"}`, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		conv := decode(t, body)["conversation"].(map[string]any)
		want := map[string]any{"id": "c1", "title": "hello", "strategy": "deepseek_single", "createTime": "2026-01-02T03:04:05Z"}
		for k, v := range want {
			if conv[k] != v {
				t.Errorf("conversation.%s = %v, want %v", k, conv[k], v)
			}
		}
		if _, ok := conv["caller"]; ok {
			t.Errorf("unset field emitted: %s", body)
		}
	})

	t.Run("GET /v1/conversations/{id}", func(t *testing.T) {
		resp, body := do(t, "GET", m.url+"/v1/conversations/c42", "", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		conv := decode(t, body)["conversation"].(map[string]any)
		msg := conv["messages"].([]any)[0].(map[string]any)
		call := msg["toolCalls"].([]any)[0].(map[string]any)
		if conv["id"] != "c42" || call["argumentsJson"] != `{"q":"x"}` {
			t.Fatalf("body = %s", body)
		}
	})

	t.Run("GET /v1/conversations?pageSize", func(t *testing.T) {
		resp, body := do(t, "GET", m.url+"/v1/conversations?pageSize=5&pageToken=p1", "", nil)
		if resp.StatusCode != http.StatusOK || decode(t, body)["nextPageToken"] != "p2" {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		r := waitFor(t, gotList, "ListConversations")
		if r.GetPageSize() != 5 || r.GetPageToken() != "p1" {
			t.Fatalf("request = %v", r)
		}
	})
}

func TestErrorsMapToHTTPStatusWithJSONBody(t *testing.T) {
	t.Parallel()
	// get answers with the error named by the conversation id.
	errs := map[string]error{
		"invalid":  grpcx.InvalidArgument("scope.tenant_id", "is required"),
		"missing":  status.Error(codes.NotFound, "conversation missing not found"),
		"busy":     status.Error(codes.FailedPrecondition, "a message is already running"),
		"conflict": status.Error(codes.Aborted, "version conflict"),
		"down":     grpcx.Errorf(codes.Unavailable, "DEPENDENCY_UNAVAILABLE", "mongo is down"),
		// What the gateway's connection reports of itself (no ErrorInfo),
		// naming an address that must not reach the client.
		"cut":         status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.0.3.7:9092: connect: connection refused"`),
		"unavailable": grpcx.Unimplemented("conversation export"),
	}
	m := startMesh(t, httpgateway.Config{}, fakes{
		conversations: &conversationFake{
			get: func(_ context.Context, r *orchestratorv1.GetConversationRequest) (*orchestratorv1.GetConversationResponse, error) {
				return nil, errs[r.GetConversationId()]
			},
		},
		sql: &sqlFake{create: func(context.Context, *sqlagentv1.CreateSessionRequest) (*sqlagentv1.CreateSessionResponse, error) {
			return nil, status.Error(codes.AlreadyExists, "session s1 already exists")
		}},
		classifier: &classifierFake{resume: func(r *classifierv1.ResumeRunRequest, _ grpc.ServerStreamingServer[classifierv1.ResumeRunResponse]) error {
			return grpcx.Errorf(codes.Aborted, "RUN_LOCKED", "run %s is being driven by another executor", r.GetRunId())
		}},
	})

	cases := []struct {
		name, method, path, body string
		wantHTTP                 int
		wantCode                 codes.Code
		wantInMessage            string
	}{
		{"InvalidArgument names the field", "GET", "/v1/conversations/invalid", "", 400, codes.InvalidArgument, "scope.tenantId"},
		{"bad JSON field names the field", "POST", "/v1/conversations", `{"titel":"x"}`, 400, codes.InvalidArgument, "titel"},
		{"wrong JSON type names the field", "POST", "/v1/sql/sessions", `{"scope":{"tenantId":7}}`, 400, codes.InvalidArgument, "tenantId"},
		{"body that is not JSON", "POST", "/v1/conversations", `not json`, 400, codes.InvalidArgument, "request body: not valid JSON: invalid value not (request body, line 1, column 1)"},
		{"body that is a JSON array", "POST", "/v1/conversations", `["x"]`, 400, codes.InvalidArgument, "request body"},
		{"NotFound", "GET", "/v1/conversations/missing", "", 404, codes.NotFound, "not found"},
		{"FailedPrecondition", "GET", "/v1/conversations/busy", "", 400, codes.FailedPrecondition, "already running"},
		{"Aborted", "GET", "/v1/conversations/conflict", "", 409, codes.Aborted, "version conflict"},
		{"AlreadyExists", "POST", "/v1/sql/sessions", `{}`, 409, codes.AlreadyExists, "already exists"},
		{"Unavailable", "GET", "/v1/conversations/down", "", 503, codes.Unavailable, "mongo is down"},
		{"transport error", "GET", "/v1/conversations/cut", "", 503, codes.Unavailable, "ConversationService is unreachable; retry later"},
		{"Unimplemented", "GET", "/v1/conversations/unavailable", "", 501, codes.Unimplemented, "conversation export"},
		{"service without an implementation", "POST", "/v1/vision:analyze", `{}`, 501, codes.Unimplemented, "VisionService"},
		{"concurrent resume of a classifier run", "POST", "/agents/classificationAgent/runs/r1/resume", "", 409, codes.Aborted, "another executor"},
		{"unknown path", "GET", "/v1/nothing", "", 404, codes.NotFound, "/v1/nothing"},
		{"wrong method", "DELETE", "/v1/models", "", 405, codes.Unimplemented, "Method Not Allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, body := do(t, tc.method, m.url+tc.path, tc.body, nil)
			if resp.StatusCode != tc.wantHTTP {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tc.wantHTTP, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			var got struct {
				Code    *int              `json:"code"`
				Message string            `json:"message"`
				Details *[]map[string]any `json:"details"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("body is not JSON: %s", body)
			}
			if got.Code == nil || codes.Code(*got.Code) != tc.wantCode || got.Details == nil {
				t.Fatalf("want {code: %d, message, details}, got %s", tc.wantCode, body)
			}
			if !strings.Contains(got.Message, tc.wantInMessage) {
				t.Errorf("message %q does not mention %q", got.Message, tc.wantInMessage)
			}
			if strings.Contains(string(body), "10.0.3.7") || strings.Contains(string(body), "dial tcp") {
				t.Errorf("the answer names the backend's address: %s", body)
			}
		})
	}

	t.Run("details carry the field violation", func(t *testing.T) {
		t.Parallel()
		_, body := do(t, "GET", m.url+"/v1/conversations/invalid", "", nil)
		var got struct {
			Details []struct {
				Type            string `json:"@type"`
				FieldViolations []struct {
					Field string `json:"field"`
				} `json:"fieldViolations"`
			} `json:"details"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Details) != 1 || got.Details[0].Type != "type.googleapis.com/google.rpc.BadRequest" ||
			len(got.Details[0].FieldViolations) != 1 || got.Details[0].FieldViolations[0].Field != "scope.tenantId" {
			t.Fatalf("details = %s", body)
		}
	})
}

// TestMethodNotAllowedSaysWhatIsAllowed: a 405 carries the Allow header
// RFC 9110 requires, listing the methods the path takes.
func TestMethodNotAllowedSaysWhatIsAllowed(t *testing.T) {
	t.Parallel()
	m := startMesh(t, httpgateway.Config{}, fakes{})
	for _, tc := range []struct{ method, path, allow string }{
		{"DELETE", "/v1/models", "GET"},
		{"PUT", "/v1/documents", "GET, POST"},
		{"PATCH", "/v1/conversations/c1", "GET, DELETE"},
		{"DELETE", "/v1/analyses", "POST"},
	} {
		resp, body := do(t, tc.method, m.url+tc.path, "", nil)
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tc.allow ||
			!strings.Contains(string(body), "(it takes "+tc.allow+")") {
			t.Errorf("%s %s: %d, Allow %q, %s; want 405 allowing %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), body, tc.allow)
		}
	}
}

// TestHeadIsGetWithoutTheBody: HEAD on a GET route answers as GET would
// (here the fake model service's 501), without the body; on a watch, which
// streams, it is a 405 allowing GET.
func TestHeadIsGetWithoutTheBody(t *testing.T) {
	t.Parallel()
	m := startMesh(t, httpgateway.Config{}, fakes{})
	get, getBody := do(t, "GET", m.url+"/v1/models", "", nil)
	head, headBody := do(t, "HEAD", m.url+"/v1/models", "", nil)
	if head.StatusCode != get.StatusCode || head.StatusCode == http.StatusMethodNotAllowed || len(headBody) != 0 || len(getBody) == 0 ||
		head.Header.Get("Content-Type") != get.Header.Get("Content-Type") {
		t.Errorf("GET %d (%d bytes, %s), HEAD %d (%d bytes, %s); want HEAD as GET without the body",
			get.StatusCode, len(getBody), get.Header.Get("Content-Type"), head.StatusCode, len(headBody), head.Header.Get("Content-Type"))
	}
	if resp, _ := do(t, "HEAD", m.url+"/v1/jobs/j1:watch", "", nil); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET" {
		t.Errorf("HEAD on a watch: %d, Allow %q; want 405 allowing GET", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if resp, _ := do(t, "HEAD", m.url+"/v1/analyses", "", nil); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("HEAD on a POST-only path: %d, want 405", resp.StatusCode)
	}
}

func TestUnreachableServiceIs503NamingIt(t *testing.T) {
	t.Parallel()
	m := startMesh(t, httpgateway.Config{}, fakes{})
	m.stops["modelgateway"]()
	resp, body := do(t, "GET", m.url+"/v1/models", "", nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	msg := decode(t, body)["message"].(string)
	if msg != "modelgateway is unreachable" {
		t.Fatalf("message = %q, want the service named and no transport details", msg)
	}
}
