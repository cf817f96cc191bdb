package chat

import (
	"encoding/json"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
)

// missingResult is what the model reads for a tool call whose result was
// never stored (the process died mid-turn).
const missingResult = "error: no result was recorded for this call"

// sanitize makes a window of stored messages a valid model conversation.
// Providers reject a tool message that does not answer a tool call of the
// assistant message before it, and an assistant tool call left without a
// result. A window can start in the middle of a tool exchange, and a crash
// can leave one incomplete, so: tool messages without their call are
// dropped, calls without a result get a synthetic error result, and
// cancelled assistant messages that carry nothing are skipped.
func sanitize(msgs []conversation.Message) []conversation.Message {
	out := make([]conversation.Message, 0, len(msgs))
	var open []conversation.ToolCall // calls of the last assistant message still awaiting results
	answered := map[string]bool{}
	closeOpen := func() {
		for _, c := range open {
			if !answered[c.ID] {
				out = append(out, conversation.Message{Role: conversation.RoleTool, ToolCallID: c.ID, ToolName: c.Name, Content: missingResult, ToolError: true})
			}
		}
		open = nil
		clear(answered)
	}
	for _, m := range msgs {
		switch m.Role {
		case conversation.RoleTool:
			if !awaited(open, m.ToolCallID) || answered[m.ToolCallID] {
				continue
			}
			answered[m.ToolCallID] = true
			out = append(out, m)
		case conversation.RoleAssistant:
			closeOpen()
			if m.Cancelled && m.Content == "" && len(m.ToolCalls) == 0 {
				continue
			}
			out = append(out, m)
			open = m.ToolCalls
		default:
			closeOpen()
			out = append(out, m)
		}
	}
	closeOpen()
	return out
}

func awaited(calls []conversation.ToolCall, id string) bool {
	for _, c := range calls {
		if c.ID == id {
			return true
		}
	}
	return false
}

// toModel converts a stored message to what ModelService takes. Reasoning
// goes back only with tool calls: DeepSeek requires it there, and
// elsewhere it would only spend prompt tokens.
func toModel(m conversation.Message) *modelv1.Message {
	out := &modelv1.Message{Content: m.Content}
	switch m.Role {
	case conversation.RoleSystem:
		out.Role = modelv1.Role_ROLE_SYSTEM
	case conversation.RoleUser:
		out.Role = modelv1.Role_ROLE_USER
	case conversation.RoleAssistant:
		out.Role = modelv1.Role_ROLE_ASSISTANT
		if len(m.ToolCalls) > 0 {
			out.Reasoning = m.Reasoning
		}
		for _, c := range m.ToolCalls {
			args := c.Arguments
			if !json.Valid([]byte(args)) {
				// The model's own malformed arguments (the tool refused
				// them, its result says so): ModelService refuses a
				// history holding them, which would fail every later
				// request of the conversation.
				args = "{}"
			}
			out.ToolCalls = append(out.ToolCalls, &modelv1.ToolCall{Id: c.ID, Name: c.Name, ArgumentsJson: args})
		}
	case conversation.RoleTool:
		out.Role = modelv1.Role_ROLE_TOOL
		out.ToolCallId, out.ToolName = m.ToolCallID, m.ToolName
	}
	return out
}
