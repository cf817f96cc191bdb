package modelgateway_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

func TestInvalidRequestsNameTheField(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, map[string]string{"MODELGATEWAY_PROVIDER": "sim"}, "")
	tools := bhpTools()
	cases := []struct {
		name  string
		req   *modelv1.ChatRequest
		field string
	}{
		{"no model", &modelv1.ChatRequest{Messages: []*modelv1.Message{userMsg("x")}}, "model"},
		{"no messages", &modelv1.ChatRequest{Model: "chat"}, "messages"},
		{"no role", chatReq("chat", &modelv1.Message{Content: "x"}), "messages[0].role"},
		{"tool without call id", chatReq("chat", userMsg("x"), &modelv1.Message{Role: modelv1.Role_ROLE_TOOL, Content: "r"}), "messages[1].tool_call_id"},
		{"bad arguments", chatReq("chat", &modelv1.Message{Role: modelv1.Role_ROLE_ASSISTANT, ToolCalls: []*modelv1.ToolCall{{Name: "f", ArgumentsJson: "{oops"}}}), "messages[0].tool_calls[0].arguments_json"},
		{"not an image", chatReq("chat", &modelv1.Message{Role: modelv1.Role_ROLE_USER, Images: []*modelv1.ImagePart{{Data: []byte("x"), MimeType: "text/plain"}}}), "messages[0].images[0].mime_type"},
		{"bad tool name", &modelv1.ChatRequest{Model: "chat", Messages: []*modelv1.Message{userMsg("x")}, Tools: []*modelv1.Tool{{Name: "has space"}}}, "tools[0].name"},
		{"duplicate tool", &modelv1.ChatRequest{Model: "chat", Messages: []*modelv1.Message{userMsg("x")}, Tools: []*modelv1.Tool{tools[0], tools[0]}}, "tools[1].name"},
		{"bad tool schema", &modelv1.ChatRequest{Model: "chat", Messages: []*modelv1.Message{userMsg("x")}, Tools: []*modelv1.Tool{{Name: "f", ParametersJsonSchema: "[]"}}}, "tools[0].parameters_json_schema"},
		{"named tool missing", &modelv1.ChatRequest{Model: "chat", Messages: []*modelv1.Message{userMsg("x")}, Tools: tools, ToolChoice: &modelv1.ToolChoice{Mode: modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_NAMED, Name: "nope"}}, "tool_choice.name"},
		{"required without tools", &modelv1.ChatRequest{Model: "chat", Messages: []*modelv1.Message{userMsg("x")}, ToolChoice: &modelv1.ToolChoice{Mode: modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED}}, "tool_choice.mode"},
		{"schema missing", &modelv1.ChatRequest{Model: "chat", Messages: []*modelv1.Message{userMsg("x")}, ResponseFormat: &modelv1.ResponseFormat{Type: modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA}}, "response_format.json_schema"},
		{"schema broken", &modelv1.ChatRequest{Model: "chat", Messages: []*modelv1.Message{userMsg("x")}, ResponseFormat: &modelv1.ResponseFormat{Type: modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, JsonSchema: `{"type": 5}`}}, "response_format.json_schema"},
		{"bad effort", &modelv1.ChatRequest{Model: "chat", Messages: []*modelv1.Message{userMsg("x")}, Thinking: &modelv1.ThinkingOptions{Effort: "max"}}, "thinking.effort"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), tc.req)
			st := wantCode(t, err, codes.InvalidArgument)
			var field string
			for _, d := range st.Details() {
				if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
					field = br.GetFieldViolations()[0].GetField()
				}
			}
			if field != tc.field || !strings.HasPrefix(st.Message(), tc.field) {
				t.Errorf("field %q message %q, want %q", field, st.Message(), tc.field)
			}
		})
	}
	// Streams prefix the field with "request.".
	st, err := gw.client.ChatStream(ctxTimeout(t, 5*time.Second), &modelv1.ChatStreamRequest{Request: &modelv1.ChatRequest{Model: "chat"}})
	if err == nil {
		_, err = st.Recv()
	}
	if s := wantCode(t, err, codes.InvalidArgument); !strings.HasPrefix(s.Message(), "request.messages") {
		t.Errorf("stream message %q", s.Message())
	}
	_, err = gw.client.Embed(ctxTimeout(t, 5*time.Second), &modelv1.EmbedRequest{Model: "embed"})
	wantCode(t, err, codes.InvalidArgument)
}
