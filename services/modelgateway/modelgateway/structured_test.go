package modelgateway_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

const verdictSchema = `{
  "type": "object",
  "required": ["status", "confidence"],
  "additionalProperties": false,
  "properties": {
    "status": {"enum": ["RESOLVED", "UNRESOLVED"]},
    "confidence": {"type": "number", "minimum": 0, "maximum": 1}
  }
}`

func schemaReq(model string) *modelv1.ChatRequest {
	return &modelv1.ChatRequest{
		Model:    model,
		Messages: []*modelv1.Message{userMsg("Was the customer's problem solved?")},
		ResponseFormat: &modelv1.ResponseFormat{
			Type: modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, JsonSchema: verdictSchema, SchemaName: "verdict",
		},
	}
}

func TestStructuredOutputUsesOllamaNativeFormat(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Preset(providersim.Ollama))
	gw := startGateway(t, nil, oneProvider("ollama", sim.URL, ""))
	resp, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), schemaReq("chat"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := sim.LastRequest()
	format, ok := req.Body["format"].(map[string]any)
	if !ok || format["required"] == nil {
		t.Fatalf("format sent = %v, want the schema object", req.Body["format"])
	}
	if strings.Contains(req.AllText(), "JSON schema") {
		t.Error("schema also pushed into the prompt although Ollama constrains natively")
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(resp.GetMessage().GetContent()), &v); err != nil || v["status"] != "RESOLVED" {
		t.Errorf("answer %q", resp.GetMessage().GetContent())
	}
}

func TestStructuredOutputInPromptForDeepSeek(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Preset(providersim.DeepSeek))
	sim.When(providersim.Match{JSON: true}).JSON(map[string]any{"status": "UNRESOLVED", "confidence": 0.4})
	gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": "k"}, oneProvider("deepseek", sim.URL, ""))
	resp, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), schemaReq("chat"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := sim.LastRequest()
	rf, _ := req.Body["response_format"].(map[string]any)
	if rf["type"] != "json_object" {
		t.Errorf("response_format %v, want json_object (DeepSeek has no json_schema)", rf)
	}
	if req.Messages[0].Role != "system" || !strings.Contains(req.Messages[0].Content, `"confidence"`) || !strings.Contains(strings.ToLower(req.Messages[0].Content), "json") {
		t.Errorf("first message %+v does not carry the schema", req.Messages[0])
	}
	if resp.GetMessage().GetContent() != `{"confidence":0.4,"status":"UNRESOLVED"}` {
		t.Errorf("answer %q", resp.GetMessage().GetContent())
	}
}

func TestStructuredOutputRepairsOnce(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Options{Flavor: providersim.Qwen})
	sim.When(providersim.Match{}).Text(`{"status": "MAYBE", "confidence": 0.9}`).Times(1)
	sim.When(providersim.Match{}).Text("```json\n{\"status\": \"RESOLVED\", \"confidence\": 0.9}\n```")
	gw := startGateway(t, map[string]string{"QWEN_API_KEY": "k"}, oneProvider("qwen", sim.URL, ""))
	resp, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), schemaReq("chat"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetMessage().GetContent() != `{"status": "RESOLVED", "confidence": 0.9}` {
		t.Errorf("answer %q (fence not stripped?)", resp.GetMessage().GetContent())
	}
	reqs := sim.ChatRequests()
	if len(reqs) != 2 {
		t.Fatalf("%d upstream requests, want 2", len(reqs))
	}
	repair := reqs[1].Messages[len(reqs[1].Messages)-1]
	prev := reqs[1].Messages[len(reqs[1].Messages)-2]
	if repair.Role != "user" || !strings.Contains(repair.Content, "/status") || prev.Role != "assistant" || !strings.Contains(prev.Content, "MAYBE") {
		t.Errorf("repair turn: %+v after %+v", repair, prev)
	}
}

func TestStructuredOutputFailsAfterRepairNamingTheViolation(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Options{})
	sim.When(providersim.Match{}).JSON(map[string]any{"status": "RESOLVED", "confidence": 7})
	gw := startGateway(t, nil, oneProvider("openai", sim.URL, ""))
	_, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), schemaReq("chat"))
	st := wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(st.Message(), "/confidence") || !strings.Contains(st.Message(), "verdict") {
		t.Errorf("message %q does not name the schema and the failing field", st.Message())
	}
	if sim.Count() != 2 {
		t.Errorf("%d upstream requests, want 2 (answer + one repair)", sim.Count())
	}
	req, _ := sim.LastRequest()
	rf, _ := req.Body["response_format"].(map[string]any)
	if rf["type"] != "json_schema" {
		t.Errorf("OpenAI-compatible server got response_format %v, want native json_schema", rf)
	}
}

func TestDeepSeekBlankJSONContentIsRetried(t *testing.T) {
	t.Parallel()
	opts := providersim.Preset(providersim.DeepSeek)
	opts.Faults.BlankJSONModeContent = 1
	sim := providersim.Start(t, opts)
	sim.When(providersim.Match{JSON: true}).JSON(map[string]any{"status": "RESOLVED", "confidence": 1})
	gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": "k"}, oneProvider("deepseek", sim.URL, ""))
	resp, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), schemaReq("chat"))
	if err != nil {
		t.Fatal(err)
	}
	reqs := sim.ChatRequests()
	if len(reqs) != 2 || resp.GetMessage().GetContent() == "" {
		t.Fatalf("%d requests, answer %q", len(reqs), resp.GetMessage().GetContent())
	}
	if len(reqs[1].Messages) != len(reqs[0].Messages) {
		t.Error("the blank answer was treated as a repair, not asked again as is")
	}
}

func TestStreamingStructuredOutputIsValidatedBeforeItIsSent(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Options{Flavor: providersim.DeepSeek})
	sim.When(providersim.Match{}).Reasoning("let me think").Text(`{"status":"RESOLVED"}`).Times(1)
	sim.When(providersim.Match{}).Text(`{"status":"RESOLVED","confidence":0.8}`)
	gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": "k"}, oneProvider("deepseek", sim.URL, ""))
	st, err := gw.client.ChatStream(ctxTimeout(t, 5*time.Second), &modelv1.ChatStreamRequest{Request: schemaReq("chat")})
	if err != nil {
		t.Fatal(err)
	}
	chunks, err := streamAll(t, st)
	if err != nil {
		t.Fatal(err)
	}
	var content []string
	reasoning := ""
	for _, c := range chunks {
		if c.GetContentDelta() != "" {
			content = append(content, c.GetContentDelta())
		}
		reasoning += c.GetReasoningDelta()
	}
	if len(content) != 1 || content[0] != `{"status":"RESOLVED","confidence":0.8}` {
		t.Errorf("content chunks %q: only the valid answer may be sent, whole", content)
	}
	if reasoning != "let me think" {
		t.Errorf("reasoning %q", reasoning)
	}
}

func TestJSONObjectModeAddsJSONWordForDeepSeek(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Preset(providersim.DeepSeek))
	gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": "k"}, oneProvider("deepseek", sim.URL, ""))
	req := chatReq("chat", userMsg("List three colours."))
	req.ResponseFormat = &modelv1.ResponseFormat{Type: modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT}
	resp, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), req)
	if err != nil {
		t.Fatalf("Chat: %v (the simulator rejects json_object without \"json\" in the prompt, as DeepSeek does)", err)
	}
	var v map[string]any
	if json.Unmarshal([]byte(resp.GetMessage().GetContent()), &v) != nil {
		t.Errorf("answer %q is not a JSON object", resp.GetMessage().GetContent())
	}
}
