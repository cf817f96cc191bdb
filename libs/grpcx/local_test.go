package grpcx_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/priority"
)

// localModels answers as each Local test needs: Chat echoes the caller's
// tenant and model, and changes its request and answer after use; the
// stream sends its chunks through one reused message.
type localModels struct {
	modelv1.UnimplementedModelServiceServer
	returned chan *modelv1.ChatResponse // Chat's answers, changed after return
	ended    chan error                 // ChatStream's returns
}

func (s *localModels) Chat(ctx context.Context, in *modelv1.ChatRequest) (*modelv1.ChatResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if _, ok := metadata.FromOutgoingContext(ctx); ok {
		if out, _ := metadata.FromOutgoingContext(ctx); len(out) > 0 {
			return nil, status.Error(codes.Internal, "the caller's outgoing metadata reached the handler's outgoing context")
		}
	}
	if !priority.IsInteractive(ctx) {
		return nil, status.Error(codes.Internal, "the handler's context is not marked interactive")
	}
	switch in.GetModel() {
	case "panic":
		panic("handler bug")
	case "plain-error":
		return nil, errors.New("a driver's text the caller must not see")
	case "deadline":
		if _, ok := ctx.Deadline(); !ok {
			return nil, status.Error(codes.Internal, "no default deadline")
		}
	}
	out := &modelv1.ChatResponse{Model: in.GetModel(), Provider: first(md.Get(grpcx.TenantMetadataKey))}
	in.Model = "changed by the handler"
	s.returned <- out
	return out, nil
}

func (s *localModels) ChatStream(in *modelv1.ChatStreamRequest, st grpc.ServerStreamingServer[modelv1.ChatStreamResponse]) error {
	err := func() error {
		msg := &modelv1.ChatStreamResponse{}
		for _, w := range []string{"one", "two", "three"} {
			msg.Chunk = &modelv1.ChatStreamResponse_ContentDelta{ContentDelta: w}
			if err := st.Send(msg); err != nil {
				return err
			}
		}
		switch in.GetRequest().GetModel() {
		case "fail":
			return status.Error(codes.ResourceExhausted, "provider busy")
		case "hang":
			for {
				if err := st.Send(&modelv1.ChatStreamResponse{Chunk: &modelv1.ChatStreamResponse_ContentDelta{ContentDelta: "more"}}); err != nil {
					return err
				}
			}
		}
		return nil
	}()
	s.ended <- err
	return err
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func startLocal(t *testing.T) (*localModels, modelv1.ModelServiceClient) {
	t.Helper()
	impl := &localModels{returned: make(chan *modelv1.ChatResponse, 10), ended: make(chan error, 10)}
	local := grpcx.NewLocal(grpcx.ServerConfig{}, slog.New(slog.DiscardHandler))
	modelv1.RegisterModelServiceServer(local, impl)
	return impl, modelv1.NewModelServiceClient(local)
}

func chatRequest(model string) *modelv1.ChatRequest {
	return &modelv1.ChatRequest{Model: model, Messages: []*modelv1.Message{{Role: modelv1.Role_ROLE_USER, Content: "hi"}}}
}

// A unary call through Local arrives as over the network: outgoing
// metadata as incoming, a default deadline, the request validated before
// the handler, a panic or an unexpected error as INTERNAL without its text,
// and messages copied both ways.
func TestLocalUnary(t *testing.T) {
	impl, client := startLocal(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), grpcx.TenantMetadataKey, "acme")

	req := chatRequest("chat")
	resp, err := client.Chat(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetProvider() != "acme" || resp.GetModel() != "chat" {
		t.Errorf("answer %v: want the caller's tenant acme and model chat", resp)
	}
	if req.GetModel() != "chat" {
		t.Errorf("the handler's change reached the caller's request: %q", req.GetModel())
	}
	(<-impl.returned).Model = "changed after return"
	if resp.GetModel() != "chat" {
		t.Errorf("the handler's later change reached the caller's answer: %q", resp.GetModel())
	}

	if _, err := client.Chat(ctx, chatRequest("deadline")); err != nil {
		t.Errorf("deadline: %v", err)
	}
	<-impl.returned

	for _, tc := range []struct {
		name string
		req  *modelv1.ChatRequest
		code codes.Code
	}{
		{"invalid request", &modelv1.ChatRequest{}, codes.InvalidArgument},
		{"panic", chatRequest("panic"), codes.Internal},
		{"plain error", chatRequest("plain-error"), codes.Internal},
	} {
		_, err := client.Chat(ctx, tc.req)
		if st := status.Convert(err); st.Code() != tc.code || errors.Is(err, io.EOF) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		} else if tc.name == "plain error" && st.Message() != "internal error" {
			t.Errorf("plain error reached the caller as %q", st.Message())
		}
	}
	select {
	case r := <-impl.returned:
		t.Errorf("a refused request reached the handler: %v", r)
	default:
	}
	if _, err := client.Embed(ctx, &modelv1.EmbedRequest{Model: "embed", Inputs: []string{"x"}}); status.Code(err) != codes.Unimplemented {
		t.Errorf("unimplemented method: %v", err)
	}
}

// A server stream through Local delivers every message in order, each a
// copy (the handler reuses one), then io.EOF or the handler's status; a
// caller that cancels releases the handler.
func TestLocalServerStream(t *testing.T) {
	impl, client := startLocal(t)
	recvAll := func(st grpc.ServerStreamingClient[modelv1.ChatStreamResponse]) ([]string, error) {
		var got []string
		var kept []*modelv1.ChatStreamResponse
		for {
			m, err := st.Recv()
			if err != nil {
				for i, k := range kept {
					if k.GetContentDelta() != got[i] {
						t.Errorf("message %d changed after delivery: %q, was %q", i, k.GetContentDelta(), got[i])
					}
				}
				return got, err
			}
			got = append(got, m.GetContentDelta())
			kept = append(kept, m)
		}
	}

	st, err := client.ChatStream(context.Background(), &modelv1.ChatStreamRequest{Request: chatRequest("chat")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvAll(st)
	if err != io.EOF || len(got) != 3 || got[0] != "one" || got[2] != "three" {
		t.Errorf("stream: %q then %v, want one two three then EOF", got, err)
	}
	<-impl.ended

	st, _ = client.ChatStream(context.Background(), &modelv1.ChatStreamRequest{Request: chatRequest("fail")})
	got, err = recvAll(st)
	if status.Code(err) != codes.ResourceExhausted || len(got) != 3 {
		t.Errorf("failing stream: %q then %v, want 3 messages then RESOURCE_EXHAUSTED", got, err)
	}
	<-impl.ended

	st, err = client.ChatStream(context.Background(), &modelv1.ChatStreamRequest{})
	if err != nil {
		t.Fatal(err) // the status comes with the first Recv, as over the network
	}
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("invalid stream request: %v, want INVALID_ARGUMENT", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	st, _ = client.ChatStream(ctx, &modelv1.ChatStreamRequest{Request: chatRequest("hang")})
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-impl.ended:
		if status.Code(err) != codes.Canceled {
			t.Errorf("handler of a cancelled stream returned %v, want CANCELLED", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler of a cancelled stream is still sending")
	}
	if _, err := st.Recv(); err == nil {
		t.Error("Recv after cancel succeeded")
	}
}
