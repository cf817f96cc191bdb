// Package planner makes the planning call of an analysis: the model sees the
// question and the tool definitions (schemas only), must call tools (tool
// choice required), and may not answer. Calls to unknown tools and
// arguments that fail a tool's schema are explained to the model once; a
// plan still invalid after that fails with the details.
package planner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/tools"
)

// SystemPrompt forbids answering from memory: the planner only chooses
// tools.
const SystemPrompt = `You are a planning agent. Your ONLY job is to decide which tools to call.

CRITICAL RULES:
- You have ZERO knowledge of prices, financial data, documents or any other external information.
- You MUST call tools to retrieve ANY data. You cannot answer from memory.
- Return ONLY tool calls: no explanatory text, no analysis, no data.
- Call each tool with arguments that satisfy its JSON schema exactly.
- Select the minimum set of tool calls needed to answer the query. Independent calls run in parallel.`

// feedbackPrompt asks for a corrected plan after invalid calls.
const feedbackPrompt = `Some of your tool calls were invalid (see the tool results above). Return the COMPLETE corrected list of tool calls, valid ones included. Use only the tools offered, with arguments that satisfy their schemas. Return only tool calls.`

// ErrNoToolCalls is the failure of a planning call that returned no tool
// calls. Nothing is synthesised after it.
var ErrNoToolCalls = errors.New("planning failed: no tool calls returned")

// InvalidPlanError is the failure of a plan still invalid after one round of
// feedback.
type InvalidPlanError struct {
	// Problems holds one line per invalid call.
	Problems []string
}

func (e *InvalidPlanError) Error() string {
	return "planning failed: invalid tool calls after feedback: " + strings.Join(e.Problems, "; ")
}

// Model is the part of the model gateway's ModelService client the planner
// uses.
type Model interface {
	Chat(ctx context.Context, in *modelv1.ChatRequest, opts ...grpc.CallOption) (*modelv1.ChatResponse, error)
}

// Validator checks one planned call and returns the canonical arguments; a
// *tools.Registry is one.
var _ Validator = (*tools.Registry)(nil)

// Validator checks one planned call and returns the canonical arguments.
type Validator interface {
	Validate(name string, args []byte) (json.RawMessage, error)
}

// Call is one valid planned tool call.
type Call struct {
	// Tool is the tool name.
	Tool string
	// Args is the canonical arguments object.
	Args json.RawMessage
	// Title renders the call as the model wrote it.
	Title string
}

// Plan is the outcome of a planning call.
type Plan struct {
	// Calls are the valid calls, duplicates (same tool, same canonical
	// arguments) removed, in the model's order.
	Calls []Call
	// ModelCalls counts calls to the model (1, or 2 after feedback).
	ModelCalls int
	// Feedback holds the problems explained to the model, if any.
	Feedback []string
	// Provider and ProviderModel say who answered last.
	Provider, ProviderModel string
}

// Planner makes planning calls. It is safe for concurrent use.
type Planner struct {
	model        Model
	logicalModel string
}

// New returns a planner calling logicalModel (e.g. "planner") on model.
// MaxCalls bounds the tool calls of one plan, each a tool job.
const MaxCalls = 16

func New(model Model, logicalModel string) *Planner {
	return &Planner{model: model, logicalModel: logicalModel}
}

