// Package grpcapi implements agentmesh.model.v1.ModelService on the
// dispatcher: it validates requests (InvalidArgument names the field),
// converts between the contract and the gateway's types, streams normalised
// chunks, and maps failures to status codes.
package grpcapi

import (
	"context"
	"runtime"

	"google.golang.org/protobuf/types/known/durationpb"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/dispatch"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
)

// Server is the ModelService implementation.
type Server struct {
	modelv1.UnimplementedModelServiceServer
	gw *dispatch.Gateway
}

var _ modelv1.ModelServiceServer = (*Server)(nil)

// New returns a Server dispatching through gw.
func New(gw *dispatch.Gateway) *Server { return &Server{gw: gw} }

// Chat runs one completion.
func (s *Server) Chat(ctx context.Context, in *modelv1.ChatRequest) (*modelv1.ChatResponse, error) {
	req, schema, err := chatRequest(in, "")
	if err != nil {
		return nil, err
	}
	res, err := s.gw.Chat(forTenant(ctx), dispatch.Call{Logical: in.GetModel(), Request: req, Schema: schema})
	if err != nil {
		return nil, toStatus(err)
	}
	r := res.Response
	return &modelv1.ChatResponse{
		Message:       message(&r.Message),
		FinishReason:  finish(r.Finish),
		Usage:         usage(r.Usage),
		Provider:      res.Provider,
		ProviderModel: res.ProviderModel,
		Model:         in.GetModel(),
		Attempts:      int32(res.Attempts),
		Latency:       durationpb.New(res.Latency),
	}, nil
}

// ChatStream runs one completion and streams normalised chunks.
func (s *Server) ChatStream(in *modelv1.ChatStreamRequest, stream modelv1.ModelService_ChatStreamServer) error {
	req, schema, err := chatRequest(in.GetRequest(), "request.")
	if err != nil {
		return err
	}
	sentFirst := false
	res, err := s.gw.Stream(forTenant(stream.Context()), dispatch.Call{Logical: in.GetRequest().GetModel(), Request: req, Schema: schema},
		func(ev llm.Event) error {
			out := &modelv1.ChatStreamResponse{}
			switch ev.Kind {
			case llm.EventContent:
				out.Chunk = &modelv1.ChatStreamResponse_ContentDelta{ContentDelta: ev.Text}
			case llm.EventReasoning:
				out.Chunk = &modelv1.ChatStreamResponse_ReasoningDelta{ReasoningDelta: ev.Text}
			case llm.EventToolCall:
				out.Chunk = &modelv1.ChatStreamResponse_ToolCall{ToolCall: toolCall(ev.ToolCall)}
			default:
				return nil
			}
			if err := stream.Send(out); err != nil {
				return err
			}
			if !sentFirst {
				// Let gRPC's writer goroutine put the first chunk on the
				// wire before this one parses what arrived with it: time
				// to first token is what a streaming caller waits on.
				sentFirst = true
				runtime.Gosched()
			}
			return nil
		})
	if err != nil {
		return toStatus(err)
	}
	r := res.Response
	return stream.Send(&modelv1.ChatStreamResponse{Chunk: &modelv1.ChatStreamResponse_End{End: &modelv1.StreamEnd{
		FinishReason:     finish(r.Finish),
		Usage:            usage(r.Usage),
		Provider:         res.Provider,
		ProviderModel:    res.ProviderModel,
		TimeToFirstChunk: durationpb.New(res.TimeToFirstChunk),
	}}})
}

// Embed turns texts into vectors.
func (s *Server) Embed(ctx context.Context, in *modelv1.EmbedRequest) (*modelv1.EmbedResponse, error) {
	// The contract requires the model and 1-2048 inputs, and bounds dimensions.
	res, err := s.gw.Embed(forTenant(ctx), in.GetModel(), &llm.EmbedRequest{Inputs: in.GetInputs(), Dimensions: int(in.GetDimensions())})
	if err != nil {
		return nil, toStatus(err)
	}
	out := &modelv1.EmbedResponse{
		Embeddings:    make([]*modelv1.Embedding, len(res.Response.Vectors)),
		Provider:      res.Provider,
		ProviderModel: res.ProviderModel,
		Usage:         usage(res.Response.Usage),
	}
	for i, v := range res.Response.Vectors {
		out.Embeddings[i] = &modelv1.Embedding{Values: v}
	}
	return out, nil
}

// ListModels lists the logical models and whether a provider serves each.
func (s *Server) ListModels(context.Context, *modelv1.ListModelsRequest) (*modelv1.ListModelsResponse, error) {
	out := &modelv1.ListModelsResponse{}
	for _, m := range s.gw.Models() {
		lm := &modelv1.LogicalModel{Name: m.Name, Available: m.Available}
		for _, t := range m.Targets {
			lm.Targets = append(lm.Targets, &modelv1.RouteTarget{Provider: t.Provider, ProviderModel: t.Model, Available: t.Available, Detail: t.Detail})
		}
		out.Models = append(out.Models, lm)
	}
	return out, nil
}
