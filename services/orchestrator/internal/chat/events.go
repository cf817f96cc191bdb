package chat

import (
	"context"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

// events serializes a turn's events onto its Emit (tool goroutines emit
// concurrently) and drops anything emitted after the turn has ended, when
// the stream may be gone.
//
// A resumable turn's events are stored (pub) before they are emitted, each
// emitted with its stream sequence; holding mu across both keeps the
// sequences in the order the client gets the events.
type events struct {
	mu     sync.Mutex // guards emit, closed and pub
	emit   Emit
	closed bool
	ctx    context.Context // the turn's, for the publishes' logs and traces
	pub    *publisher      // nil: the turn is not resumable
}

func (e *events) send(ev *orchestratorv1.StreamMessageResponse) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.emit == nil {
		return
	}
	ev.Sequence = e.pub.publish(e.ctx, ev)
	_ = e.emit(ev) // a client that went away cancels the turn's context, or leaves a resumable turn to its watches
}

func (e *events) close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
}

// Reasoning implements strategy.Sink.
func (e *events) Reasoning(iteration int, text string) {
	e.send(&orchestratorv1.StreamMessageResponse{Event: &orchestratorv1.StreamMessageResponse_ReasoningChunk{
		ReasoningChunk: &orchestratorv1.ReasoningChunk{Content: text, Iteration: int32(iteration)},
	}})
}

// Content implements strategy.Sink.
func (e *events) Content(iteration int, text string) {
	e.send(&orchestratorv1.StreamMessageResponse{Event: &orchestratorv1.StreamMessageResponse_ResponseChunk{
		ResponseChunk: &orchestratorv1.ResponseChunk{Content: text, Iteration: int32(iteration)},
	}})
}

func (e *events) status(kind, message string) {
	e.send(&orchestratorv1.StreamMessageResponse{Event: &orchestratorv1.StreamMessageResponse_StatusUpdate{
		StatusUpdate: &orchestratorv1.StatusUpdate{Kind: kind, Message: message},
	}})
}

// retrieved announces the passages of the turn's initial search.
func (e *events) retrieved(message string, passages []*orchestratorv1.RetrievedPassage) {
	e.send(&orchestratorv1.StreamMessageResponse{Event: &orchestratorv1.StreamMessageResponse_StatusUpdate{
		StatusUpdate: &orchestratorv1.StatusUpdate{Kind: StatusRetrieval, Message: message, Passages: passages},
	}})
}

func (e *events) toolStart(iteration int, c tools.Call) {
	e.send(&orchestratorv1.StreamMessageResponse{Event: &orchestratorv1.StreamMessageResponse_ToolCallStart{
		ToolCallStart: &orchestratorv1.ToolCallStart{CallId: c.ID, ToolName: c.Name, ArgumentsJson: string(c.Arguments), Iteration: int32(iteration)},
	}})
}

func (e *events) toolResult(c tools.Call, r tools.Result) {
	e.send(&orchestratorv1.StreamMessageResponse{Event: &orchestratorv1.StreamMessageResponse_ToolCallResult{
		ToolCallResult: &orchestratorv1.ToolCallResult{CallId: c.ID, ToolName: c.Name, Result: r.Content, IsError: r.IsError, Duration: durationpb.New(r.Duration)},
	}})
}

func (e *events) completed(c *orchestratorv1.Completed) {
	e.send(&orchestratorv1.StreamMessageResponse{Event: &orchestratorv1.StreamMessageResponse_Completed{Completed: c}})
}

func (e *events) failed(err error) {
	st := turnStatus(err)
	e.send(&orchestratorv1.StreamMessageResponse{Event: &orchestratorv1.StreamMessageResponse_Error{
		Error: &orchestratorv1.ErrorEvent{Code: codeName(st), Message: st.Message()},
	}})
}

// codeName spells a status code the way ErrorEvent.code documents it, e.g.
// "UNAVAILABLE".
func codeName(st *status.Status) string { return code.Code(st.Code()).String() }
