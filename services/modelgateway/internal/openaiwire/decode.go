package openaiwire

import (
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
)

// ConvertUsage maps the wire usage (DeepSeek cache counters, OpenAI/Qwen
// prompt_tokens_details.cached_tokens, reasoning_tokens) to llm.Usage.
func ConvertUsage(u *Usage) llm.Usage {
	if u == nil {
		return llm.Usage{}
	}
	out := llm.Usage{Prompt: u.PromptTokens, Completion: u.CompletionTokens, Total: u.TotalTokens}
	if out.Total == 0 {
		out.Total = out.Prompt + out.Completion
	}
	if u.CompletionTokensDetails != nil {
		out.Reasoning = u.CompletionTokensDetails.ReasoningTokens
	}
	switch {
	case u.PromptCacheHitTokens != nil || u.PromptCacheMissTokens != nil:
		if u.PromptCacheHitTokens != nil {
			out.CacheHit = *u.PromptCacheHitTokens
		}
		if u.PromptCacheMissTokens != nil {
			out.CacheMiss = *u.PromptCacheMissTokens
		} else {
			out.CacheMiss = out.Prompt - out.CacheHit
		}
	case u.PromptTokensDetails != nil:
		out.CacheHit = u.PromptTokensDetails.CachedTokens
		out.CacheMiss = out.Prompt - out.CacheHit
	}
	return out
}

// DecodeResponse converts a non-streaming answer.
func DecodeResponse(provider string, r *ChatResponse) (*llm.Response, error) {
	if len(r.Choices) == 0 {
		return nil, llm.Errorf(provider, llm.KindBadResponse, "answer has no choices")
	}
	c := &r.Choices[0]
	resp := &llm.Response{
		Model:  r.Model,
		Finish: llm.ParseFinish(c.FinishReason),
		Usage:  ConvertUsage(r.Usage),
	}
	resp.Message.Role = llm.RoleAssistant
	if c.Message.Content != nil {
		resp.Message.Content = *c.Message.Content
	}
	resp.Message.Reasoning = c.Message.ReasoningContent
	if resp.Message.Reasoning == "" {
		resp.Message.Reasoning = c.Message.Reasoning
	}
	for i, tc := range c.Message.ToolCalls {
		args := tc.Function.Arguments
		if args == "" {
			args = "{}"
		}
		id := tc.ID
		if id == "" {
			id = StableID(i, tc.Function.Name, args)
		}
		resp.Message.ToolCalls = append(resp.Message.ToolCalls, llm.ToolCall{ID: id, Name: tc.Function.Name, Arguments: args})
	}
	if len(resp.Message.ToolCalls) > 0 && (resp.Finish == llm.FinishStop || resp.Finish == llm.FinishUnspecified) {
		resp.Finish = llm.FinishToolCalls
	}
	return resp, nil
}

// StableID generates a tool-call id for providers that send none: the same
// call (index, name, arguments) always gets the same id.
func StableID(index int, name, args string) string {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%d\x00%s\x00%s", index, name, args)
	return fmt.Sprintf("call_%016x", h.Sum64())
}

// Assembler builds complete tool calls from stream deltas, keyed by index.
// The zero value is ready to use.
type Assembler struct {
	calls map[int]*partialCall
	last  int
}

type partialCall struct {
	id, name string
	args     []byte
}

// Add merges one delta. The id and name are overwritten only by non-empty
// values (Qwen sends "" on later deltas); argument fragments concatenate.
// A delta without an index continues the last call, unless it carries a new
// id.
func (a *Assembler) Add(d *ToolCallDelta) {
	if a.calls == nil {
		a.calls = map[int]*partialCall{}
	}
	idx := a.last
	switch {
	case d.Index != nil:
		idx = *d.Index
	case d.ID != "" && a.calls[a.last] != nil && a.calls[a.last].id != "" && a.calls[a.last].id != d.ID:
		idx = len(a.calls)
	}
	a.last = idx
	pc := a.calls[idx]
	if pc == nil {
		pc = &partialCall{}
		a.calls[idx] = pc
	}
	if d.ID != "" {
		pc.id = d.ID
	}
	if d.Function.Name != nil && *d.Function.Name != "" {
		pc.name = *d.Function.Name
	}
	if d.Function.Arguments != nil {
		pc.args = append(pc.args, *d.Function.Arguments...)
	}
}

// Len returns the number of calls seen.
func (a *Assembler) Len() int { return len(a.calls) }

// Calls returns the assembled calls in index order, with generated ids where
// none arrived and "{}" for empty arguments.
func (a *Assembler) Calls() []llm.ToolCall {
	if len(a.calls) == 0 {
		return nil
	}
	idxs := make([]int, 0, len(a.calls))
	for i := range a.calls {
		idxs = append(idxs, i)
	}
	sort.Ints(idxs)
	out := make([]llm.ToolCall, 0, len(idxs))
	for _, i := range idxs {
		pc := a.calls[i]
		args := string(pc.args)
		if args == "" {
			args = "{}"
		}
		id := pc.id
		if id == "" {
			id = StableID(i, pc.name, args)
		}
		out = append(out, llm.ToolCall{ID: id, Name: pc.name, Arguments: args})
	}
	return out
}
