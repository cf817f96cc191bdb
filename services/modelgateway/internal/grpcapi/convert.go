package grpcapi

import (
	"encoding/json"
	"strings"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/structured"
)

// chatRequest converts a ChatRequest, checking what its contract cannot
// state (the contract's own rules ran before the handler: model and
// messages required, roles, tool names, ranges). prefix is prepended to
// field names ("request." inside ChatStreamRequest).
func chatRequest(in *modelv1.ChatRequest, prefix string) (*llm.Request, *structured.Schema, error) {
	req := &llm.Request{Messages: make([]llm.Message, 0, len(in.GetMessages()))}
	for i, m := range in.GetMessages() {
		field := prefix + "messages[" + itoa(i) + "]"
		lm := llm.Message{Content: m.GetContent(), Reasoning: m.GetReasoning(), ToolCallID: m.GetToolCallId(), ToolName: m.GetToolName()}
		switch m.GetRole() {
		case modelv1.Role_ROLE_SYSTEM:
			lm.Role = llm.RoleSystem
		case modelv1.Role_ROLE_USER:
			lm.Role = llm.RoleUser
		case modelv1.Role_ROLE_ASSISTANT:
			lm.Role = llm.RoleAssistant
		case modelv1.Role_ROLE_TOOL:
			lm.Role = llm.RoleTool
			if lm.ToolCallID == "" && lm.ToolName == "" {
				return nil, nil, grpcx.InvalidArgument(field+".tool_call_id", "a tool message must name the call it answers")
			}
		default:
			return nil, nil, grpcx.InvalidArgument(field+".role", "must be set")
		}
		for _, img := range m.GetImages() {
			lm.Images = append(lm.Images, llm.Image{Data: img.GetData(), MIMEType: img.GetMimeType()})
		}
		for j, tc := range m.GetToolCalls() {
			if a := tc.GetArgumentsJson(); a != "" && !json.Valid([]byte(a)) {
				return nil, nil, grpcx.InvalidArgument(field+".tool_calls["+itoa(j)+"].arguments_json", "is not valid JSON")
			}
			lm.ToolCalls = append(lm.ToolCalls, llm.ToolCall{ID: tc.GetId(), Name: tc.GetName(), Arguments: tc.GetArgumentsJson()})
		}
		req.Messages = append(req.Messages, lm)
	}
	names := map[string]bool{}
	for i, t := range in.GetTools() {
		field := prefix + "tools[" + itoa(i) + "]"
		if names[t.GetName()] {
			return nil, nil, grpcx.InvalidArgument(field+".name", "%q is offered twice", t.GetName())
		}
		names[t.GetName()] = true
		var params json.RawMessage
		if s := strings.TrimSpace(t.GetParametersJsonSchema()); s != "" {
			var obj map[string]any
			if json.Unmarshal([]byte(s), &obj) != nil {
				return nil, nil, grpcx.InvalidArgument(field+".parameters_json_schema", "is not a JSON object")
			}
			params = json.RawMessage(s)
		}
		req.Tools = append(req.Tools, llm.Tool{Name: t.GetName(), Description: t.GetDescription(), Parameters: params})
	}
	switch tc := in.GetToolChoice(); tc.GetMode() {
	case modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_UNSPECIFIED:
	case modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO:
		req.ToolChoice.Mode = llm.ToolChoiceAuto
	case modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE:
		req.ToolChoice.Mode = llm.ToolChoiceNone
	case modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED:
		if len(req.Tools) == 0 {
			return nil, nil, grpcx.InvalidArgument(prefix+"tool_choice.mode", "REQUIRED needs at least one tool")
		}
		req.ToolChoice.Mode = llm.ToolChoiceRequired
	case modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_NAMED:
		if !names[tc.GetName()] {
			return nil, nil, grpcx.InvalidArgument(prefix+"tool_choice.name", "%q is not one of the offered tools", tc.GetName())
		}
		req.ToolChoice = llm.ToolChoice{Mode: llm.ToolChoiceNamed, Name: tc.GetName()}
	default:
		return nil, nil, grpcx.InvalidArgument(prefix+"tool_choice.mode", "unknown mode %d", tc.GetMode())
	}
	var schema *structured.Schema
	rf := in.GetResponseFormat()
	req.ResponseFormat.Name = rf.GetSchemaName()
	switch rf.GetType() {
	case modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_UNSPECIFIED, modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_TEXT:
	case modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT:
		req.ResponseFormat.Type = llm.FormatJSONObject
	case modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA:
		if strings.TrimSpace(rf.GetJsonSchema()) == "" {
			return nil, nil, grpcx.InvalidArgument(prefix+"response_format.json_schema", "is required for JSON_SCHEMA")
		}
		s, err := structured.Compile(rf.GetSchemaName(), []byte(rf.GetJsonSchema()))
		if err != nil {
			return nil, nil, grpcx.InvalidArgument(prefix+"response_format.json_schema", "%v", err)
		}
		schema = s
		req.ResponseFormat.Type = llm.FormatJSONSchema
		req.ResponseFormat.Schema = json.RawMessage(rf.GetJsonSchema())
	default:
		return nil, nil, grpcx.InvalidArgument(prefix+"response_format.type", "unknown type %d", rf.GetType())
	}
	if o := in.GetOptions(); o != nil {
		req.Options.Temperature = o.Temperature
		req.Options.TopP = o.TopP
		req.Options.TopK = intPtr(o.TopK)
		req.Options.MaxTokens = intPtr(o.MaxTokens)
		req.Options.NumCtx = intPtr(o.NumCtx)
		req.Options.Seed = o.Seed
		req.Options.Stop = o.GetStop()
	}
	if th := in.GetThinking(); th != nil {
		req.Thinking.Enabled = th.Enabled
		req.Thinking.BudgetTokens = intPtr(th.BudgetTokens)
		req.Thinking.Effort = th.GetEffort()
	}
	return req, schema, nil
}

