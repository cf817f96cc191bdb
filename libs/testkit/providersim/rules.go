package providersim

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Endpoint is the kind of request.
type Endpoint string

// The endpoints a rule can match.
const (
	// EndpointChat is /chat/completions or /api/chat (the default).
	EndpointChat Endpoint = "chat"
	// EndpointEmbed is /embeddings or /api/embed.
	EndpointEmbed Endpoint = "embed"
)

// Match says which requests a rule answers. Every set field must hold; the
// zero Match matches every chat request.
type Match struct {
	// Endpoint is the request kind; empty means EndpointChat.
	Endpoint Endpoint
	// Model must equal the requested model id.
	Model string
	// LastUserContains must occur (case-insensitively) in the last user
	// message's text.
	LastUserContains string
	// AnyMessageContains must occur (case-insensitively) in some message's
	// text (or, for embeddings, in some input).
	AnyMessageContains string
	// SystemContains must occur (case-insensitively) in a system message.
	SystemContains string
	// LastRole must be the role of the last message ("user", "tool", ...).
	LastRole string
	// WithTools requires at least one tool to be offered.
	WithTools bool
	// NoTools requires that no tool is offered.
	NoTools bool
	// Tools must all be offered (by name).
	Tools []string
	// JSON requires the request to ask for JSON output (json_object,
	// json_schema, or Ollama format).
	JSON bool
	// JSONSchema requires a schema to travel natively (json_schema, or an
	// Ollama format object).
	JSONSchema bool
	// Streaming requires a streaming request; NonStreaming a non-streaming one.
	Streaming, NonStreaming bool
	// WithImages requires some message to carry an image.
	WithImages bool
	// Thinking requires the request to turn thinking on.
	Thinking bool
	// Func, if set, must return true.
	Func func(*Request) bool
}

