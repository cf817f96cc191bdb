package chat

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
)

func TestSanitize(t *testing.T) {
	t.Parallel()
	user := func(s string) conversation.Message {
		return conversation.Message{Role: conversation.RoleUser, Content: s}
	}
	asst := func(s string, calls ...string) conversation.Message {
		m := conversation.Message{Role: conversation.RoleAssistant, Content: s}
		for _, c := range calls {
			m.ToolCalls = append(m.ToolCalls, conversation.ToolCall{ID: c, Name: "t"})
		}
		return m
	}
	result := func(call string) conversation.Message {
		return conversation.Message{Role: conversation.RoleTool, ToolCallID: call, ToolName: "t", Content: "r " + call}
	}
	missing := func(call string) conversation.Message {
		return conversation.Message{Role: conversation.RoleTool, ToolCallID: call, ToolName: "t", Content: missingResult, ToolError: true}
	}
	tests := []struct {
		name     string
		in, want []conversation.Message
	}{
		{"complete exchange kept",
			[]conversation.Message{user("q"), asst("", "a", "b"), result("a"), result("b"), asst("answer")},
			[]conversation.Message{user("q"), asst("", "a", "b"), result("a"), result("b"), asst("answer")}},
		{"window starts inside a tool exchange",
			[]conversation.Message{result("a"), result("b"), asst("answer"), user("next")},
			[]conversation.Message{asst("answer"), user("next")}},
		{"crash left a call without result",
			[]conversation.Message{user("q"), asst("", "a", "b"), result("a"), user("again")},
			[]conversation.Message{user("q"), asst("", "a", "b"), result("a"), missing("b"), user("again")}},
		{"calls at the end without results",
			[]conversation.Message{user("q"), asst("", "a")},
			[]conversation.Message{user("q"), asst("", "a"), missing("a")}},
		{"result for another message's call dropped",
			[]conversation.Message{user("q"), asst("", "a"), result("a"), result("zz"), result("a")},
			[]conversation.Message{user("q"), asst("", "a"), result("a")}},
		{"empty cancelled assistant skipped",
			[]conversation.Message{user("q"), {Role: conversation.RoleAssistant, Cancelled: true}, user("q2")},
			[]conversation.Message{user("q"), user("q2")}},
		{"partial cancelled assistant kept",
			[]conversation.Message{user("q"), {Role: conversation.RoleAssistant, Content: "It is", Cancelled: true}},
			[]conversation.Message{user("q"), {Role: conversation.RoleAssistant, Content: "It is", Cancelled: true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, sanitize(tc.in)); diff != "" {
				t.Errorf("sanitize mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
