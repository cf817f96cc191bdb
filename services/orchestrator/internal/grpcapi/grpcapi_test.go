package grpcapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat/chattest"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/memstore"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/grpcapi"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/retrieval"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/strategy"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

var scope = &commonv1.Scope{TenantId: "acme", ProjectId: "web"}

// server is ConversationService and ToolService on a loopback gRPC server,
// over a memory store, the real model gateway and an indexer nobody serves.
type server struct {
	sim   *providersim.Server
	store conversation.Store
	convs orchestratorv1.ConversationServiceClient
	tools orchestratorv1.ToolServiceClient
}

func startServer(t *testing.T) *server {
	t.Helper()
	model := chattest.StartModel(t, providersim.Options{Flavor: providersim.DeepSeek})
	idxConn, err := grpc.NewClient(chattest.UnreachableAddr(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idxConn.Close() })
	searcher := retrieval.New(indexerv1.NewSearchServiceClient(idxConn), retrieval.Options{})
	reg, err := tools.NewRegistry(tools.Options{}, searcher.Tool())
	if err != nil {
		t.Fatal(err)
	}
	set, err := strategy.NewSet("deepseek_single", strategy.Builtin()...)
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New()
	loop, err := chat.New(chat.Config{Model: chattest.ModelName, Holder: "replica-1"}, chat.Deps{
		Store: store, Model: model.Client, Tools: reg, Strategies: set, Search: searcher,
	})
	if err != nil {
		t.Fatal(err)
	}
	conn := testkit.StartGRPC(t, func(s *grpc.Server) {
		orchestratorv1.RegisterConversationServiceServer(s, grpcapi.NewConversations(store, loop, set))
		orchestratorv1.RegisterToolServiceServer(s, grpcapi.NewTools(reg, nil))
	})
	return &server{
		sim: model.Sim, store: store,
		convs: orchestratorv1.NewConversationServiceClient(conn),
		tools: orchestratorv1.NewToolServiceClient(conn),
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (s *server) create(t *testing.T, title string) *orchestratorv1.Conversation {
	t.Helper()
	resp, err := s.convs.CreateConversation(ctxTimeout(t, 10*time.Second), &orchestratorv1.CreateConversationRequest{Scope: scope, Title: title, Caller: "alice"})
	if err != nil {
		t.Fatalf("CreateConversation: %v", err)
	}
	return resp.GetConversation()
}

// wantStatus fails unless err has code and, if set, the field violation or
// the ErrorInfo reason.
func wantStatus(t *testing.T, err error, code codes.Code, fieldOrReason string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("error = %v, want %v", err, code)
	}
	if fieldOrReason == "" {
		return
	}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				if v.GetField() == fieldOrReason {
					return
				}
			}
		case *errdetails.ErrorInfo:
			if d.GetReason() == fieldOrReason {
				return
			}
		}
	}
	t.Fatalf("error %v carries no field violation or reason %q (details %v)", err, fieldOrReason, st.Details())
}

