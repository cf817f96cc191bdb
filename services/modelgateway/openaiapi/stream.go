package openaiapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// chunk is a chat.completion.chunk object. Usage is absent unless the
// request set stream_options.include_usage; then it is null on every
// chunk but the last, which carries it with no choices.
type chunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint *string       `json:"system_fingerprint"`
	Choices           []chunkChoice `json:"choices"`
	Usage             any           `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int       `json:"index"`
	Delta        delta     `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type delta struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCall `json:"tool_calls,omitempty"`
}

// nullUsage is the usage of every chunk but the last when usage is asked for.
var nullUsage = json.RawMessage("null")

// chunkWriter writes one stream's events. A timer shares the response
// with the handler: when the stream stays silent for the keep-alive
// interval it sends a ": keep-alive" comment (answering 200 first if the
// model has not started yet), so that proxies and load balancers with idle
// timeouts keep the connection while a model thinks or queues. OpenAI's
// SDKs skip comments.
type chunkWriter struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	base  chunk
	buf   []byte
	role  bool // the role has been sent (in the first delta)
	calls int  // tool calls sent, the next one's index
	// caller is who asked, for the usage ledger.
	caller Caller

	every time.Duration
	timer *time.Timer
	mu    sync.Mutex // guards started, done and every write to w
	// started is set once 200 and the event-stream headers are sent.
	started bool
	// done is set when the handler takes the response back: the timer
	// writes nothing after it.
	done bool
}

func newChunkWriter(w http.ResponseWriter, every time.Duration, base chunk, caller Caller) *chunkWriter {
	cw := &chunkWriter{w: w, rc: http.NewResponseController(w), buf: make([]byte, 0, 512), base: base, caller: caller, every: every}
	cw.mu.Lock() // the timer's callback takes it too: it sees cw.timer set
	cw.timer = time.AfterFunc(every, cw.keepAlive)
	cw.mu.Unlock()
	return cw
}

// startLocked sends the status line and headers of the stream. cw.mu is held.
func (cw *chunkWriter) startLocked() {
	hd := cw.w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no") // proxies must not hold chunks back
	cw.w.WriteHeader(http.StatusOK)
	cw.started = true
}

// keepAlive is the timer's: a comment after a silence.
func (cw *chunkWriter) keepAlive() {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if cw.done {
		return
	}
	if !cw.started {
		cw.startLocked()
	}
	_, _ = cw.w.Write([]byte(": keep-alive\n\n"))
	_ = cw.rc.Flush()
	cw.timer.Reset(cw.every)
}

// reclaim takes the response back before the stream started, for an HTTP
// error; it reports false when the stream has started (the error must
// then be an event).
func (cw *chunkWriter) reclaim() bool {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if cw.started {
		return false
	}
	cw.done = true
	return true
}

// close stops the keep-alives; the handler may then return.
func (cw *chunkWriter) close() {
	cw.mu.Lock()
	cw.done = true
	cw.mu.Unlock()
	cw.timer.Stop()
}

// write sends c as one event, flushed unless more is to follow at once
// (then the next flushed event carries it).
func (cw *chunkWriter) write(c *chunk, flush bool) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return cw.eventFlush(b, flush)
}

// event sends data as one event and flushes it, starting the stream if
// it has not started.
func (cw *chunkWriter) event(data []byte) error { return cw.eventFlush(data, true) }

// eventFlush sends data as one event, flushing it when flush is set.
func (cw *chunkWriter) eventFlush(data []byte, flush bool) error {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if !cw.started {
		cw.startLocked()
	}
	cw.buf = append(append(append(cw.buf[:0], "data: "...), data...), "\n\n"...)
	if _, err := cw.w.Write(cw.buf); err != nil {
		return err
	}
	cw.timer.Reset(cw.every)
	if !flush {
		return nil
	}
	return cw.rc.Flush()
}

// delta sends one delta; the first carries the role, as OpenAI's first
// chunk does.
func (cw *chunkWriter) delta(d delta, finish *string, flush bool) error {
	if !cw.role {
		d.Role, cw.role = "assistant", true
	}
	c := cw.base
	c.Choices = []chunkChoice{{Index: 0, Delta: d, FinishReason: finish}}
	return cw.write(&c, flush)
}

