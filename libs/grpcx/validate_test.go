package grpcx_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// guarded counts the requests that reached a handler: a refused request
// must not.
type guarded struct {
	modelv1.UnimplementedModelServiceServer
	orchestratorv1.UnimplementedJobServiceServer
	calls atomic.Int32
}

func (g *guarded) Chat(context.Context, *modelv1.ChatRequest) (*modelv1.ChatResponse, error) {
	g.calls.Add(1)
	return &modelv1.ChatResponse{}, nil
}

func (g *guarded) ChatStream(_ *modelv1.ChatStreamRequest, s grpc.ServerStreamingServer[modelv1.ChatStreamResponse]) error {
	g.calls.Add(1)
	return s.Send(&modelv1.ChatStreamResponse{Chunk: &modelv1.ChatStreamResponse_ContentDelta{ContentDelta: "ok"}})
}

func (g *guarded) GetJob(context.Context, *orchestratorv1.GetJobRequest) (*orchestratorv1.GetJobResponse, error) {
	g.calls.Add(1)
	return &orchestratorv1.GetJobResponse{}, nil
}

func startGuarded(t *testing.T) (*guarded, *grpc.ClientConn) {
	t.Helper()
	impl := &guarded{}
	srv := grpcx.NewServer(grpcx.ServerConfig{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	modelv1.RegisterModelServiceServer(srv.GRPC(), impl)
	orchestratorv1.RegisterJobServiceServer(srv.GRPC(), impl)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = srv.Serve(ctx, lis) }()
	cc, err := grpcx.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cc.Close() })
	return impl, cc
}

func chat(mutate func(*modelv1.ChatRequest)) *modelv1.ChatRequest {
	r := &modelv1.ChatRequest{Model: "chat", Messages: []*modelv1.Message{{Role: modelv1.Role_ROLE_USER, Content: "hi"}}}
	mutate(r)
	return r
}

// TestRequestsAreValidatedByTheirContract: the constraints declared in the
// .proto files are enforced before any handler runs, on unary and streaming
// RPCs alike, and the error names the field (message and BadRequest).
func TestRequestsAreValidatedByTheirContract(t *testing.T) {
	t.Parallel()
	impl, cc := startGuarded(t)
	models := modelv1.NewModelServiceClient(cc)
	f := func(v float64) *float64 { return &v }
	i := func(v int32) *int32 { return &v }
	tests := []struct {
		name      string
		req       *modelv1.ChatRequest
		wantField string
		wantText  string
	}{
		{"temperature above 2", chat(func(r *modelv1.ChatRequest) { r.Options = &modelv1.GenerationOptions{Temperature: f(2.5)} }), "options.temperature", "less than or equal to 2"},
		{"negative temperature", chat(func(r *modelv1.ChatRequest) { r.Options = &modelv1.GenerationOptions{Temperature: f(-0.1)} }), "options.temperature", "greater than or equal to 0"},
		{"top_p above 1", chat(func(r *modelv1.ChatRequest) { r.Options = &modelv1.GenerationOptions{TopP: f(1.5)} }), "options.top_p", ""},
		{"top_k negative", chat(func(r *modelv1.ChatRequest) { r.Options = &modelv1.GenerationOptions{TopK: i(-1)} }), "options.top_k", ""},
		{"num_ctx zero", chat(func(r *modelv1.ChatRequest) { r.Options = &modelv1.GenerationOptions{NumCtx: i(0)} }), "options.num_ctx", ""},
		{"max_tokens zero", chat(func(r *modelv1.ChatRequest) { r.Options = &modelv1.GenerationOptions{MaxTokens: i(0)} }), "options.max_tokens", ""},
		{"budget_tokens zero", chat(func(r *modelv1.ChatRequest) { r.Thinking = &modelv1.ThinkingOptions{BudgetTokens: i(0)} }), "thinking.budget_tokens", ""},
		{"unknown effort", chat(func(r *modelv1.ChatRequest) { r.Thinking = &modelv1.ThinkingOptions{Effort: "max"} }), "thinking.effort", ""},
		{"no model", chat(func(r *modelv1.ChatRequest) { r.Model = "" }), "model", "required"},
		{"no messages", chat(func(r *modelv1.ChatRequest) { r.Messages = nil }), "messages", ""},
		{"role unset", chat(func(r *modelv1.ChatRequest) { r.Messages[0].Role = 0 }), "messages[0].role", "must be one of ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL"},
		{"role out of the enum", chat(func(r *modelv1.ChatRequest) { r.Messages[0].Role = 42 }), "messages[0].role", "must be one of ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL"},
		{"bad tool name", chat(func(r *modelv1.ChatRequest) { r.Tools = []*modelv1.Tool{{Name: "a b"}} }), "tools[0].name", ""},
		{"unknown response format", chat(func(r *modelv1.ChatRequest) { r.ResponseFormat = &modelv1.ResponseFormat{Type: 9} }), "response_format.type", ""},
		{"too many stop sequences", chat(func(r *modelv1.ChatRequest) {
			r.Options = &modelv1.GenerationOptions{Stop: strings.Split(strings.Repeat("x,", 17), ",")[:17]}
		}), "options.stop", "16"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := models.Chat(context.Background(), tc.req)
			wantViolation(t, err, tc.wantField, tc.wantText)
			// The same request inside a stream request: the path says where.
			s, err := models.ChatStream(context.Background(), &modelv1.ChatStreamRequest{Request: tc.req})
			if err == nil {
				_, err = s.Recv()
			}
			wantViolation(t, err, "request."+tc.wantField, tc.wantText)
		})
	}
	if n := impl.calls.Load(); n != 0 {
		t.Fatalf("%d invalid requests reached a handler", n)
	}
	if _, err := models.Chat(context.Background(), chat(func(r *modelv1.ChatRequest) {
		r.Options = &modelv1.GenerationOptions{Temperature: f(0), TopP: f(1), TopK: i(0), MaxTokens: i(1)}
	})); err != nil {
		t.Fatalf("a request at the edges of every range: %v", err)
	}
	s, err := models.ChatStream(context.Background(), &modelv1.ChatStreamRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	wantViolation(t, err, "request", "required")
}