func TestConversationCRUD(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := ctxTimeout(t, 20*time.Second)
	c := s.create(t, "  Quarterly numbers ")
	if c.GetId() == "" || c.GetTitle() != "Quarterly numbers" || c.GetStrategy() != "deepseek_single" || c.GetCaller() != "alice" || c.GetCreateTime() == nil {
		t.Errorf("created %v", c)
	}
	qwen, err := s.convs.CreateConversation(ctx, &orchestratorv1.CreateConversationRequest{Scope: scope, Strategy: "qwen_single_thinking", Caller: "bob"})
	if err != nil || qwen.GetConversation().GetStrategy() != "qwen_single_thinking" {
		t.Fatalf("create with a strategy: %v, %v", qwen, err)
	}

	got, err := s.convs.GetConversation(ctx, &orchestratorv1.GetConversationRequest{Scope: scope, ConversationId: c.GetId()})
	if err != nil || got.GetConversation().GetId() != c.GetId() || len(got.GetConversation().GetMessages()) != 0 {
		t.Fatalf("GetConversation = %v, %v", got, err)
	}

	list, err := s.convs.ListConversations(ctx, &orchestratorv1.ListConversationsRequest{Scope: scope, PageSize: 1})
	if err != nil || len(list.GetConversations()) != 1 || list.GetConversations()[0].GetId() != qwen.GetConversation().GetId() || list.GetNextPageToken() == "" {
		t.Fatalf("first page = %v, %v; want the newest conversation and a token", list, err)
	}
	next, err := s.convs.ListConversations(ctx, &orchestratorv1.ListConversationsRequest{Scope: scope, PageSize: 1, PageToken: list.GetNextPageToken()})
	if err != nil || len(next.GetConversations()) != 1 || next.GetConversations()[0].GetId() != c.GetId() || next.GetNextPageToken() != "" {
		t.Fatalf("second page = %v, %v", next, err)
	}
	mine, err := s.convs.ListConversations(ctx, &orchestratorv1.ListConversationsRequest{Scope: scope, Caller: "bob"})
	if err != nil || len(mine.GetConversations()) != 1 || mine.GetConversations()[0].GetCaller() != "bob" {
		t.Fatalf("bob's conversations = %v, %v", mine, err)
	}

	// Behind the gateway the authenticated caller wins; naming another fails.
	authed := metadata.AppendToOutgoingContext(ctx, grpcx.CallerMetadataKey, "carol")
	carols, err := s.convs.CreateConversation(authed, &orchestratorv1.CreateConversationRequest{Scope: scope})
	if err != nil || carols.GetConversation().GetCaller() != "carol" {
		t.Fatalf("create as the authenticated caller = %v, %v", carols, err)
	}
	_, err = s.convs.CreateConversation(authed, &orchestratorv1.CreateConversationRequest{Scope: scope, Caller: "mallory"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "caller") {
		t.Fatalf("create in another's name: err = %v, want InvalidArgument naming caller", err)
	}

	if _, err := s.convs.DeleteConversation(ctx, &orchestratorv1.DeleteConversationRequest{Scope: scope, ConversationId: c.GetId()}); err != nil {
		t.Fatalf("DeleteConversation: %v", err)
	}
	_, err = s.convs.GetConversation(ctx, &orchestratorv1.GetConversationRequest{Scope: scope, ConversationId: c.GetId()})
	wantStatus(t, err, codes.NotFound, grpcapi.ReasonConversationNotFound)
}

func TestValidation(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.create(t, "")
	other := metadata.AppendToOutgoingContext(context.Background(), grpcx.TenantMetadataKey, "evil")
	tests := []struct {
		name  string
		call  func(ctx context.Context) error
		code  codes.Code
		field string
	}{
		{"create without tenant", func(ctx context.Context) error {
			_, err := s.convs.CreateConversation(ctx, &orchestratorv1.CreateConversationRequest{})
			return err
		}, codes.InvalidArgument, "scope.tenant_id"},
		{"unknown strategy", func(ctx context.Context) error {
			_, err := s.convs.CreateConversation(ctx, &orchestratorv1.CreateConversationRequest{Scope: scope, Strategy: "gpt_magic"})
			return err
		}, codes.InvalidArgument, "strategy"},
		{"title too long", func(ctx context.Context) error {
			_, err := s.convs.CreateConversation(ctx, &orchestratorv1.CreateConversationRequest{Scope: scope, Title: strings.Repeat("t", 501)})
			return err
		}, codes.InvalidArgument, "title"},
		{"get without id", func(ctx context.Context) error {
			_, err := s.convs.GetConversation(ctx, &orchestratorv1.GetConversationRequest{Scope: scope})
			return err
		}, codes.InvalidArgument, "conversation_id"},
		{"negative page size", func(ctx context.Context) error {
			_, err := s.convs.ListConversations(ctx, &orchestratorv1.ListConversationsRequest{Scope: scope, PageSize: -1})
			return err
		}, codes.InvalidArgument, "page_size"},
		{"forged page token", func(ctx context.Context) error {
			_, err := s.convs.ListConversations(ctx, &orchestratorv1.ListConversationsRequest{Scope: scope, PageToken: "abc"})
			return err
		}, codes.InvalidArgument, "page_token"},
		{"time range upside down", func(ctx context.Context) error {
			_, err := s.convs.ListConversations(ctx, &orchestratorv1.ListConversationsRequest{Scope: scope,
				CreateTimeFrom: timestamppb.New(time.Unix(2000, 0)), CreateTimeTo: timestamppb.New(time.Unix(1000, 0))})
			return err
		}, codes.InvalidArgument, "create_time_from"},
		{"time out of range", func(ctx context.Context) error {
			_, err := s.convs.ListConversations(ctx, &orchestratorv1.ListConversationsRequest{Scope: scope,
				CreateTimeTo: &timestamppb.Timestamp{Seconds: 1 << 62}})
			return err
		}, codes.InvalidArgument, "create_time_to"},
		{"empty message", func(ctx context.Context) error {
			_, err := s.convs.SendMessage(ctx, &orchestratorv1.SendMessageRequest{Scope: scope, ConversationId: c.GetId(), Content: "  "})
			return err
		}, codes.InvalidArgument, "content"},
		{"stream to a missing conversation", func(ctx context.Context) error {
			st, err := s.convs.StreamMessage(ctx, &orchestratorv1.StreamMessageRequest{Scope: scope, ConversationId: "nope", Content: "hi"})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}, codes.NotFound, grpcapi.ReasonConversationNotFound},
		{"another tenant's conversation", func(ctx context.Context) error {
			_, err := s.convs.GetConversation(other, &orchestratorv1.GetConversationRequest{ConversationId: c.GetId()})
			return err
		}, codes.NotFound, grpcapi.ReasonConversationNotFound},
		{"body tenant disagrees with the authenticated one", func(ctx context.Context) error {
			_, err := s.convs.GetConversation(other, &orchestratorv1.GetConversationRequest{Scope: scope, ConversationId: c.GetId()})
			return err
		}, codes.InvalidArgument, "scope.tenant_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantStatus(t, tc.call(ctxTimeout(t, 10*time.Second)), tc.code, tc.field)
		})
	}
	if n := s.sim.Count(); n != 0 {
		t.Errorf("rejected requests reached the model %d times", n)
	}
}

