// Package grpcapi implements the chat loop's gRPC services,
// ConversationService and ToolService: it validates requests, resolves the
// caller's scope, calls the conversation store and the chat loop, and maps
// their errors to status codes in one place (errors.go).
package grpcapi

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventbus "github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/strategy"
)

// Conversations implements orchestratorv1.ConversationServiceServer.
type Conversations struct {
	orchestratorv1.UnimplementedConversationServiceServer
	store      conversation.Store
	loop       *chat.Loop
	strategies *strategy.Set
	now        func() time.Time
}

var _ orchestratorv1.ConversationServiceServer = (*Conversations)(nil)

// NewConversations returns the service over store and loop; strategies are
// the names CreateConversation accepts.
func NewConversations(store conversation.Store, loop *chat.Loop, strategies *strategy.Set) *Conversations {
	return &Conversations{store: store, loop: loop, strategies: strategies, now: time.Now}
}

func scopeOf(s *commonv1.Scope) conversation.Scope {
	return conversation.Scope{TenantID: s.GetTenantId(), ProjectID: s.GetProjectId()}
}

// CreateConversation implements orchestratorv1.ConversationServiceServer.
func (s *Conversations) CreateConversation(ctx context.Context, req *orchestratorv1.CreateConversationRequest) (*orchestratorv1.CreateConversationResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	st, ok := s.strategies.Lookup(strings.TrimSpace(req.GetStrategy()))
	if !ok {
		return nil, grpcx.InvalidArgument("strategy", "unknown strategy %q; available: %s", req.GetStrategy(), strings.Join(s.strategies.Names(), ", "))
	}
	title := strings.TrimSpace(req.GetTitle()) // at most 500 characters: the contract says so
	caller, err := grpcx.Caller(ctx, "caller", req.GetCaller())
	if err != nil {
		return nil, err
	}
	now := s.now()
	c := &conversation.Conversation{
		ID: uuid.Must(uuid.NewV7()).String(), Scope: scopeOf(scope), Caller: caller,
		Title: title, Strategy: st.Name(), CreateTime: now, UpdateTime: now,
	}
	if err := s.store.Create(ctx, c); err != nil {
		return nil, toStatus(err)
	}
	stored, err := s.store.Get(ctx, c.Scope, c.ID)
	if err != nil {
		return nil, toStatus(err)
	}
	return &orchestratorv1.CreateConversationResponse{Conversation: conversationProto(stored, nil)}, nil
}

// GetConversation implements orchestratorv1.ConversationServiceServer.
func (s *Conversations) GetConversation(ctx context.Context, req *orchestratorv1.GetConversationRequest) (*orchestratorv1.GetConversationResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	id, err := conversationID(req.GetConversationId())
	if err != nil {
		return nil, err
	}
	c, err := s.store.Get(ctx, scopeOf(scope), id)
	if err != nil {
		return nil, toStatus(err)
	}
	msgs, err := s.store.Messages(ctx, scopeOf(scope), id, 0)
	if err != nil {
		return nil, toStatus(err)
	}
	return &orchestratorv1.GetConversationResponse{Conversation: conversationProto(c, msgs)}, nil
}

// ListConversations implements orchestratorv1.ConversationServiceServer.
func (s *Conversations) ListConversations(ctx context.Context, req *orchestratorv1.ListConversationsRequest) (*orchestratorv1.ListConversationsResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	q := conversation.ListQuery{
		Caller: strings.TrimSpace(req.GetCaller()), PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken(),
	}
	if q.CreatedFrom, q.CreatedTo, err = grpcx.CreateTimeRange(req.GetCreateTimeFrom(), req.GetCreateTimeTo()); err != nil {
		return nil, err
	}
	list, next, err := s.store.List(ctx, scopeOf(scope), q)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &orchestratorv1.ListConversationsResponse{NextPageToken: next}
	for _, c := range list {
		resp.Conversations = append(resp.Conversations, conversationProto(c, nil))
	}
	return resp, nil
}

// DeleteConversation implements orchestratorv1.ConversationServiceServer.
func (s *Conversations) DeleteConversation(ctx context.Context, req *orchestratorv1.DeleteConversationRequest) (*orchestratorv1.DeleteConversationResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	id, err := conversationID(req.GetConversationId())
	if err != nil {
		return nil, err
	}
	// The store refuses a conversation that is not the caller's or whose
	// turn is running; only then do its turns' events go (their subjects
	// name the tenant, not the project), so a refused delete removes
	// nothing a resume needs.
	if err := s.store.Delete(ctx, scopeOf(scope), id, s.now()); err != nil {
		return nil, toStatus(err)
	}
	s.loop.ForgetConversation(ctx, scope, id)
	return &orchestratorv1.DeleteConversationResponse{}, nil
}

