package strategy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// Iteration is one model call of the loop.
type Iteration struct {
	// Number counts iterations of the turn from 1.
	Number int
	// Model is the logical model name, e.g. "chat".
	Model string
	// Mode is the streaming mode.
	Mode Mode
	// Messages is the conversation as the model sees it.
	Messages []*modelv1.Message
	// Tools are the tools offered; none means the model must answer.
	Tools []*modelv1.Tool
}

// Sink receives an iteration's output as it becomes visible to the client.
// Run calls it from its own goroutine only.
type Sink interface {
	// Reasoning receives chain-of-thought text.
	Reasoning(iteration int, text string)
	// Content receives answer text.
	Content(iteration int, text string)
}

// Turn is what the model answered in one iteration. When Run fails, it
// holds what had arrived before the failure.
type Turn struct {
	// Content is the answer text.
	Content string
	// Reasoning is the chain of thought.
	Reasoning string
	// ToolCalls are the calls the model asked for, in order, each with an id.
	ToolCalls []*modelv1.ToolCall
	// Finish says why generation stopped.
	Finish modelv1.FinishReason
	// Usage counts tokens; nil when the call failed before the end.
	Usage *modelv1.Usage
	// Provider and ProviderModel say who answered.
	Provider, ProviderModel string
	// ModelTime is the time spent waiting on ModelService: the unary call,
	// or the stream's opening and every Recv. The rest of an iteration's
	// time is the orchestrator's own.
	ModelTime time.Duration
}

// Run performs one iteration's model call with strategy s, shaped by
// it.Mode: in Progressive mode content and reasoning deltas go to sink as
// they arrive; in FinalOnly mode the iteration's whole reasoning goes to sink
// once the call completes, and its whole content only if the model made no
// tool calls (it is the final answer). Errors are ModelService's, wrapped.
func Run(ctx context.Context, client modelv1.ModelServiceClient, s Strategy, it Iteration, sink Sink) (Turn, error) {
	req := &modelv1.ChatRequest{Model: it.Model, Messages: it.Messages, Tools: it.Tools}
	if len(it.Tools) > 0 {
		req.ToolChoice = &modelv1.ToolChoice{Mode: modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO}
	}
	stream := s.Prepare(req, it.Mode)
	var (
		turn Turn
		err  error
	)
	if stream {
		turn, err = runStream(ctx, client, req, it, sink)
	} else {
		turn, err = runUnary(ctx, client, req)
	}
	if err != nil {
		return turn, err
	}
	for i, tc := range turn.ToolCalls {
		if tc.GetId() == "" {
			// The gateway generates ids; this keeps the history valid if a
			// provider path ever omits one.
			tc.Id = fmt.Sprintf("call_%d_%d", it.Number, i)
		}
	}
	if it.Mode == FinalOnly {
		if turn.Reasoning != "" {
			sink.Reasoning(it.Number, turn.Reasoning)
		}
		if len(turn.ToolCalls) == 0 && turn.Content != "" {
			sink.Content(it.Number, turn.Content)
		}
	}
	return turn, nil
}

func runUnary(ctx context.Context, client modelv1.ModelServiceClient, req *modelv1.ChatRequest) (Turn, error) {
	start := time.Now()
	resp, err := client.Chat(ctx, req)
	turn := Turn{ModelTime: time.Since(start)}
	if err != nil {
		return turn, fmt.Errorf("model call: %w", err)
	}
	msg := resp.GetMessage()
	turn.Content = msg.GetContent()
	turn.Reasoning = msg.GetReasoning()
	turn.ToolCalls = msg.GetToolCalls()
	turn.Finish = resp.GetFinishReason()
	turn.Usage = resp.GetUsage()
	turn.Provider, turn.ProviderModel = resp.GetProvider(), resp.GetProviderModel()
	return turn, nil
}

func runStream(ctx context.Context, client modelv1.ModelServiceClient, req *modelv1.ChatRequest, it Iteration, sink Sink) (Turn, error) {
	var (
		turn               Turn
		content, reasoning strings.Builder
		progressive        = it.Mode == Progressive
		waited             time.Duration
		ended              bool
	)
	collect := func() { turn.Content, turn.Reasoning = content.String(), reasoning.String() }
	start := time.Now()
	st, err := client.ChatStream(ctx, &modelv1.ChatStreamRequest{Request: req})
	waited += time.Since(start)
	if err != nil {
		turn.ModelTime = waited
		return turn, fmt.Errorf("model call: %w", err)
	}
	for {
		t := time.Now()
		chunk, err := st.Recv()
		waited += time.Since(t)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			collect()
			turn.ModelTime = waited
			return turn, fmt.Errorf("model stream: %w", err)
		}
		switch c := chunk.GetChunk().(type) {
		case *modelv1.ChatStreamResponse_ContentDelta:
			content.WriteString(c.ContentDelta)
			if progressive && c.ContentDelta != "" {
				sink.Content(it.Number, c.ContentDelta)
			}
		case *modelv1.ChatStreamResponse_ReasoningDelta:
			reasoning.WriteString(c.ReasoningDelta)
			if progressive && c.ReasoningDelta != "" {
				sink.Reasoning(it.Number, c.ReasoningDelta)
			}
		case *modelv1.ChatStreamResponse_ToolCall:
			turn.ToolCalls = append(turn.ToolCalls, proto.CloneOf(c.ToolCall))
		case *modelv1.ChatStreamResponse_End:
			ended = true
			turn.Finish = c.End.GetFinishReason()
			turn.Usage = c.End.GetUsage()
			turn.Provider, turn.ProviderModel = c.End.GetProvider(), c.End.GetProviderModel()
		}
	}
	collect()
	turn.ModelTime = waited
	if !ended {
		return turn, errors.New("model stream: ended without a final chunk")
	}
	return turn, nil
}
