// Package ollama adapts Ollama's native API (ollama/ollama docs/api.md):
// POST /api/chat with NDJSON streaming, tool arguments as JSON objects, ids
// generated where none come, tool calls reported as such even though the
// final line says done_reason "stop", errors as {"error": "..."} lines even
// mid-stream; POST /api/embed; GET /api/tags.
package ollama

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/openaiwire"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/upstream"
)

// Client is the Ollama adapter. Safe for concurrent use.
type Client struct {
	up *upstream.Client
}

// New returns the adapter sending through up (base URL = OLLAMA_HOST).
func New(up *upstream.Client) *Client { return &Client{up: up} }

// ChatRequest is the body of POST /api/chat.
type ChatRequest struct {
	Model    string            `json:"model"`
	Messages []Message         `json:"messages"`
	Tools    []openaiwire.Tool `json:"tools,omitempty"`
	// Think is a bool or "low" | "medium" | "high"; nil leaves the model's default.
	Think any `json:"think,omitempty"`
	// Format is "json" or a JSON schema.
	Format    json.RawMessage `json:"format,omitempty"`
	Options   map[string]any  `json:"options,omitempty"`
	Stream    bool            `json:"stream"`
	KeepAlive any             `json:"keep_alive,omitempty"`
}

// Message is one message of /api/chat.
type Message struct {
	Role      string     `json:"role"`
	Content   string     `json:"content"`
	Thinking  string     `json:"thinking,omitempty"`
	Images    []string   `json:"images,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	ToolName  string     `json:"tool_name,omitempty"`
}

// ToolCall is a tool call; arguments are a JSON object.
type ToolCall struct {
	ID       string `json:"id,omitempty"`
	Function struct {
		Index     *int            `json:"index,omitempty"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// ChatResponse is one NDJSON line (or the whole non-streaming answer).
type ChatResponse struct {
	Model           string  `json:"model"`
	Message         Message `json:"message"`
	Done            bool    `json:"done"`
	DoneReason      string  `json:"done_reason"`
	TotalDuration   int64   `json:"total_duration"`
	PromptEvalCount int64   `json:"prompt_eval_count"`
	EvalCount       int64   `json:"eval_count"`
	Error           string  `json:"error"`
}

// Encode builds the /api/chat body for req.
func Encode(req *llm.Request, stream bool) (*ChatRequest, error) {
	out := &ChatRequest{Model: req.Model, Stream: stream}
	opts := map[string]any{}
	o := req.Options
	if o.Temperature != nil {
		opts["temperature"] = *o.Temperature
	}
	if o.TopP != nil {
		opts["top_p"] = *o.TopP
	}
	if o.TopK != nil {
		opts["top_k"] = *o.TopK
	}
	if o.MaxTokens != nil {
		opts["num_predict"] = *o.MaxTokens
	}
	if len(o.Stop) > 0 {
		opts["stop"] = o.Stop
	}
	if o.Seed != nil {
		opts["seed"] = *o.Seed
	}
	if o.NumCtx != nil {
		opts["num_ctx"] = *o.NumCtx
	}
	for k, v := range req.Extra {
		switch k {
		case "keep_alive":
			out.KeepAlive = v
		case "options":
			if m, ok := v.(map[string]any); ok {
				for ok, ov := range m {
					if _, set := opts[ok]; !set {
						opts[ok] = ov
					}
				}
			}
		}
	}
	if len(opts) > 0 {
		out.Options = opts
	}
	switch t := req.Thinking; {
	case t.Enabled != nil && !*t.Enabled:
		out.Think = false
	case t.Effort != "":
		out.Think = t.Effort
	case t.Enabled != nil:
		out.Think = true
	}
	switch req.ResponseFormat.Type {
	case llm.FormatJSONObject:
		out.Format = json.RawMessage(`"json"`)
	case llm.FormatJSONSchema:
		out.Format = req.ResponseFormat.Schema // native constrained output
	}
	replay := req.Replay
	if replay == llm.ReplayDefault {
		replay = llm.ReplayNone
	}
	callNames := map[string]string{}
	out.Messages = make([]Message, 0, len(req.Messages))
	for i := range req.Messages {
		m := &req.Messages[i]
		wm := Message{Role: m.Role.String(), Content: m.Content}
		for _, img := range m.Images {
			wm.Images = append(wm.Images, base64.StdEncoding.EncodeToString(img.Data))
		}
		for j, tc := range m.ToolCalls {
			callNames[tc.ID] = tc.Name
			var c ToolCall
			idx := j
			c.Function.Index = &idx
			c.Function.Name = tc.Name
			args := strings.TrimSpace(tc.Arguments)
			if args == "" {
				args = "{}"
			}
			if !json.Valid([]byte(args)) {
				return nil, llm.Errorf("ollama", llm.KindInvalidRequest, "tool call %q has arguments that are not JSON", tc.Name)
			}
			c.Function.Arguments = json.RawMessage(args)
			wm.ToolCalls = append(wm.ToolCalls, c)
		}
		if m.Reasoning != "" && (replay == llm.ReplayAll || (replay == llm.ReplayToolCalls && len(m.ToolCalls) > 0)) {
			wm.Thinking = m.Reasoning
		}
		if m.Role == llm.RoleTool {
			wm.ToolName = m.ToolName
			if wm.ToolName == "" {
				wm.ToolName = callNames[m.ToolCallID]
			}
		}
		out.Messages = append(out.Messages, wm)
	}
	tools := req.Tools
	switch req.ToolChoice.Mode {
	case llm.ToolChoiceNone:
		tools = nil // Ollama has no tool_choice: offer nothing
	case llm.ToolChoiceNamed:
		for _, t := range req.Tools {
			if t.Name == req.ToolChoice.Name {
				tools = []llm.Tool{t}
			}
		}
	}
	for _, t := range tools {
		params := t.Parameters
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out.Tools = append(out.Tools, openaiwire.Tool{Type: "function", Function: openaiwire.FunctionDef{Name: t.Name, Description: t.Description, Parameters: params}})
	}
	return out, nil
}

// arguments turns Ollama's argument object into JSON text.
func arguments(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "{}"
	}
	if raw[0] == '"' { // some models send a JSON string holding the object
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) == nil {
		return b.String()
	}
	return string(raw)
}

