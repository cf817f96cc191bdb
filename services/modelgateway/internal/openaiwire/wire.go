// Package openaiwire speaks the OpenAI chat-completions wire format shared by
// DeepSeek, Qwen's compatible mode and OpenAI-compatible servers: request
// encoding (with a Dialect for each provider's own fields), response
// decoding, the SSE stream parser and the tool-call assembler, and a client
// that implements the gateway's provider operations on top of them.
package openaiwire

import (
	"encoding/json"
)

// ChatRequest is the body of POST /chat/completions.
type ChatRequest struct {
	Model           string          `json:"model"`
	Messages        []Message       `json:"messages"`
	Tools           []Tool          `json:"tools,omitempty"`
	ToolChoice      any             `json:"tool_choice,omitempty"`
	ResponseFormat  *ResponseFormat `json:"response_format,omitempty"`
	Temperature     *float64        `json:"temperature,omitempty"`
	TopP            *float64        `json:"top_p,omitempty"`
	TopK            *int            `json:"top_k,omitempty"`
	MaxTokens       *int            `json:"max_tokens,omitempty"`
	Stop            []string        `json:"stop,omitempty"`
	Seed            *int64          `json:"seed,omitempty"`
	Stream          bool            `json:"stream,omitempty"`
	StreamOptions   *StreamOptions  `json:"stream_options,omitempty"`
	Thinking        *ThinkingParam  `json:"thinking,omitempty"`
	ReasoningEffort string          `json:"reasoning_effort,omitempty"`
	EnableThinking  *bool           `json:"enable_thinking,omitempty"`
	ThinkingBudget  *int            `json:"thinking_budget,omitempty"`

	// Extra fields are merged into the body; fields the struct already sets win.
	Extra map[string]any `json:"-"`
}

// MarshalJSON encodes the request with Extra merged in (see AppendJSON).
func (r *ChatRequest) MarshalJSON() ([]byte, error) {
	return r.AppendJSON(nil)
}

// Message is one chat message on the wire.
type Message struct {
	Role string `json:"role"`
	// Content is a string, or []ContentPart for messages with images.
	Content          any        `json:"content"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
}

// ContentPart is one part of a multi-part content.
type ContentPart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *ImageURL `json:"image_url,omitempty"`
}

// ImageURL carries an image as a URL (here always a base64 data URI).
type ImageURL struct {
	URL string `json:"url"`
}

// ToolCall is a complete tool call in a message.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its arguments as JSON text.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool offers a function.
type Tool struct {
	Type     string      `json:"type"`
	Function FunctionDef `json:"function"`
}

// FunctionDef describes a function.
type FunctionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// NamedToolChoice forces one function.
type NamedToolChoice struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

// ResponseFormat is response_format.
type ResponseFormat struct {
	Type       string      `json:"type"`
	JSONSchema *JSONSchema `json:"json_schema,omitempty"`
}

// JSONSchema is response_format.json_schema.
type JSONSchema struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
}

// StreamOptions is stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ThinkingParam is DeepSeek's thinking toggle.
type ThinkingParam struct {
	Type string `json:"type"`
}

// ChatResponse is a non-streaming answer.
type ChatResponse struct {
	ID      string          `json:"id"`
	Model   string          `json:"model"`
	Choices []Choice        `json:"choices"`
	Usage   *Usage          `json:"usage"`
	Error   json.RawMessage `json:"error"`
}

// Choice is one answer alternative.
type Choice struct {
	Index        int             `json:"index"`
	Message      ResponseMessage `json:"message"`
	FinishReason string          `json:"finish_reason"`
}

// ResponseMessage is the assistant message of a non-streaming answer.
type ResponseMessage struct {
	Role             string     `json:"role"`
	Content          *string    `json:"content"`
	ReasoningContent string     `json:"reasoning_content"`
	Reasoning        string     `json:"reasoning"`
	ToolCalls        []ToolCall `json:"tool_calls"`
}

// Usage is the usage object, with DeepSeek's and OpenAI's extensions.
type Usage struct {
	PromptTokens            int64               `json:"prompt_tokens"`
	CompletionTokens        int64               `json:"completion_tokens"`
	TotalTokens             int64               `json:"total_tokens"`
	PromptCacheHitTokens    *int64              `json:"prompt_cache_hit_tokens"`
	PromptCacheMissTokens   *int64              `json:"prompt_cache_miss_tokens"`
	PromptTokensDetails     *PromptDetails      `json:"prompt_tokens_details"`
	CompletionTokensDetails *CompletionsDetails `json:"completion_tokens_details"`
}

// PromptDetails is usage.prompt_tokens_details.
type PromptDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// CompletionsDetails is usage.completion_tokens_details.
type CompletionsDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// StreamChunk is one SSE event of a streaming answer.
type StreamChunk struct {
	Model   string          `json:"model"`
	Choices []StreamChoice  `json:"choices"`
	Usage   *Usage          `json:"usage"`
	Error   json.RawMessage `json:"error"`
}

// StreamChoice is one choice of a chunk.
type StreamChoice struct {
	Index        int     `json:"index"`
	Delta        Delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// Delta is the increment a chunk carries.
type Delta struct {
	Content          *string         `json:"content"`
	ReasoningContent *string         `json:"reasoning_content"`
	Reasoning        *string         `json:"reasoning"`
	ToolCalls        []ToolCallDelta `json:"tool_calls"`
}

// ToolCallDelta is a fragment of a tool call.
type ToolCallDelta struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      *string `json:"name"`
		Arguments *string `json:"arguments"`
	} `json:"function"`
}

// EmbeddingRequest is the body of POST /embeddings.
type EmbeddingRequest struct {
	Model          string   `json:"model"`
	Input          []string `json:"input"`
	Dimensions     int      `json:"dimensions,omitempty"`
	EncodingFormat string   `json:"encoding_format"`
}

// EmbeddingResponse is the answer of POST /embeddings.
type EmbeddingResponse struct {
	Model string `json:"model"`
	Data  []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
	Usage *Usage `json:"usage"`
}
