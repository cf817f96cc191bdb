// Package llm holds the gateway's provider-neutral model types: requests,
// answers, stream events, usage and errors. Adapters translate between these
// and each provider's wire format; the dispatcher and the gRPC API speak only
// these.
package llm

import (
	"encoding/json"
)

// Role is who wrote a message.
type Role uint8

// The roles.
const (
	RoleSystem Role = iota + 1
	RoleUser
	RoleAssistant
	RoleTool
)

// String returns the OpenAI-style role name.
func (r Role) String() string {
	switch r {
	case RoleSystem:
		return "system"
	case RoleUser:
		return "user"
	case RoleAssistant:
		return "assistant"
	case RoleTool:
		return "tool"
	}
	return "unknown"
}

// Image is an image attached to a message.
type Image struct {
	// Data is the raw image.
	Data []byte
	// MIMEType is e.g. "image/png".
	MIMEType string
}

// ToolCall is one tool call an assistant made.
type ToolCall struct {
	// ID is the call id.
	ID string
	// Name is the tool name.
	Name string
	// Arguments is the arguments object as JSON text.
	Arguments string
}

// Message is one conversation turn.
type Message struct {
	Role    Role
	Content string
	Images  []Image
	// Reasoning is an assistant turn's chain of thought.
	Reasoning string
	// ToolCalls are an assistant turn's tool calls.
	ToolCalls []ToolCall
	// ToolCallID and ToolName identify the call a tool message answers.
	ToolCallID, ToolName string
}

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments object.
	Parameters json.RawMessage
}

// ToolChoiceMode constrains tool use.
type ToolChoiceMode uint8

// The tool choice modes.
const (
	ToolChoiceDefault ToolChoiceMode = iota
	ToolChoiceAuto
	ToolChoiceNone
	ToolChoiceRequired
	ToolChoiceNamed
)

// ToolChoice constrains tool use; Name is set for ToolChoiceNamed.
type ToolChoice struct {
	Mode ToolChoiceMode
	Name string
}

// FormatType is the requested answer shape.
type FormatType uint8

// The answer shapes.
const (
	FormatText FormatType = iota
	FormatJSONObject
	FormatJSONSchema
)

// ResponseFormat asks for structured output.
type ResponseFormat struct {
	Type FormatType
	// Schema is the JSON schema for FormatJSONSchema.
	Schema json.RawMessage
	// Name names the schema in prompts.
	Name string
}

// Options are sampling parameters; nil means the provider's default.
type Options struct {
	Temperature *float64
	TopP        *float64
	TopK        *int
	MaxTokens   *int
	Stop        []string
	Seed        *int64
	NumCtx      *int
}

// Thinking controls reasoning models.
type Thinking struct {
	// Enabled turns thinking on or off; nil leaves the provider's default.
	Enabled *bool
	// Effort is "low", "medium" or "high", empty for none.
	Effort string
	// BudgetTokens caps thinking tokens where the provider takes a budget.
	BudgetTokens *int
}

// ReasoningReplay says which assistant turns carry their reasoning back to
// the provider.
type ReasoningReplay string

// The replay policies.
const (
	// ReplayDefault leaves the choice to the adapter.
	ReplayDefault ReasoningReplay = ""
	// ReplayNone never sends reasoning back.
	ReplayNone ReasoningReplay = "none"
	// ReplayToolCalls sends it back on assistant turns that made tool calls
	// (DeepSeek thinking mode requires it).
	ReplayToolCalls ReasoningReplay = "tool_calls"
	// ReplayAll sends it back on every assistant turn that has some.
	ReplayAll ReasoningReplay = "all"
)

// Request is one chat completion request for one provider model.
type Request struct {
	// Model is the provider's model id.
	Model          string
	Messages       []Message
	Tools          []Tool
	ToolChoice     ToolChoice
	ResponseFormat ResponseFormat
	Options        Options
	Thinking       Thinking
	// Replay says which assistant turns carry reasoning back.
	Replay ReasoningReplay
	// Extra holds provider body fields from the route configuration, merged
	// into the request body as they are.
	Extra map[string]any
}

// FinishReason says why generation stopped.
type FinishReason uint8

// The finish reasons.
const (
	FinishUnspecified FinishReason = iota
	FinishStop
	FinishLength
	FinishToolCalls
	FinishContentFilter
	FinishInsufficientResources
)

// ParseFinish maps an OpenAI-style finish_reason (or Ollama done_reason).
func ParseFinish(s string) FinishReason {
	switch s {
	case "stop", "end_turn", "unload", "load":
		return FinishStop
	case "length", "max_tokens":
		return FinishLength
	case "tool_calls", "function_call":
		return FinishToolCalls
	case "content_filter":
		return FinishContentFilter
	case "insufficient_system_resource":
		return FinishInsufficientResources
	}
	return FinishUnspecified
}

// Usage counts tokens.
type Usage struct {
	Prompt, Completion, Reasoning, CacheHit, CacheMiss, Total int64
}

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	u.Prompt += o.Prompt
	u.Completion += o.Completion
	u.Reasoning += o.Reasoning
	u.CacheHit += o.CacheHit
	u.CacheMiss += o.CacheMiss
	u.Total += o.Total
}

// Response is a complete answer.
type Response struct {
	// Message is the assistant turn.
	Message Message
	Finish  FinishReason
	Usage   Usage
	// Model is the provider model id that answered.
	Model string
}

// EventKind is the kind of a stream event.
type EventKind uint8

// The stream event kinds.
const (
	EventContent EventKind = iota + 1
	EventReasoning
	EventToolCall
	EventEnd
)

// Event is one normalised stream event: a content or reasoning delta, a
// complete tool call, or the end with finish reason and usage.
type Event struct {
	Kind     EventKind
	Text     string
	ToolCall ToolCall
	Finish   FinishReason
	Usage    Usage
}

// Sink receives stream events in order. An error stops the stream and is
// returned by the adapter.
type Sink func(Event) error

// Collector aggregates stream events into a Response.
type Collector struct {
	content, reasoning []byte
	resp               Response
}

// Add records ev.
func (c *Collector) Add(ev Event) {
	switch ev.Kind {
	case EventContent:
		c.content = append(c.content, ev.Text...)
	case EventReasoning:
		c.reasoning = append(c.reasoning, ev.Text...)
	case EventToolCall:
		c.resp.Message.ToolCalls = append(c.resp.Message.ToolCalls, ev.ToolCall)
	case EventEnd:
		c.resp.Finish = ev.Finish
		c.resp.Usage = ev.Usage
	}
}

// Response returns the aggregated answer.
func (c *Collector) Response() *Response {
	r := c.resp
	r.Message.Role = RoleAssistant
	r.Message.Content = string(c.content)
	r.Message.Reasoning = string(c.reasoning)
	return &r
}

// EmbedRequest asks for embeddings from one provider model.
type EmbedRequest struct {
	Model      string
	Inputs     []string
	Dimensions int
}

// EmbedResponse holds one vector per input, in input order.
type EmbedResponse struct {
	Vectors [][]float32
	Usage   Usage
	Model   string
}