// recvAll reads a stream to its end.
func recvAll(st grpc.ServerStreamingClient[orchestratorv1.StreamMessageResponse]) ([]*orchestratorv1.StreamMessageResponse, error) {
	var out []*orchestratorv1.StreamMessageResponse
	for {
		ev, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

// TestStreamMessageOverGRPC drives a turn that uses the built-in rag_search
// tool while the indexer is down: retrieval is skipped with a status event,
// the tool's failure goes back to the model, and the answer streams.
func TestStreamMessageOverGRPC(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.create(t, "handbook")
	s.sim.When(providersim.Match{LastRole: "user", Tools: []string{"rag_search"}}).ToolCall("rag_search", map[string]any{"query": "vacation policy"})
	s.sim.When(providersim.Match{LastRole: "tool"}).Text("The knowledge base is unavailable right now.")

	st, err := s.convs.StreamMessage(ctxTimeout(t, 30*time.Second), &orchestratorv1.StreamMessageRequest{Scope: scope, ConversationId: c.GetId(), Content: "What is the vacation policy?"})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := recvAll(st)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	var kinds []string
	for _, ev := range evs {
		switch e := ev.GetEvent().(type) {
		case *orchestratorv1.StreamMessageResponse_StatusUpdate:
			kinds = append(kinds, "status:"+e.StatusUpdate.GetKind())
		case *orchestratorv1.StreamMessageResponse_ToolCallStart:
			kinds = append(kinds, "start:"+e.ToolCallStart.GetToolName())
		case *orchestratorv1.StreamMessageResponse_ToolCallResult:
			kinds = append(kinds, "result")
			if !e.ToolCallResult.GetIsError() || !strings.Contains(e.ToolCallResult.GetResult(), "Unavailable") {
				t.Errorf("rag_search result = %v, want the indexer failure as an error", e.ToolCallResult)
			}
		case *orchestratorv1.StreamMessageResponse_Completed:
			kinds = append(kinds, "completed")
		}
	}
	want := "status:retrieval_skipped,start:rag_search,result,completed"
	if strings.Join(kinds, ",") != want {
		t.Errorf("events %v, want %s (with response chunks between)", kinds, want)
	}

	got, err := s.convs.GetConversation(ctxTimeout(t, 10*time.Second), &orchestratorv1.GetConversationRequest{Scope: scope, ConversationId: c.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	msgs := got.GetConversation().GetMessages()
	if len(msgs) != 4 || !msgs[2].GetToolError() || msgs[1].GetToolCalls()[0].GetName() != "rag_search" ||
		msgs[3].GetContent() != "The knowledge base is unavailable right now." || msgs[3].GetId() != evs[len(evs)-1].GetCompleted().GetMessageId() {
		t.Errorf("stored conversation = %v", msgs)
	}
}

// TestBusyConversation: while another replica holds a conversation's turn
// lease, StreamMessage and SendMessage fail with ABORTED (a conflict to
// retry, as the classifier's busy run) and reason CONVERSATION_BUSY before
// any event, and DeleteConversation waits its turn too.
func TestBusyConversation(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.create(t, "")
	sc := conversation.Scope{TenantID: scope.GetTenantId(), ProjectID: scope.GetProjectId()}
	if _, err := s.store.AcquireLease(context.Background(), sc, c.GetId(), conversation.Lease{ID: "x", Holder: "replica-2", Until: time.Now().Add(time.Minute)}, time.Now()); err != nil {
		t.Fatal(err)
	}
	st, err := s.convs.StreamMessage(ctxTimeout(t, 10*time.Second), &orchestratorv1.StreamMessageRequest{Scope: scope, ConversationId: c.GetId(), Content: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := recvAll(st)
	wantStatus(t, err, codes.Aborted, grpcapi.ReasonConversationBusy)
	if len(evs) != 0 || !strings.Contains(status.Convert(err).Message(), "replica-2") {
		t.Errorf("busy stream sent %d events, message %q", len(evs), status.Convert(err).Message())
	}
	_, err = s.convs.SendMessage(ctxTimeout(t, 10*time.Second), &orchestratorv1.SendMessageRequest{Scope: scope, ConversationId: c.GetId(), Content: "hi"})
	wantStatus(t, err, codes.Aborted, grpcapi.ReasonConversationBusy)
	_, err = s.convs.DeleteConversation(ctxTimeout(t, 10*time.Second), &orchestratorv1.DeleteConversationRequest{Scope: scope, ConversationId: c.GetId()})
	wantStatus(t, err, codes.Aborted, grpcapi.ReasonConversationBusy)
}

// TestClientDisconnectOverGRPC: cancelling the gRPC stream cancels the
// turn on the server; its partial answer is stored marked cancelled.
func TestClientDisconnectOverGRPC(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.create(t, "")
	s.sim.When(providersim.Match{}).Text("A long answer that never finishes streaming.").Hang()

	ctx, cancel := context.WithCancel(ctxTimeout(t, 30*time.Second))
	st, err := s.convs.StreamMessage(ctx, &orchestratorv1.StreamMessageRequest{Scope: scope, ConversationId: c.GetId(), Content: "Tell me"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := st.Recv()
		if err != nil {
			t.Fatalf("stream ended before any answer: %v", err)
		}
		if ev.GetResponseChunk() != nil {
			break
		}
	}
	cancel()
	testkit.Eventually(t, 10*time.Second, func() bool { return s.sim.Disconnects() == 1 }, "the provider call to be cancelled")
	var msgs []*orchestratorv1.ConversationMessage
	testkit.Eventually(t, 10*time.Second, func() bool {
		got, err := s.convs.GetConversation(ctxTimeout(t, 10*time.Second), &orchestratorv1.GetConversationRequest{Scope: scope, ConversationId: c.GetId()})
		if err != nil {
			return false
		}
		msgs = got.GetConversation().GetMessages()
		return len(msgs) == 2
	}, "the partial answer to be stored")
	if !msgs[1].GetCancelled() || !strings.HasPrefix("A long answer that never finishes streaming.", msgs[1].GetContent()) || msgs[1].GetContent() == "" {
		t.Errorf("stored answer = %v, want a cancelled prefix", msgs[1])
	}
	// The lease is released with the turn: the next message goes through.
	s.sim.Reset()
	s.sim.When(providersim.Match{}).Text("ok")
	testkit.Eventually(t, 10*time.Second, func() bool {
		_, err := s.convs.SendMessage(ctxTimeout(t, 10*time.Second), &orchestratorv1.SendMessageRequest{Scope: scope, ConversationId: c.GetId(), Content: "again"})
		return err == nil
	}, "the conversation to accept the next message")
}

func TestSendMessage(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.create(t, "")
	s.sim.When(providersim.Match{}).Text("Plain answer.").Usage(providersim.Usage{PromptTokens: 7, CompletionTokens: 3})
	resp, err := s.convs.SendMessage(ctxTimeout(t, 30*time.Second), &orchestratorv1.SendMessageRequest{Scope: scope, ConversationId: c.GetId(), Content: "hi"})
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	if resp.GetMessage().GetContent() != "Plain answer." || resp.GetMessage().GetRole() != "assistant" ||
		resp.GetCompleted().GetIterations() != 1 || resp.GetCompleted().GetTotalTokens() != 10 || resp.GetCompleted().GetMessageId() != resp.GetMessage().GetId() {
		t.Errorf("SendMessage = %v", resp)
	}

	s.sim.Reset()
	s.sim.When(providersim.Match{}).Error(503, "Server overloaded")
	_, err = s.convs.SendMessage(ctxTimeout(t, 30*time.Second), &orchestratorv1.SendMessageRequest{Scope: scope, ConversationId: c.GetId(), Content: "again"})
	wantStatus(t, err, codes.Unavailable, "")
	if !strings.Contains(status.Convert(err).Message(), "overloaded") {
		t.Errorf("error %v does not quote the provider", err)
	}
}

func TestListTools(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	resp, err := s.tools.ListTools(ctxTimeout(t, 10*time.Second), &orchestratorv1.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetTools()) != 1 || resp.GetTools()[0].GetName() != "rag_search" {
		t.Fatalf("ListTools = %v, want rag_search", resp)
	}
	var schema map[string]any
	if err := json.Unmarshal([]byte(resp.GetTools()[0].GetParametersJsonSchema()), &schema); err != nil || schema["type"] != "object" {
		t.Errorf("rag_search schema %q is not an object schema: %v", resp.GetTools()[0].GetParametersJsonSchema(), err)
	}
}
