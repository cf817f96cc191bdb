// Package openai adapts any OpenAI-compatible server (vLLM, llama.cpp
// server, LM Studio, Ollama /v1, OpenAI): native json_schema output,
// images as data-URI content parts, reasoning read from reasoning_content or
// reasoning, thinking effort as reasoning_effort.
package openai

import (
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/openaiwire"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/upstream"
)

// Options are the differences between OpenAI-compatible servers.
type Options struct {
	// NoToolChoice: the server rejects tool_choice (Ollama /v1).
	NoToolChoice bool
	// NoJSONSchema: the server has no json_schema response format; schemas
	// travel in the prompt with json_object.
	NoJSONSchema bool
}

// New returns the adapter sending through up.
func New(up *upstream.Client, opts Options) *openaiwire.Client {
	return openaiwire.New(up, Dialect(opts))
}

// Dialect is the generic OpenAI wire; top_k, num_ctx and thinking budgets
// are not standard and are dropped.
func Dialect(opts Options) openaiwire.Dialect {
	return openaiwire.Dialect{
		NativeSchema: !opts.NoJSONSchema,
		NoToolChoice: opts.NoToolChoice,
		Images:       true,
		Seed:         true,
		Replay:       llm.ReplayNone,
		Embeddings:   true,
		Thinking: func(t llm.Thinking, out *openaiwire.ChatRequest) {
			if t.Effort != "" && (t.Enabled == nil || *t.Enabled) {
				out.ReasoningEffort = t.Effort
			}
		},
	}
}