// calls collects tool calls across chunks.
type calls struct {
	list []indexed
}

type indexed struct {
	index int
	call  llm.ToolCall
}

func (c *calls) add(tcs []ToolCall) {
	for _, tc := range tcs {
		idx := len(c.list)
		if tc.Function.Index != nil {
			idx = *tc.Function.Index
		}
		args := arguments(tc.Function.Arguments)
		id := tc.ID
		if id == "" {
			id = openaiwire.StableID(idx, tc.Function.Name, args)
		}
		c.list = append(c.list, indexed{index: idx, call: llm.ToolCall{ID: id, Name: tc.Function.Name, Arguments: args}})
	}
}

func (c *calls) sorted() []llm.ToolCall {
	sort.SliceStable(c.list, func(i, j int) bool { return c.list[i].index < c.list[j].index })
	out := make([]llm.ToolCall, len(c.list))
	for i, x := range c.list {
		out[i] = x.call
	}
	return out
}

func finish(doneReason string, haveCalls bool) llm.FinishReason {
	if haveCalls {
		return llm.FinishToolCalls // Ollama still says "stop"
	}
	if f := llm.ParseFinish(doneReason); f != llm.FinishUnspecified {
		return f
	}
	return llm.FinishStop
}

func usage(r *ChatResponse) llm.Usage {
	return llm.Usage{Prompt: r.PromptEvalCount, Completion: r.EvalCount, Total: r.PromptEvalCount + r.EvalCount}
}

func (c *Client) post(ctx context.Context, path string, v any) (*upstream.Call, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, llm.Errorf(c.up.Provider, llm.KindInternal, "encode request: %v", err)
	}
	return c.up.Post(ctx, path, b)
}

// Chat sends a non-streaming /api/chat.
func (c *Client) Chat(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	body, err := Encode(req, false)
	if err != nil {
		return nil, err
	}
	call, err := c.post(ctx, "/api/chat", body)
	if err != nil {
		return nil, err
	}
	defer call.Close()
	call.Unary()
	var r ChatResponse
	if err := json.NewDecoder(call.Body).Decode(&r); err != nil {
		return nil, call.DecodeFail(err)
	}
	if r.Error != "" {
		return nil, &llm.Error{Provider: c.up.Provider, Kind: llm.KindServer, Message: c.up.Scrub(r.Error)}
	}
	var cs calls
	cs.add(r.Message.ToolCalls)
	resp := &llm.Response{Model: r.Model, Usage: usage(&r)}
	resp.Message = llm.Message{Role: llm.RoleAssistant, Content: r.Message.Content, Reasoning: r.Message.Thinking, ToolCalls: cs.sorted()}
	resp.Finish = finish(r.DoneReason, len(resp.Message.ToolCalls) > 0)
	if resp.Model == "" {
		resp.Model = req.Model
	}
	return resp, nil
}

// Stream sends a streaming /api/chat and emits normalised events.
func (c *Client) Stream(ctx context.Context, req *llm.Request, sink llm.Sink) error {
	body, err := Encode(req, true)
	if err != nil {
		return err
	}
	call, err := c.post(ctx, "/api/chat", body)
	if err != nil {
		return err
	}
	defer call.Close()
	if err := ParseStream(c.up.Provider, call.Body, call.Progress, call.Fail, sink); err != nil {
		return err
	}
	call.Drain()
	return nil
}

