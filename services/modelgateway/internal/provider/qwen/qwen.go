// Package qwen adapts Qwen on DashScope's OpenAI-compatible mode
// (alibabacloud.com model-studio docs): enable_thinking and thinking_budget
// as top-level fields, reasoning_content, images as data-URI content parts,
// and non-streaming thinking calls streamed upstream and aggregated.
package qwen

import (
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/openaiwire"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/upstream"
)

// New returns the Qwen adapter sending through up (base URL of the
// region's compatible mode, e.g. https://dashscope-intl.aliyuncs.com/compatible-mode/v1).
func New(up *upstream.Client) *openaiwire.Client {
	return openaiwire.New(up, Dialect())
}

// Dialect is Qwen's variant of the OpenAI wire:
//   - thinking is enable_thinking (+ thinking_budget); reasoning_effort is
//     dropped. DashScope rejects thinking on non-streaming calls (400
//     invalid_parameter_error), so such calls are streamed upstream and
//     aggregated, and a non-streaming call that does not ask for thinking
//     says enable_thinking: false (some models think by default);
//   - top_k and seed are accepted; num_ctx is dropped;
//   - JSON schemas travel in the prompt with json_object; "required" tool
//     choice is sent as "auto" (not documented for compatible mode);
//   - tool-call ids are kept from the first delta (later ones carry "");
//   - reasoning is not sent back.
func Dialect() openaiwire.Dialect {
	return openaiwire.Dialect{
		Images:               true,
		TopK:                 true,
		Seed:                 true,
		NoRequiredToolChoice: true,
		Replay:               llm.ReplayNone,
		Embeddings:           true,
		Thinking: func(t llm.Thinking, out *openaiwire.ChatRequest) {
			switch {
			case t.Enabled != nil:
				v := *t.Enabled
				out.EnableThinking = &v
			case !out.Stream:
				off := false
				out.EnableThinking = &off
			}
			if t.BudgetTokens != nil && (t.Enabled == nil || *t.Enabled) {
				out.ThinkingBudget = t.BudgetTokens
			}
		},
		StreamUnary: func(req *llm.Request) bool {
			return req.Thinking.Enabled != nil && *req.Thinking.Enabled
		},
	}
}