// StreamMessage implements orchestratorv1.ConversationServiceServer. A
// failure before the turn starts (bad input, unknown conversation, another
// message in progress) ends the RPC with its status and no events; a
// failure during the turn is an ErrorEvent, after which the stream ends
// normally.
func (s *Conversations) StreamMessage(req *orchestratorv1.StreamMessageRequest, stream orchestratorv1.ConversationService_StreamMessageServer) error {
	ctx := stream.Context()
	r, err := messageRequest(ctx, req.GetScope(), req.GetConversationId(), req.GetContent())
	if err != nil {
		return err
	}
	r.Resumable = true
	ids, err := s.loop.EventIDs(ctx)
	if err != nil {
		return toStatus(err)
	}
	_, err = s.loop.Send(ctx, r, func(ev *orchestratorv1.StreamMessageResponse) error {
		return stream.Send(withEventID(ids, ev))
	})
	var te *chat.TurnError
	if errors.As(err, &te) {
		return nil // reported as an ErrorEvent
	}
	if err != nil {
		return toStatus(err)
	}
	return nil
}

// WatchTurn implements orchestratorv1.ConversationServiceServer.
func (s *Conversations) WatchTurn(req *orchestratorv1.WatchTurnRequest, stream orchestratorv1.ConversationService_WatchTurnServer) error {
	ctx := stream.Context()
	sc, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return err
	}
	id, err := conversationID(req.GetConversationId())
	if err != nil {
		return err
	}
	// A deleted conversation's turns stay in the events stream until they
	// expire; they are not replayed.
	if _, err := s.store.Get(ctx, scopeOf(sc), id); err != nil {
		return toStatus(err)
	}
	ids, err := s.loop.EventIDs(ctx)
	if err != nil {
		return toStatus(err)
	}
	err = s.loop.Watch(ctx, sc, id, strings.TrimSpace(req.GetTurnId()), ids.Seq(req.GetAfterSequence()), func(ev *orchestratorv1.StreamMessageResponse) error {
		return stream.Send(&orchestratorv1.WatchTurnResponse{Event: withEventID(ids, ev)})
	})
	if err != nil {
		return toStatus(err)
	}
	return nil
}

// withEventID returns ev as a client sees it: its stream sequence as an
// event id. A shallow copy: the loop may hold on to ev.
func withEventID(ids *eventbus.EventIDs, ev *orchestratorv1.StreamMessageResponse) *orchestratorv1.StreamMessageResponse {
	return &orchestratorv1.StreamMessageResponse{Sequence: ids.ID(ev.GetSequence()), Event: ev.Event}
}

// SendMessage implements orchestratorv1.ConversationServiceServer. The
// call's deadline bounds the whole turn; a long agentic loop needs a client
// deadline longer than the server's default.
func (s *Conversations) SendMessage(ctx context.Context, req *orchestratorv1.SendMessageRequest) (*orchestratorv1.SendMessageResponse, error) {
	r, err := messageRequest(ctx, req.GetScope(), req.GetConversationId(), req.GetContent())
	if err != nil {
		return nil, err
	}
	out, err := s.loop.Send(ctx, r, nil)
	if err != nil {
		return nil, toStatus(err)
	}
	return &orchestratorv1.SendMessageResponse{Message: messageProto(out.Message), Completed: out.Completed}, nil
}

func messageRequest(ctx context.Context, scope *commonv1.Scope, id, content string) (chat.Request, error) {
	sc, err := grpcx.Scope(ctx, scope)
	if err != nil {
		return chat.Request{}, err
	}
	if id, err = conversationID(id); err != nil {
		return chat.Request{}, err
	}
	// The contract bounds content to 256 KiB; blank text is no message.
	if strings.TrimSpace(content) == "" {
		return chat.Request{}, grpcx.InvalidArgument("content", "is required")
	}
	return chat.Request{Scope: sc, ConversationID: id, Content: content}, nil
}

func conversationID(id string) (string, error) {
	id = strings.TrimSpace(id)
	if id == "" {
		return "", grpcx.InvalidArgument("conversation_id", "is required")
	}
	return id, nil
}

func conversationProto(c *conversation.Conversation, msgs []conversation.Message) *orchestratorv1.Conversation {
	out := &orchestratorv1.Conversation{
		Id:         c.ID,
		Scope:      &commonv1.Scope{TenantId: c.Scope.TenantID, ProjectId: c.Scope.ProjectID},
		Caller:     c.Caller,
		Title:      c.Title,
		Strategy:   c.Strategy,
		CreateTime: timestamppb.New(c.CreateTime),
		UpdateTime: timestamppb.New(c.UpdateTime),
	}
	for _, m := range msgs {
		out.Messages = append(out.Messages, messageProto(m))
	}
	return out
}

func messageProto(m conversation.Message) *orchestratorv1.ConversationMessage {
	out := &orchestratorv1.ConversationMessage{
		Id: m.ID, Role: string(m.Role), Content: m.Content, Reasoning: m.Reasoning,
		ToolCallId: m.ToolCallID, ToolName: m.ToolName, ToolError: m.ToolError, Cancelled: m.Cancelled,
		CreateTime: timestamppb.New(m.CreateTime),
	}
	for _, c := range m.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, &orchestratorv1.ToolInvocation{Id: c.ID, Name: c.Name, ArgumentsJson: c.Arguments})
	}
	return out
}