// ParseStream reads an NDJSON /api/chat stream. An {"error": ...} line is
// an error even though the HTTP status was 200. A body that ends before the
// done line, or inside a line that is not yet JSON, is a cut answer: fail
// gets an error wrapping io.ErrUnexpectedEOF; fail also classifies read
// errors.
func ParseStream(provider string, r io.Reader, progress func(), fail func(error) *llm.Error, sink llm.Sink) error {
	br := upstream.AcquireReader(r)
	defer upstream.ReleaseReader(br)
	var cs calls
	pending := llm.Coalescer{Sink: sink}
	for {
		if !hasLine(br) {
			if err := pending.Flush(); err != nil {
				return err
			}
		}
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			progress()
			var chunk ChatResponse
			if jerr := json.Unmarshal(line, &chunk); jerr != nil {
				// What did arrive goes to the caller before the failure.
				if ferr := pending.Flush(); ferr != nil {
					return ferr
				}
				if err != nil { // the body ended or broke inside this line
					return fail(cut(err, "inside a line"))
				}
				return llm.Errorf(provider, llm.KindBadResponse, "unparsable stream line: %v", jerr)
			}
			if chunk.Error != "" {
				if err := pending.Flush(); err != nil {
					return err
				}
				return llm.Errorf(provider, llm.KindServer, "error mid-stream: %s", chunk.Error)
			}
			if t := chunk.Message.Thinking; t != "" {
				if err := pending.Add(llm.EventReasoning, t); err != nil {
					return err
				}
			}
			if t := chunk.Message.Content; t != "" {
				if err := pending.Add(llm.EventContent, t); err != nil {
					return err
				}
			}
			cs.add(chunk.Message.ToolCalls)
			if chunk.Done {
				if err := pending.Flush(); err != nil {
					return err
				}
				calls := cs.sorted()
				for _, tc := range calls {
					if err := sink(llm.Event{Kind: llm.EventToolCall, ToolCall: tc}); err != nil {
						return err
					}
				}
				return sink(llm.Event{Kind: llm.EventEnd, Finish: finish(chunk.DoneReason, len(calls) > 0), Usage: usage(&chunk)})
			}
		}
		if err != nil {
			if ferr := pending.Flush(); ferr != nil {
				return ferr
			}
			return fail(cut(err, "before the done line"))
		}
	}
}

// cut words the end of a body met too early: a clean end (io.EOF) becomes
// io.ErrUnexpectedEOF saying where; a broken read stays as it is.
func cut(err error, where string) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("stream ended %s: %w", where, io.ErrUnexpectedEOF)
	}
	return err
}

// EmbedRequest is the body of POST /api/embed.
type EmbedRequest struct {
	Model      string   `json:"model"`
	Input      []string `json:"input"`
	Truncate   bool     `json:"truncate"`
	Dimensions int      `json:"dimensions,omitempty"`
}

// EmbedResponse is the answer of POST /api/embed.
type EmbedResponse struct {
	Model           string      `json:"model"`
	Embeddings      [][]float32 `json:"embeddings"`
	PromptEvalCount int64       `json:"prompt_eval_count"`
}

// Embed calls POST /api/embed.
func (c *Client) Embed(ctx context.Context, req *llm.EmbedRequest) (*llm.EmbedResponse, error) {
	call, err := c.post(ctx, "/api/embed", &EmbedRequest{Model: req.Model, Input: req.Inputs, Truncate: true, Dimensions: req.Dimensions})
	if err != nil {
		return nil, err
	}
	defer call.Close()
	call.Unary()
	var r EmbedResponse
	if err := json.NewDecoder(call.Body).Decode(&r); err != nil {
		return nil, call.DecodeFail(err)
	}
	if len(r.Embeddings) != len(req.Inputs) {
		return nil, llm.Errorf(c.up.Provider, llm.KindBadResponse, "%d embeddings for %d inputs", len(r.Embeddings), len(req.Inputs))
	}
	model := r.Model
	if model == "" {
		model = req.Model
	}
	return &llm.EmbedResponse{Vectors: r.Embeddings, Model: model, Usage: llm.Usage{Prompt: r.PromptEvalCount, Total: r.PromptEvalCount}}, nil
}

// Probe checks that Ollama answers and that model is pulled.
func (c *Client) Probe(ctx context.Context, model string) error {
	call, err := c.up.Get(ctx, "/api/tags")
	if err != nil {
		return err
	}
	defer call.Close()
	call.Unary()
	var tags struct {
		Models []struct {
			Name  string `json:"name"`
			Model string `json:"model"`
		} `json:"models"`
	}
	if err := json.NewDecoder(call.Body).Decode(&tags); err != nil {
		return llm.Errorf(c.up.Provider, llm.KindBadResponse, "unparsable /api/tags: %v", err)
	}
	if model == "" {
		return nil
	}
	for _, m := range tags.Models {
		if sameModel(m.Name, model) || sameModel(m.Model, model) {
			return nil
		}
	}
	return llm.Errorf(c.up.Provider, llm.KindNotFound, "model %s is not pulled; run `ollama pull %s`", model, model)
}

func sameModel(a, b string) bool {
	if a == b {
		return true
	}
	norm := func(s string) string {
		if !strings.Contains(s, ":") {
			return s + ":latest"
		}
		return s
	}
	return a != "" && norm(a) == norm(b)
}

// hasLine reports whether a complete line is already buffered.
func hasLine(br *bufio.Reader) bool {
	n := br.Buffered()
	if n == 0 {
		return false
	}
	b, _ := br.Peek(n)
	return bytes.IndexByte(b, '\n') >= 0
}
