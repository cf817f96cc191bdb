package chat

import (
	"context"
	"sync"
	"time"

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
//
// Text deltas are gathered: the first delta of a run of text (answer or
// reasoning, one iteration) goes at once, so the time to the first token
// is the model's; the deltas after it go as one event at most
// coalesceWindow later, or as soon as any other event comes. A model
// streams a token at a time, and each event is a stored message and a
// round trip to the event bus.
type events struct {
	mu      sync.Mutex // guards everything below
	emit    Emit
	closed  bool
	ctx     context.Context                       // the turn's, for the publishes' logs and traces
	pub     *publisher                            // nil: the turn is not resumable
	last    textKey                               // what the last event sent was, when text
	pending *orchestratorv1.StreamMessageResponse // text gathered after it, of the same key
	timer   *time.Timer                           // sends pending
}

// coalesceWindow is how long text deltas after the first of a run gather
// before they are sent.
const coalesceWindow = 25 * time.Millisecond

// textKey says which run of text an event belongs to; the zero key is any
// other event.
type textKey struct {
	text      bool
	reasoning bool
	iteration int32
}

func keyOf(ev *orchestratorv1.StreamMessageResponse) textKey {
	switch e := ev.GetEvent().(type) {
	case *orchestratorv1.StreamMessageResponse_ResponseChunk:
		return textKey{text: true, iteration: e.ResponseChunk.GetIteration()}
	case *orchestratorv1.StreamMessageResponse_ReasoningChunk:
		return textKey{text: true, reasoning: true, iteration: e.ReasoningChunk.GetIteration()}
	}
	return textKey{}
}

func (e *events) send(ev *orchestratorv1.StreamMessageResponse) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.emit == nil {
		return
	}
	k := keyOf(ev)
	if k.text && k == e.last {
		if e.pending == nil {
			e.pending = ev
			e.timer = time.AfterFunc(coalesceWindow, e.flush)
		} else {
			appendText(e.pending, ev)
		}
		return
	}
	e.flushLocked()
	e.sendLocked(ev)
	e.last = k
}

// appendText adds the text of ev to to, both of the same textKey.
func appendText(to, ev *orchestratorv1.StreamMessageResponse) {
	if c := to.GetResponseChunk(); c != nil {
		c.Content += ev.GetResponseChunk().GetContent()
		return
	}
	to.GetReasoningChunk().Content += ev.GetReasoningChunk().GetContent()
}

// flush sends the gathered text, when the window ends.
func (e *events) flush() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.flushLocked()
	}
}

func (e *events) flushLocked() {
	if e.pending == nil {
		return
	}
	e.timer.Stop()
	ev := e.pending
	e.pending, e.timer = nil, nil
	e.sendLocked(ev)
}

func (e *events) sendLocked(ev *orchestratorv1.StreamMessageResponse) {
	e.publishLocked(ev)
	_ = e.emit(ev) // a client that went away cancels the turn's context, or leaves a resumable turn to its watches
}

// publishLocked stores ev in the turn's events, setting its sequence.
func (e *events) publishLocked(ev *orchestratorv1.StreamMessageResponse) {
	ev.Sequence = e.pub.publish(e.ctx, ev)
	if ts := ev.GetTurnStarted(); ts != nil && ev.Sequence == 0 {
		// Not stored: no watch will find the turn, so its client must not
		// count on resuming it.
		ts.Resumable = false
	}
}

// sendLast sends the turn's last event: stored first, then between runs
// (the turn frees its conversation), then the client gets it. So a client
// may send the next message the moment it has the event, and a delete
// that the freed conversation lets through finds the event stored, and
// purges it with the turn's others. between runs even when nothing is
// sent (a turn without a client, or one already closed).
func (e *events) sendLast(ev *orchestratorv1.StreamMessageResponse, between func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.emit == nil {
		between()
		return
	}
	e.flushLocked()
	e.publishLocked(ev)
	between()
	_ = e.emit(ev)
	e.last = textKey{}
}

// close sends any gathered text and drops what comes after.
func (e *events) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed && e.emit != nil {
		e.flushLocked()
	}
	e.closed = true
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

// completed sends Completed, the turn's last event (see sendLast).
func (e *events) completed(c *orchestratorv1.Completed, between func()) {
	e.sendLast(&orchestratorv1.StreamMessageResponse{Event: &orchestratorv1.StreamMessageResponse_Completed{Completed: c}}, between)
}

// failed sends the ErrorEvent that ends a failed turn (see sendLast).
func (e *events) failed(err error, between func()) {
	st := turnStatus(err)
	e.sendLast(&orchestratorv1.StreamMessageResponse{Event: &orchestratorv1.StreamMessageResponse_Error{
		Error: &orchestratorv1.ErrorEvent{Code: codeName(st), Message: st.Message()},
	}}, between)
}

// codeName spells a status code the way ErrorEvent.code documents it, e.g.
// "UNAVAILABLE".
func codeName(st *status.Status) string { return code.Code(st.Code()).String() }
