// Package deepseek adapts DeepSeek's API (api-docs.deepseek.com): the OpenAI
// wire with reasoning_content, the thinking toggle and reasoning_effort,
// JSON mode without json_schema, and reasoning sent back after tool calls.
package deepseek

import (
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/openaiwire"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/upstream"
)

// New returns the DeepSeek adapter sending through up.
func New(up *upstream.Client) *openaiwire.Client {
	return openaiwire.New(up, Dialect())
}

// Dialect is DeepSeek's variant of the OpenAI wire:
//   - JSON schemas travel in the prompt with response_format json_object
//     (DeepSeek has no json_schema mode; the prompt says "json");
//   - after a turn that made tool calls, its reasoning_content is sent back
//     (thinking mode answers 400 otherwise); routes for older reasoner
//     models that reject it set reasoning_replay "none";
//   - thinking is {"thinking": {"type": "enabled"|"disabled"}} plus
//     reasoning_effort; a thinking budget, top_k, seed and num_ctx are not
//     DeepSeek parameters and are dropped;
//   - no image input and no embeddings API.
func Dialect() openaiwire.Dialect {
	return openaiwire.Dialect{
		Replay: llm.ReplayToolCalls,
		Thinking: func(t llm.Thinking, out *openaiwire.ChatRequest) {
			if t.Enabled != nil {
				typ := "disabled"
				if *t.Enabled {
					typ = "enabled"
				}
				out.Thinking = &openaiwire.ThinkingParam{Type: typ}
			}
			if t.Effort != "" && (t.Enabled == nil || *t.Enabled) {
				out.ReasoningEffort = t.Effort
			}
		},
	}
}