func wantViolation(t *testing.T, err error, field, text string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), field+": ") || !strings.Contains(st.Message(), text) {
		t.Fatalf("err = %v; want InvalidArgument %q containing %q", err, field+": ...", text)
	}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && br.GetFieldViolations()[0].GetField() == field {
			return
		}
	}
	t.Fatalf("err %v has no BadRequest detail naming %s", err, field)
}

// TestScopeGuardOnEveryRequest: a request whose scope names another tenant,
// or another project than a project-scoped caller's, is refused before its
// handler runs, whether or not the handler resolves its scope itself.
func TestScopeGuardOnEveryRequest(t *testing.T) {
	t.Parallel()
	impl, cc := startGuarded(t)
	jobs := orchestratorv1.NewJobServiceClient(cc)
	as := func(kv ...string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), kv...)
	}
	projectKey := as(grpcx.TenantMetadataKey, "acme", grpcx.ProjectMetadataKey, "alpha")
	tenantKey := as(grpcx.TenantMetadataKey, "acme")
	tests := []struct {
		name      string
		ctx       context.Context
		scope     *commonv1.Scope
		wantField string
	}{
		{"project key, other project", projectKey, &commonv1.Scope{ProjectId: "beta"}, "scope.project_id"},
		{"project key, other tenant", projectKey, &commonv1.Scope{TenantId: "evil"}, "scope.tenant_id"},
		{"tenant key, other tenant", tenantKey, &commonv1.Scope{TenantId: "evil", ProjectId: "alpha"}, "scope.tenant_id"},
		{"invalid project id", tenantKey, &commonv1.Scope{ProjectId: "a.b"}, "scope.project_id"},
		{"project id too long", tenantKey, &commonv1.Scope{ProjectId: strings.Repeat("p", 129)}, "scope.project_id"},
		{"project key, own project", projectKey, &commonv1.Scope{TenantId: "acme", ProjectId: "alpha"}, ""},
		{"tenant key, any project", tenantKey, &commonv1.Scope{ProjectId: "beta"}, ""},
		{"no scope in the request", projectKey, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := impl.calls.Load()
			_, err := jobs.GetJob(tc.ctx, &orchestratorv1.GetJobRequest{Scope: proto.CloneOf(tc.scope), JobId: "j1"})
			if tc.wantField == "" {
				if err != nil || impl.calls.Load() != before+1 {
					t.Fatalf("err = %v, want the handler to run", err)
				}
				return
			}
			wantViolation(t, err, tc.wantField, "")
			if impl.calls.Load() != before {
				t.Fatal("the refused request reached the handler")
			}
		})
	}
}

// TestScopeIDPatternIsSaidInWords: a tenant or project id the contract's
// pattern refuses is refused in words, not with the pattern.
func TestScopeIDPatternIsSaidInWords(t *testing.T) {
	t.Parallel()
	for _, sc := range []*commonv1.Scope{{TenantId: "acme", ProjectId: "proj1 "}, {TenantId: "ac.me"}} {
		err := grpcx.CheckRequest(context.Background(), &indexerv1.SearchRequest{Scope: sc, Query: "x"})
		field := "scope.project_id"
		if sc.GetProjectId() == "" {
			field = "scope.tenant_id"
		}
		wantViolation(t, err, field, "must be printable ASCII without '.', '*', '>' or whitespace")
		if strings.Contains(status.Convert(err).Message(), "regex") {
			t.Errorf("%v: the message shows the pattern", err)
		}
	}
}