// chatStream serves a chat completion with stream: true. It waits for the
// first chunk before answering, so that a request that fails at once
// (unknown model, no provider, rate limited) gets its HTTP status and
// Retry-After like a unary one, unless the model stays silent past the
// keep-alive interval: then the stream starts with a keep-alive comment.
// After the stream started, a failure is an event holding an error
// object, which OpenAI's SDKs raise, and no [DONE].
func (h *Handler) chatStream(w http.ResponseWriter, r *http.Request, cr *chatRequest) {
	st, err := h.opts.Client.ChatStream(h.outgoing(r), &modelv1.ChatStreamRequest{Request: cr.req})
	if err != nil {
		h.count(r, "chat_stream", err)
		h.fail(w, r, err)
		return
	}
	base := chunk{ID: completionID(), Object: "chat.completion.chunk", Created: time.Now().Unix(), Model: cr.req.GetModel()}
	if cr.includeUsage {
		base.Usage = nullUsage
	}
	cw := newChunkWriter(w, h.opts.KeepAlive, base, h.caller(r))
	defer cw.close()
	first, err := st.Recv()
	if errors.Is(err, io.EOF) {
		err = status.Error(codes.Internal, "the model stream ended before its first chunk")
	}
	if err == nil {
		err = h.relay(cw, st, first, cr)
	}
	if err != nil && r.Context().Err() != nil {
		// The client left (a failed write, or the cancelled call): 499 in
		// the request counter, not a server error.
		err = status.FromContextError(r.Context().Err()).Err()
	}
	h.count(r, "chat_stream", err)
	if err == nil || r.Context().Err() != nil {
		return // done, or the client left: nobody reads an error
	}
	if cw.reclaim() {
		h.fail(w, r, err)
		return
	}
	f := failureOf(err)
	if f.status >= 500 {
		h.opts.Log.WarnContext(r.Context(), "openai api stream failed", "path", r.URL.Path, "code", status.Code(err).String(), "error", err.Error())
	}
	b, _ := json.Marshal(errorBody{Error: f.body})
	_ = cw.event(b)
}

// relay turns ModelService chunks into OpenAI chunks until the stream's
// end, then sends usage (when asked for) and [DONE].
func (h *Handler) relay(cw *chunkWriter, st interface {
	Recv() (*modelv1.ChatStreamResponse, error)
}, m *modelv1.ChatStreamResponse, cr *chatRequest) error {
	for {
		var err error
		switch c := m.GetChunk().(type) {
		case *modelv1.ChatStreamResponse_ContentDelta:
			err = cw.delta(delta{Content: &c.ContentDelta}, nil, true)
		case *modelv1.ChatStreamResponse_ReasoningDelta:
			err = cw.delta(delta{ReasoningContent: &c.ReasoningDelta}, nil, true)
		case *modelv1.ChatStreamResponse_ToolCall:
			// ModelService assembles each call from the provider's
			// fragments; it goes out whole, as one delta with its index.
			i := cw.calls
			cw.calls++
			tc := c.ToolCall
			err = cw.delta(delta{ToolCalls: []toolCall{{Index: &i, ID: tc.GetId(), Type: "function",
				Function: functionCall{Name: tc.GetName(), Arguments: tc.GetArgumentsJson()}}}}, nil, true)
		case *modelv1.ChatStreamResponse_End:
			return h.finish(cw, c.End, cr)
		}
		if err != nil {
			return err
		}
		if m, err = st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				err = status.Error(codes.Unavailable, "the model stream ended without its last chunk")
			}
			return err
		}
	}
}

// finish sends the chunk with the finish reason, the usage chunk when the
// request asked for it, and [DONE], in one flush: they are ready at the
// same moment, and a write and a client wake-up each would be spent for
// nothing.
func (h *Handler) finish(cw *chunkWriter, end *modelv1.StreamEnd, cr *chatRequest) error {
	h.usage.add(cw.caller, cr.req.GetModel(), end.GetUsage())
	reason := finishReason(end.GetFinishReason())
	if err := cw.delta(delta{}, &reason, false); err != nil {
		return err
	}
	if cr.includeUsage {
		c := cw.base
		c.Choices = []chunkChoice{}
		c.Usage = usageOf(end.GetUsage())
		if err := cw.write(&c, false); err != nil {
			return err
		}
	}
	return cw.event([]byte("[DONE]"))
}
