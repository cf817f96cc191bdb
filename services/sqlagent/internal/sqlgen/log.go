package sqlgen

import (
	"context"
	"time"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// Prompt is one model call as made: for prompt logging.
type Prompt struct {
	// Agent is "sql_agent" (Generate) or "job_agent" (Route).
	Agent    string
	Messages []PromptMessage
	// Answer is the model's text; Error why the call failed.
	Answer, Error string
	Time          time.Time
}

// PromptMessage is one message of a prompt.
type PromptMessage struct{ Role, Content string }

// Agents named in Prompt.Agent.
const (
	AgentSQL = "sql_agent"
	AgentJob = "job_agent"
)

// PromptLog receives every prompt and answer, with the caller's context
// (which says whose they are). It must not block for long: it runs inside
// the request.
type PromptLog func(ctx context.Context, p Prompt)

// SetLog makes g hand every prompt and answer to log (nil: none). Call it
// before g is used.
func (g *Generator) SetLog(log PromptLog) { g.log = log }

// chat makes one model call and logs it when a log is set.
func (g *Generator) chat(ctx context.Context, agent string, req *modelv1.ChatRequest) (*modelv1.ChatResponse, error) {
	resp, err := g.client.Chat(ctx, req)
	if g.log != nil {
		p := Prompt{Agent: agent, Answer: resp.GetMessage().GetContent(), Time: time.Now().UTC()}
		if err != nil {
			p.Error = err.Error()
		}
		for _, m := range req.GetMessages() {
			p.Messages = append(p.Messages, PromptMessage{Role: roleName(m.GetRole()), Content: m.GetContent()})
		}
		g.log(ctx, p)
	}
	return resp, err
}

func roleName(r modelv1.Role) string {
	switch r {
	case modelv1.Role_ROLE_SYSTEM:
		return "system"
	case modelv1.Role_ROLE_ASSISTANT:
		return "assistant"
	case modelv1.Role_ROLE_TOOL:
		return "tool"
	}
	return "user"
}