func intPtr(p *int32) *int {
	if p == nil {
		return nil
	}
	v := int(*p)
	return &v
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

func role(r llm.Role) modelv1.Role {
	switch r {
	case llm.RoleSystem:
		return modelv1.Role_ROLE_SYSTEM
	case llm.RoleUser:
		return modelv1.Role_ROLE_USER
	case llm.RoleTool:
		return modelv1.Role_ROLE_TOOL
	}
	return modelv1.Role_ROLE_ASSISTANT
}

func toolCall(tc llm.ToolCall) *modelv1.ToolCall {
	return &modelv1.ToolCall{Id: tc.ID, Name: tc.Name, ArgumentsJson: tc.Arguments}
}

func message(m *llm.Message) *modelv1.Message {
	out := &modelv1.Message{Role: role(m.Role), Content: m.Content, Reasoning: m.Reasoning}
	for _, tc := range m.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, toolCall(tc))
	}
	return out
}

func finish(f llm.FinishReason) modelv1.FinishReason {
	switch f {
	case llm.FinishStop:
		return modelv1.FinishReason_FINISH_REASON_STOP
	case llm.FinishLength:
		return modelv1.FinishReason_FINISH_REASON_LENGTH
	case llm.FinishToolCalls:
		return modelv1.FinishReason_FINISH_REASON_TOOL_CALLS
	case llm.FinishContentFilter:
		return modelv1.FinishReason_FINISH_REASON_CONTENT_FILTER
	case llm.FinishInsufficientResources:
		return modelv1.FinishReason_FINISH_REASON_INSUFFICIENT_RESOURCES
	}
	return modelv1.FinishReason_FINISH_REASON_UNSPECIFIED
}

func usage(u llm.Usage) *modelv1.Usage {
	total := u.Total
	if total == 0 {
		total = u.Prompt + u.Completion
	}
	return &modelv1.Usage{
		PromptTokens: u.Prompt, CompletionTokens: u.Completion, ReasoningTokens: u.Reasoning,
		CacheHitTokens: u.CacheHit, CacheMissTokens: u.CacheMiss, TotalTokens: total,
	}
}