func (m *Match) matches(r *Request) bool {
	ep := m.Endpoint
	if ep == "" {
		ep = EndpointChat
	}
	if r.Endpoint != ep {
		return false
	}
	if m.Model != "" && r.Model != m.Model {
		return false
	}
	if m.LastUserContains != "" && !containsFold(r.LastUserText(), m.LastUserContains) {
		return false
	}
	if m.AnyMessageContains != "" {
		found := false
		for _, msg := range r.Messages {
			if containsFold(msg.Content, m.AnyMessageContains) {
				found = true
				break
			}
		}
		for _, in := range r.Inputs {
			if containsFold(in, m.AnyMessageContains) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if m.SystemContains != "" {
		found := false
		for _, msg := range r.Messages {
			if msg.Role == "system" && containsFold(msg.Content, m.SystemContains) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if m.LastRole != "" && (len(r.Messages) == 0 || r.Messages[len(r.Messages)-1].Role != m.LastRole) {
		return false
	}
	if m.WithTools && len(r.Tools) == 0 {
		return false
	}
	if m.NoTools && len(r.Tools) > 0 {
		return false
	}
	for _, name := range m.Tools {
		if !r.HasTool(name) {
			return false
		}
	}
	if m.JSON && r.JSONMode == "" {
		return false
	}
	if m.JSONSchema && r.Schema == nil {
		return false
	}
	if m.Streaming && !r.Stream {
		return false
	}
	if m.NonStreaming && r.Stream {
		return false
	}
	if m.WithImages {
		found := false
		for _, msg := range r.Messages {
			if len(msg.Images) > 0 {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	if m.Thinking && !r.Thinking {
		return false
	}
	if m.Func != nil && !m.Func(r) {
		return false
	}
	return true
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// ToolCall is a scripted tool call.
type ToolCall struct {
	// ID is the call id; empty gets "call_<seq>_<index>" on the OpenAI-style
	// path and no id on Ollama's native path (as Ollama does).
	ID string
	// Name is the tool name.
	Name string
	// Arguments is the arguments object as JSON text.
	Arguments string
}

// Usage is a scripted token count. Completion includes reasoning; the cache
// miss count reported is PromptTokens − CacheHitTokens.
type Usage struct {
	// PromptTokens counts the prompt.
	PromptTokens int
	// CompletionTokens counts the answer, reasoning included.
	CompletionTokens int
	// ReasoningTokens counts the reasoning part of the answer.
	ReasoningTokens int
	// CacheHitTokens counts prompt tokens served from the provider's cache.
	CacheHitTokens int
}

// Rule is a scripted answer. Build it with Sim.When and the chained reply
// methods; each returns the rule. Methods may be called while requests are
// being served.
type Rule struct {
	sim   *Sim
	match Match

	// Guarded by sim.mu.
	times int
	hits  int
	reply
}

// When registers a rule answering requests that satisfy m. Rules are tried
// in registration order.
func (s *Sim) When(m Match) *Rule {
	r := &Rule{sim: s, match: m}
	s.mu.Lock()
	s.rules = append(s.rules, r)
	r.name = fmt.Sprintf("rule-%d", len(s.rules))
	s.mu.Unlock()
	return r
}

func (r *Rule) set(f func()) *Rule {
	r.sim.mu.Lock()
	defer r.sim.mu.Unlock()
	f()
	return r
}

// Named names the rule; Request.Rule reports it.
func (r *Rule) Named(name string) *Rule { return r.set(func() { r.name = name }) }

// Times retires the rule after it has answered n requests (0: never).
func (r *Rule) Times(n int) *Rule { return r.set(func() { r.times = n }) }

// Hits returns how many requests the rule answered.
func (r *Rule) Hits() int {
	r.sim.mu.Lock()
	defer r.sim.mu.Unlock()
	return r.hits
}

// Text answers with exactly this content.
func (r *Rule) Text(s string) *Rule { return r.set(func() { r.text = &s }) }

// JSON answers with v marshalled as the content (v may be a string holding
// JSON text, which is used as is, or json.RawMessage).
func (r *Rule) JSON(v any) *Rule {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case json.RawMessage:
		s = string(x)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("providersim: Rule.JSON: %v", err))
		}
		s = string(b)
	}
	return r.Text(s)
}

// Reasoning answers with this chain of thought before the content.
func (r *Rule) Reasoning(s string) *Rule { return r.set(func() { r.reasoning = s }) }

// ToolCall adds a tool call; args is a JSON text string or a value marshalled
// to JSON. The finish reason becomes tool_calls.
func (r *Rule) ToolCall(name string, args any) *Rule { return r.ToolCallWithID("", name, args) }

// ToolCallWithID adds a tool call with an explicit id.
func (r *Rule) ToolCallWithID(id, name string, args any) *Rule {
	var s string
	switch x := args.(type) {
	case string:
		s = x
	case nil:
		s = "{}"
	default:
		b, err := json.Marshal(args)
		if err != nil {
			panic(fmt.Sprintf("providersim: Rule.ToolCall: %v", err))
		}
		s = string(b)
	}
	return r.set(func() { r.toolCalls = append(r.toolCalls, ToolCall{ID: id, Name: name, Arguments: s}) })
}

// Finish sets the finish reason (OpenAI-style) or done_reason (Ollama).
func (r *Rule) Finish(reason string) *Rule { return r.set(func() { r.finish = reason }) }

// Usage sets the reported token usage.
func (r *Rule) Usage(u Usage) *Rule { return r.set(func() { r.usage = &u }) }

// Error answers with HTTP status and a provider-shaped error body carrying
// msg.
func (r *Rule) Error(status int, msg string) *Rule {
	return r.set(func() { r.status, r.errMsg = status, msg })
}

// ErrorCode sets the error body's code (OpenAI-style `error.code`).
func (r *Rule) ErrorCode(code string) *Rule { return r.set(func() { r.errCode = code }) }

// RetryAfter adds a Retry-After header (whole seconds, rounded up) to an
// error answer.
func (r *Rule) RetryAfter(d time.Duration) *Rule { return r.set(func() { r.retryAfter = d }) }

// Raw answers with these body lines verbatim, each followed by "\n", with
// status 200 (or the Error status) and the endpoint's usual content type.
// Use it for malformed or unusual streams.
func (r *Rule) Raw(lines ...string) *Rule { return r.set(func() { r.raw = append(r.raw, lines...) }) }

// Delay waits d before answering (after Options.Latency).
func (r *Rule) Delay(d time.Duration) *Rule { return r.set(func() { r.delay = d }) }

// Hang sends the first stream chunk and then holds the stream open until the
// client goes away (counted by Disconnects). Non-streaming requests hang
// before the headers.
func (r *Rule) Hang() *Rule { return r.set(func() { r.hang = true }) }

// FailMidStream ends a stream after its first content chunk with an error:
// an `{"error": msg}` NDJSON line on Ollama's native path, an SSE event
// `data: {"error": {...}}` on the OpenAI-style path; HTTP status stays 200.
func (r *Rule) FailMidStream(msg string) *Rule { return r.set(func() { r.midError = msg }) }

// Embedding answers embedding requests with this vector for every input.
func (r *Rule) Embedding(v []float32) *Rule { return r.set(func() { r.embedding = v }) }

// reply is a rule's answer; Sim.snapshot copies it under the lock.
type reply struct {
	name       string
	text       *string
	reasoning  string
	toolCalls  []ToolCall
	finish     string
	usage      *Usage
	status     int
	errMsg     string
	errCode    string
	retryAfter time.Duration
	raw        []string
	delay      time.Duration
	hang       bool
	midError   string
	embedding  []float32
	cut        CutMode
	cutAfter   int
}

func (s *Sim) snapshot(r *Rule) *reply {
	if r == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := r.reply
	rp.toolCalls = slices.Clone(r.toolCalls)
	rp.raw = slices.Clone(r.raw)
	return &rp
}