// Plan asks the model which of defs to call for query. Only the offered
// definitions are valid, even if the validator knows more tools. It returns
// [ErrNoToolCalls] when the model calls nothing (on the first or the
// feedback round), an [*InvalidPlanError] when calls are still invalid after
// feedback, or the model error.
func (p *Planner) Plan(ctx context.Context, query string, defs []tools.Definition, v Validator) (Plan, error) {
	offered := make(map[string]bool, len(defs))
	reqTools := make([]*modelv1.Tool, 0, len(defs))
	for _, d := range defs {
		offered[d.Name] = true
		reqTools = append(reqTools, &modelv1.Tool{Name: d.Name, Description: d.Description, ParametersJsonSchema: string(d.Parameters)})
	}
	names := make([]string, 0, len(defs))
	for _, d := range defs {
		names = append(names, d.Name)
	}
	msgs := []*modelv1.Message{
		{Role: modelv1.Role_ROLE_SYSTEM, Content: SystemPrompt},
		{Role: modelv1.Role_ROLE_USER, Content: query},
	}
	var plan Plan
	for round := 0; round < 2; round++ {
		resp, err := p.model.Chat(ctx, &modelv1.ChatRequest{
			Model:      p.logicalModel,
			Messages:   msgs,
			Tools:      reqTools,
			ToolChoice: &modelv1.ToolChoice{Mode: modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED},
		})
		plan.ModelCalls++
		if err != nil {
			return plan, fmt.Errorf("planning failed: model: %w", err)
		}
		plan.Provider, plan.ProviderModel = resp.GetProvider(), resp.GetProviderModel()
		calls := resp.GetMessage().GetToolCalls()
		if len(calls) == 0 {
			return plan, ErrNoToolCalls
		}
		if len(calls) > MaxCalls {
			// Too many to execute, or to send back one by one (a model
			// steered by what it read planned 300 tool jobs): asked again
			// for the most useful ones.
			problem := fmt.Sprintf("the plan has %d tool calls; at most %d are allowed", len(calls), MaxCalls)
			if round == 1 {
				return plan, &InvalidPlanError{Problems: []string{problem}}
			}
			plan.Feedback = []string{problem}
			msgs = append(msgs,
				&modelv1.Message{Role: modelv1.Role_ROLE_ASSISTANT, Content: fmt.Sprintf("(a plan of %d tool calls)", len(calls))},
				&modelv1.Message{Role: modelv1.Role_ROLE_USER, Content: fmt.Sprintf(
					"That plan has %d tool calls; at most %d are allowed. Plan again with the %d most useful calls.", len(calls), MaxCalls, MaxCalls)})
			continue
		}
		valid, problems, results := check(calls, offered, names, v)
		if len(problems) == 0 {
			plan.Calls = valid
			return plan, nil
		}
		if round == 1 {
			return plan, &InvalidPlanError{Problems: problems}
		}
		plan.Feedback = problems
		// Explain each call's problem as its tool result, as the model
		// expects after tool calls, then ask for the corrected plan.
		assistant := resp.GetMessage()
		echoed := make([]*modelv1.ToolCall, len(calls))
		for i, c := range calls {
			echoed[i] = c
			if !json.Valid([]byte(c.GetArgumentsJson())) {
				// Sent back as they came, the model's malformed arguments
				// would fail the request (its tool result says what was
				// wrong with them).
				echoed[i] = &modelv1.ToolCall{Id: c.GetId(), Name: c.GetName(), ArgumentsJson: "{}"}
			}
		}
		msgs = append(msgs, &modelv1.Message{
			Role: modelv1.Role_ROLE_ASSISTANT, Content: assistant.GetContent(),
			Reasoning: assistant.GetReasoning(), ToolCalls: echoed,
		})
		for i, c := range calls {
			msgs = append(msgs, &modelv1.Message{
				Role: modelv1.Role_ROLE_TOOL, ToolCallId: c.GetId(), ToolName: c.GetName(), Content: results[i],
			})
		}
		msgs = append(msgs, &modelv1.Message{Role: modelv1.Role_ROLE_USER, Content: feedbackPrompt})
	}
	return plan, errors.New("planning failed: unreachable")
}

// check validates calls. It returns the valid calls (deduplicated), one
// problem line per invalid call, and for every call the text fed back as its
// tool result.
func check(calls []*modelv1.ToolCall, offered map[string]bool, names []string, v Validator) ([]Call, []string, []string) {
	var (
		valid    []Call
		problems []string
		results  = make([]string, len(calls))
		seen     = map[string]bool{}
	)
	for i, c := range calls {
		name := c.GetName()
		if !offered[name] {
			msg := fmt.Sprintf("unknown tool %q; the available tools are: %s", name, strings.Join(names, ", "))
			problems = append(problems, fmt.Sprintf("call %d: %s", i+1, msg))
			results[i] = "ERROR: " + msg
			continue
		}
		canon, err := v.Validate(name, []byte(c.GetArgumentsJson()))
		if err != nil {
			msg := fmt.Sprintf("%s: %v", name, err)
			problems = append(problems, fmt.Sprintf("call %d: %s", i+1, msg))
			results[i] = "ERROR: " + msg
			continue
		}
		results[i] = "OK: this call is valid (not executed yet)."
		key := name + "\x00" + string(canon)
		if seen[key] {
			continue
		}
		seen[key] = true
		valid = append(valid, Call{Tool: name, Args: canon, Title: tools.Describe(name, []byte(c.GetArgumentsJson()))})
	}
	return valid, problems, results
}
