package modelgateway_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// providerCase is one provider type behind a simulator of its flavour.
type providerCase struct {
	typ  string
	opts providersim.Options
	env  map[string]string
}

func providerCases() []providerCase {
	qwen := providersim.Preset(providersim.Qwen)
	qwen.Faults.InterleaveToolDeltas = true
	openai := providersim.Options{Faults: providersim.Faults{UsageWithChoices: true, DataWithoutSpace: true}}
	return []providerCase{
		{"deepseek", providersim.Preset(providersim.DeepSeek), map[string]string{"DEEPSEEK_API_KEY": "k"}},
		{"qwen", qwen, map[string]string{"QWEN_API_KEY": "k"}},
		{"openai", openai, nil},
		{"ollama", providersim.Preset(providersim.Ollama), nil},
	}
}

// quirkCases are extra dialect variants the stream parser must survive:
// Qwen models that repeat the id on every delta or send all arguments at
// once.
func quirkCases() []providerCase {
	repeat := providersim.Options{Flavor: providersim.Qwen, Faults: providersim.Faults{RepeatToolIDs: true}}
	oneChunk := providersim.Options{Flavor: providersim.Qwen, Faults: providersim.Faults{ToolArgsInOneChunk: true, InterleaveToolDeltas: true}}
	return []providerCase{
		{"qwen", repeat, map[string]string{"QWEN_API_KEY": "k"}},
		{"qwen", oneChunk, map[string]string{"QWEN_API_KEY": "k"}},
	}
}

func bhpTools() []*modelv1.Tool {
	return []*modelv1.Tool{
		{Name: "get_stock_price", Description: "Latest price", ParametersJsonSchema: `{"type":"object","properties":{"ticker":{"type":"string"}},"required":["ticker"]}`},
		{Name: "get_financials", Description: "Financial statements", ParametersJsonSchema: `{"type":"object","properties":{"ticker":{"type":"string"},"period":{"type":"string"}}}`},
	}
}

// scriptBHP answers with two tool calls; ids are sent unless native (Ollama
// sends none).
func scriptBHP(sim *providersim.Server, native bool) {
	id1, id2 := "call_price", "call_fin"
	if native {
		id1, id2 = "", ""
	}
	sim.When(providersim.Match{WithTools: true, LastUserContains: "BHP"}).
		Reasoning("I need the price and the financials.").
		Text("Looking it up.").
		ToolCallWithID(id1, "get_stock_price", map[string]any{"ticker": "BHP"}).
		ToolCallWithID(id2, "get_financials", map[string]any{"ticker": "BHP", "period": "FY24"}).
		Usage(providersim.Usage{PromptTokens: 120, CompletionTokens: 40, ReasoningTokens: 12, CacheHitTokens: 100})
}

func sameJSON(t *testing.T, got, want string) bool {
	t.Helper()
	var g, w any
	if json.Unmarshal([]byte(got), &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}

// The stream is normalised for every provider: reasoning deltas, content
// deltas, complete tool calls in index order, then the end with finish
// reason TOOL_CALLS and usage; Chat returns the same assembled message.
func TestStreamIsNormalisedForEveryProvider(t *testing.T) {
	t.Parallel()
	for i, pc := range append(providerCases(), quirkCases()...) {
		t.Run(fmt.Sprintf("%s-%d", pc.typ, i), func(t *testing.T) {
			t.Parallel()
			sim := providersim.Start(t, pc.opts)
			scriptBHP(sim, pc.typ == "ollama")
			gw := startGateway(t, pc.env, oneProvider(pc.typ, sim.URL, ""))
			req := chatReq("chat", userMsg("How is BHP doing?"))
			req.Tools = bhpTools()
			st, err := gw.client.ChatStream(ctxTimeout(t, 5*time.Second), &modelv1.ChatStreamRequest{Request: req})
			if err != nil {
				t.Fatal(err)
			}
			chunks, err := streamAll(t, st)
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			phase := 0 // 0 reasoning, 1 content, 2 tool calls, 3 end
			var reasoning, content string
			var calls []*modelv1.ToolCall
			var end *modelv1.StreamEnd
			for _, c := range chunks {
				p := 0
				switch x := c.GetChunk().(type) {
				case *modelv1.ChatStreamResponse_ReasoningDelta:
					reasoning += x.ReasoningDelta
				case *modelv1.ChatStreamResponse_ContentDelta:
					p, content = 1, content+x.ContentDelta
				case *modelv1.ChatStreamResponse_ToolCall:
					p, calls = 2, append(calls, x.ToolCall)
				case *modelv1.ChatStreamResponse_End:
					p, end = 3, x.End
				}
				if p < phase {
					t.Fatalf("chunk %v after phase %d", c, phase)
				}
				phase = p
			}
			if reasoning != "I need the price and the financials." || content != "Looking it up." {
				t.Errorf("reasoning %q content %q", reasoning, content)
			}
			if len(calls) != 2 || calls[0].GetName() != "get_stock_price" || calls[1].GetName() != "get_financials" {
				t.Fatalf("tool calls %v", calls)
			}
			if !sameJSON(t, calls[0].GetArgumentsJson(), `{"ticker":"BHP"}`) || !sameJSON(t, calls[1].GetArgumentsJson(), `{"ticker":"BHP","period":"FY24"}`) {
				t.Errorf("arguments %s / %s", calls[0].GetArgumentsJson(), calls[1].GetArgumentsJson())
			}
			if pc.typ == "ollama" {
				if !strings.HasPrefix(calls[0].GetId(), "call_") || calls[0].GetId() == calls[1].GetId() {
					t.Errorf("generated ids %q %q", calls[0].GetId(), calls[1].GetId())
				}
			} else if calls[0].GetId() != "call_price" || calls[1].GetId() != "call_fin" {
				t.Errorf("ids %q %q, want the provider's call_price call_fin", calls[0].GetId(), calls[1].GetId())
			}
			if end == nil || end.GetFinishReason() != modelv1.FinishReason_FINISH_REASON_TOOL_CALLS || end.GetProvider() != "up" {
				t.Fatalf("end %v", end)
			}
			if u := end.GetUsage(); u.GetPromptTokens() != 120 || u.GetCompletionTokens() != 40 {
				t.Errorf("usage %v", u)
			}
			if end.GetTimeToFirstChunk().AsDuration() <= 0 {
				t.Error("no time to first chunk")
			}

			resp, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), req)
			if err != nil {
				t.Fatal(err)
			}
			m := resp.GetMessage()
			if m.GetContent() != content || m.GetReasoning() != reasoning || len(m.GetToolCalls()) != 2 ||
				resp.GetFinishReason() != modelv1.FinishReason_FINISH_REASON_TOOL_CALLS {
				t.Errorf("Chat message %v finish %v", m, resp.GetFinishReason())
			}
			if pc.typ == "ollama" { // ids generated, and stable
				if m.GetToolCalls()[0].GetId() != calls[0].GetId() {
					t.Errorf("generated ids differ between calls: %q vs %q", m.GetToolCalls()[0].GetId(), calls[0].GetId())
				}
			}
			if rq, _ := sim.LastRequest(); !rq.Native && !rq.Stream && rq.Body["stream_options"] != nil {
				t.Error("unary request asked for stream_options")
			}
		})
	}
}

func TestStreamAsksForUsage(t *testing.T) {
	t.Parallel()
	for _, pc := range providerCases()[:3] {
		t.Run(pc.typ, func(t *testing.T) {
			t.Parallel()
			sim := providersim.Start(t, pc.opts)
			gw := startGateway(t, pc.env, oneProvider(pc.typ, sim.URL, ""))
			st, err := gw.client.ChatStream(ctxTimeout(t, 5*time.Second), &modelv1.ChatStreamRequest{Request: chatReq("chat", userMsg("hi"))})
			if err != nil {
				t.Fatal(err)
			}
			chunks, err := streamAll(t, st)
			if err != nil {
				t.Fatal(err)
			}
			req, _ := sim.LastRequest()
			so, _ := req.Body["stream_options"].(map[string]any)
			if req.Body["stream"] != true || so["include_usage"] != true {
				t.Errorf("stream %v stream_options %v", req.Body["stream"], req.Body["stream_options"])
			}
			if chunks[len(chunks)-1].GetEnd().GetUsage().GetCompletionTokens() == 0 {
				t.Error("usage missing from the stream's end")
			}
		})
	}
}

func TestUsageCountsCacheAndReasoning(t *testing.T) {
	t.Parallel()
	for _, pc := range providerCases()[:3] {
		t.Run(pc.typ, func(t *testing.T) {
			t.Parallel()
			sim := providersim.Start(t, pc.opts)
			sim.When(providersim.Match{}).Text("ok").Usage(providersim.Usage{PromptTokens: 100, CompletionTokens: 30, ReasoningTokens: 20, CacheHitTokens: 64})
			gw := startGateway(t, pc.env, oneProvider(pc.typ, sim.URL, ""))
			resp, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), chatReq("chat", userMsg("hi")))
			if err != nil {
				t.Fatal(err)
			}
			want := &modelv1.Usage{PromptTokens: 100, CompletionTokens: 30, ReasoningTokens: 20, CacheHitTokens: 64, CacheMissTokens: 36, TotalTokens: 130}
			if !proto.Equal(resp.GetUsage(), want) {
				t.Errorf("usage %v, want %v", resp.GetUsage(), want)
			}
		})
	}
}

func TestDeepSeekFinishReasons(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Options{Flavor: providersim.DeepSeek})
	gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": "k"}, oneProvider("deepseek", sim.URL, ""))
	for wire, want := range map[string]modelv1.FinishReason{
		"stop":                         modelv1.FinishReason_FINISH_REASON_STOP,
		"length":                       modelv1.FinishReason_FINISH_REASON_LENGTH,
		"content_filter":               modelv1.FinishReason_FINISH_REASON_CONTENT_FILTER,
		"insufficient_system_resource": modelv1.FinishReason_FINISH_REASON_INSUFFICIENT_RESOURCES,
	} {
		sim.Reset()
		sim.When(providersim.Match{}).Text("x").Finish(wire)
		resp, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), chatReq("chat", userMsg("hi")))
		if err != nil || resp.GetFinishReason() != want {
			t.Errorf("%s: %v %v", wire, resp.GetFinishReason(), err)
		}
		st, err := gw.client.ChatStream(ctxTimeout(t, 5*time.Second), &modelv1.ChatStreamRequest{Request: chatReq("chat", userMsg("hi"))})
		if err != nil {
			t.Fatal(err)
		}
		chunks, err := streamAll(t, st)
		if err != nil || chunks[len(chunks)-1].GetEnd().GetFinishReason() != want {
			t.Errorf("stream %s: %v %v", wire, chunks[len(chunks)-1], err)
		}
	}
}

// toolTurn is a conversation whose assistant turn made a tool call with
// reasoning, followed by the tool result.
func toolTurn() []*modelv1.Message {
	return []*modelv1.Message{
		userMsg("How is BHP doing?"),
		{Role: modelv1.Role_ROLE_ASSISTANT, Reasoning: "I should fetch the price.", ToolCalls: []*modelv1.ToolCall{{Id: "call_1", Name: "get_stock_price", ArgumentsJson: `{"ticker":"BHP"}`}}},
		{Role: modelv1.Role_ROLE_TOOL, ToolCallId: "call_1", Content: `{"price": 45.1}`},
	}
}

func TestDeepSeekReasoningSentBackAfterToolCalls(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Preset(providersim.DeepSeek)) // 400 without it
	gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": "k"}, oneProvider("deepseek", sim.URL, ""))
	req := &modelv1.ChatRequest{Model: "chat", Messages: toolTurn(), Tools: bhpTools()}
	if _, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), req); err != nil {
		t.Fatalf("Chat: %v", err)
	}
	got, _ := sim.LastRequest()
	if got.Messages[1].Reasoning != "I should fetch the price." || got.Messages[1].ToolCalls[0].ID != "call_1" || got.Messages[2].ToolCallID != "call_1" {
		t.Errorf("assistant turn sent as %+v", got.Messages[1:])
	}
}

func TestReasoningReplayIsAPerModelSetting(t *testing.T) {
	t.Parallel()
	old := providersim.Options{Flavor: providersim.DeepSeek, Faults: providersim.Faults{RejectReasoningInHistory: true}}
	sim := providersim.Start(t, old)
	gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": "k"}, `
providers:
  ds: {type: deepseek, base_url: "`+sim.URL+`"}
models:
  new: [{provider: ds, model: deepseek-chat}]
  old: [{provider: ds, model: deepseek-reasoner, reasoning_replay: none}]
`)
	_, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), &modelv1.ChatRequest{Model: "new", Messages: toolTurn()})
	st := wantCode(t, err, codes.InvalidArgument)
	if !strings.Contains(st.Message(), "reasoning_content") {
		t.Errorf("message %q", st.Message())
	}
	if _, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), &modelv1.ChatRequest{Model: "old", Messages: toolTurn()}); err != nil {
		t.Fatalf("old model: %v", err)
	}
	got, _ := sim.LastRequest()
	if got.Messages[1].HasReasoningField {
		t.Error("reasoning sent to a model configured not to take it")
	}
}

func TestQwenThinkingOnNonStreamingCallIsStreamedUpstream(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Preset(providersim.Qwen)) // 400 for non-streaming thinking
	sim.When(providersim.Match{Thinking: true}).Reasoning("step by step").Text("42")
	gw := startGateway(t, map[string]string{"QWEN_API_KEY": "k"}, oneProvider("qwen", sim.URL, ""))
	on := true
	req := chatReq("chat", userMsg("meaning of life?"))
	req.Thinking = &modelv1.ThinkingOptions{Enabled: &on, BudgetTokens: proto.Int32(512)}
	resp, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), req)
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if resp.GetMessage().GetContent() != "42" || resp.GetMessage().GetReasoning() != "step by step" || resp.GetUsage().GetTotalTokens() == 0 {
		t.Errorf("aggregated answer %v usage %v", resp.GetMessage(), resp.GetUsage())
	}
	got, _ := sim.LastRequest()
	if !got.Stream || got.Body["enable_thinking"] != true || got.Body["thinking_budget"] != float64(512) || got.Body["thinking"] != nil || got.Body["reasoning_effort"] != nil {
		t.Errorf("upstream body %s", got.Raw)
	}
	// Without thinking, a non-streaming call says so explicitly.
	if _, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), chatReq("chat", userMsg("hi"))); err != nil {
		t.Fatal(err)
	}
	got, _ = sim.LastRequest()
	if got.Stream || got.Body["enable_thinking"] != false {
		t.Errorf("plain call body %s", got.Raw)
	}
}

var pngBytes = []byte("\x89PNG\r\n\x1a\n-fake-image-data")

func TestImagesInEachProvidersFormat(t *testing.T) {
	t.Parallel()
	b64 := base64.StdEncoding.EncodeToString(pngBytes)
	for _, pc := range providerCases()[1:] {
		t.Run(pc.typ, func(t *testing.T) {
			t.Parallel()
			sim := providersim.Start(t, pc.opts)
			gw := startGateway(t, pc.env, oneProvider(pc.typ, sim.URL, ""))
			req := chatReq("chat", &modelv1.Message{Role: modelv1.Role_ROLE_USER, Content: "What is this?", Images: []*modelv1.ImagePart{{Data: pngBytes}}})
			if _, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), req); err != nil {
				t.Fatal(err)
			}
			got, _ := sim.LastRequest()
			want := "data:image/png;base64," + b64
			if pc.typ == "ollama" {
				want = b64
			}
			if m := got.Messages[0]; len(m.Images) != 1 || m.Images[0] != want || m.Content != "What is this?" {
				t.Errorf("image sent as %+v, want %q", m, want)
			}
		})
	}
}

func TestImagesToDeepSeekFallBackToAVisionProvider(t *testing.T) {
	t.Parallel()
	a := providersim.Start(t, providersim.Options{Flavor: providersim.DeepSeek})
	b := providersim.Start(t, providersim.Options{Flavor: providersim.Qwen})
	gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": "k1", "QWEN_API_KEY": "k2"}, fmt.Sprintf(twoProviders, a.URL, b.URL))
	req := chatReq("chat", &modelv1.Message{Role: modelv1.Role_ROLE_USER, Content: "What is this?", Images: []*modelv1.ImagePart{{Data: pngBytes, MimeType: "image/png"}}})
	resp, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetProvider() != "second" || a.Count() != 0 {
		t.Errorf("provider %s; deepseek got %d requests", resp.GetProvider(), a.Count())
	}
}

func TestProviderSpecificParametersAreDroppedOrTranslated(t *testing.T) {
	t.Parallel()
	on := true
	req := chatReq("chat", userMsg("hi"))
	req.Options = &modelv1.GenerationOptions{Temperature: proto.Float64(0.5), TopP: proto.Float64(0.9), TopK: proto.Int32(40),
		MaxTokens: proto.Int32(256), Stop: []string{"END"}, Seed: proto.Int64(7), NumCtx: proto.Int32(8192)}
	req.Thinking = &modelv1.ThinkingOptions{Enabled: &on, Effort: "high", BudgetTokens: proto.Int32(1024)}
	checks := map[string]func(b map[string]any) []string{
		"deepseek": func(b map[string]any) (bad []string) {
			th, _ := b["thinking"].(map[string]any)
			if th["type"] != "enabled" || b["reasoning_effort"] != "high" || b["max_tokens"] != float64(256) || b["temperature"] != 0.5 {
				bad = append(bad, "thinking/reasoning_effort/max_tokens/temperature")
			}
			for _, k := range []string{"top_k", "seed", "num_ctx", "thinking_budget", "enable_thinking", "options"} {
				if _, ok := b[k]; ok {
					bad = append(bad, k+" sent")
				}
			}
			return bad
		},
		"qwen": func(b map[string]any) (bad []string) {
			if b["enable_thinking"] != true || b["thinking_budget"] != float64(1024) || b["top_k"] != float64(40) || b["seed"] != float64(7) {
				bad = append(bad, "enable_thinking/thinking_budget/top_k/seed")
			}
			for _, k := range []string{"thinking", "reasoning_effort", "num_ctx"} {
				if _, ok := b[k]; ok {
					bad = append(bad, k+" sent")
				}
			}
			return bad
		},
		"openai": func(b map[string]any) (bad []string) {
			if b["reasoning_effort"] != "high" || b["seed"] != float64(7) || b["top_p"] != 0.9 {
				bad = append(bad, "reasoning_effort/seed/top_p")
			}
			for _, k := range []string{"thinking", "enable_thinking", "top_k", "num_ctx", "thinking_budget"} {
				if _, ok := b[k]; ok {
					bad = append(bad, k+" sent")
				}
			}
			return bad
		},
		"ollama": func(b map[string]any) (bad []string) {
			o, _ := b["options"].(map[string]any)
			want := map[string]any{"temperature": 0.5, "top_p": 0.9, "top_k": float64(40), "num_predict": float64(256), "seed": float64(7), "num_ctx": float64(8192), "stop": []any{"END"}}
			if !reflect.DeepEqual(o, want) {
				bad = append(bad, fmt.Sprintf("options %v", o))
			}
			if b["think"] != "high" || b["keep_alive"] != "10m" {
				bad = append(bad, fmt.Sprintf("think %v keep_alive %v", b["think"], b["keep_alive"]))
			}
			for _, k := range []string{"temperature", "max_tokens", "reasoning_effort"} {
				if _, ok := b[k]; ok {
					bad = append(bad, k+" at top level")
				}
			}
			return bad
		},
	}
	for _, pc := range providerCases() {
		t.Run(pc.typ, func(t *testing.T) {
			t.Parallel()
			sim := providersim.Start(t, pc.opts)
			routing := oneProvider(pc.typ, sim.URL, "")
			if pc.typ == "ollama" {
				routing = strings.Replace(routing, "model: m1}", "model: m1, extra: {keep_alive: 10m}}", 1)
			}
			gw := startGateway(t, pc.env, routing)
			st, err := gw.client.ChatStream(ctxTimeout(t, 5*time.Second), &modelv1.ChatStreamRequest{Request: req})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := streamAll(t, st); err != nil {
				t.Fatal(err)
			}
			got, _ := sim.LastRequest()
			if bad := checks[pc.typ](got.Body); len(bad) > 0 {
				t.Errorf("%v in body %s", bad, got.Raw)
			}
		})
	}
}

func TestToolChoicePerProvider(t *testing.T) {
	t.Parallel()
	type want struct {
		choice any
		tools  []string
	}
	named := map[string]any{"type": "function", "function": map[string]any{"name": "get_financials"}}
	cases := []struct {
		typ, extra string
		mode       modelv1.ToolChoiceMode
		want       want
	}{
		{"openai", "", modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, want{"required", []string{"get_stock_price", "get_financials"}}},
		{"openai", "", modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_NAMED, want{named, []string{"get_stock_price", "get_financials"}}},
		{"qwen", "", modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED, want{"auto", []string{"get_stock_price", "get_financials"}}},
		{"deepseek", "", modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE, want{"none", []string{"get_stock_price", "get_financials"}}},
		{"ollama", "", modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE, want{nil, nil}},
		{"ollama", "", modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_NAMED, want{nil, []string{"get_financials"}}},
		// Ollama's OpenAI-compatible /v1 rejects tool_choice.
		{"openai", ", no_tool_choice: true", modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_NAMED, want{nil, []string{"get_financials"}}},
	}
	for _, tc := range cases {
		t.Run(tc.typ+tc.extra+tc.mode.String(), func(t *testing.T) {
			t.Parallel()
			opts := providersim.Options{Flavor: providersim.OpenAI}
			if tc.extra != "" {
				opts = providersim.Preset(providersim.Ollama)
			}
			sim := providersim.Start(t, opts)
			gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": "k", "QWEN_API_KEY": "k"}, oneProvider(tc.typ, sim.URL, tc.extra))
			req := chatReq("chat", userMsg("hi"))
			req.Tools = bhpTools()
			req.ToolChoice = &modelv1.ToolChoice{Mode: tc.mode, Name: "get_financials"}
			if _, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), req); err != nil {
				t.Fatal(err)
			}
			got, _ := sim.LastRequest()
			if !reflect.DeepEqual(got.ToolChoice, tc.want.choice) || !reflect.DeepEqual(got.Tools, tc.want.tools) {
				t.Errorf("tool_choice %v tools %v, want %v %v", got.ToolChoice, got.Tools, tc.want.choice, tc.want.tools)
			}
		})
	}
}

func TestOllamaWire(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Preset(providersim.Ollama))
	gw := startGateway(t, nil, oneProvider("ollama", sim.URL, ""))
	ctx := ctxTimeout(t, 10*time.Second)

	// Tool results go back with tool_name; assistant arguments as objects.
	req := &modelv1.ChatRequest{Model: "chat", Messages: toolTurn(), Tools: bhpTools()}
	if _, err := gw.client.Chat(ctx, req); err != nil {
		t.Fatal(err)
	}
	got, _ := sim.LastRequest()
	msgs, _ := got.Body["messages"].([]any)
	asst, _ := msgs[1].(map[string]any)
	tcs, _ := asst["tool_calls"].([]any)
	fn, _ := tcs[0].(map[string]any)["function"].(map[string]any)
	if args, ok := fn["arguments"].(map[string]any); !ok || args["ticker"] != "BHP" {
		t.Errorf("assistant tool call sent as %v", fn)
	}
	if got.Messages[2].ToolName != "get_stock_price" || got.Body["stream"] != false || got.Path != "/api/chat" {
		t.Errorf("tool result %+v, stream %v, path %s", got.Messages[2], got.Body["stream"], got.Path)
	}

	// JSON object mode is format "json".
	jr := chatReq("chat", userMsg("colours"))
	jr.ResponseFormat = &modelv1.ResponseFormat{Type: modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT}
	if _, err := gw.client.Chat(ctx, jr); err != nil {
		t.Fatal(err)
	}
	got, _ = sim.LastRequest()
	if got.Body["format"] != "json" {
		t.Errorf("format %v", got.Body["format"])
	}

	// An error line mid-stream (HTTP 200) is an error.
	sim.When(providersim.Match{LastUserContains: "crash"}).Text("partial answer here").FailMidStream("llama runner process has terminated")
	st, err := gw.client.ChatStream(ctx, &modelv1.ChatStreamRequest{Request: chatReq("chat", userMsg("crash please"))})
	if err != nil {
		t.Fatal(err)
	}
	chunks, err := streamAll(t, st)
	s := wantCode(t, err, codes.Unavailable)
	if !strings.Contains(s.Message(), "llama runner process has terminated") || len(chunks) == 0 {
		t.Errorf("%d chunks then %q", len(chunks), s.Message())
	}

	// Ollama errors carry {"error": "..."}.
	sim.When(providersim.Match{LastUserContains: "busy"}).Error(503, "server busy, please try again.  maximum pending requests exceeded")
	_, err = gw.client.Chat(ctx, chatReq("chat", userMsg("busy")))
	s = wantCode(t, err, codes.Unavailable)
	if !strings.Contains(s.Message(), "maximum pending requests exceeded") {
		t.Errorf("message %q", s.Message())
	}
}

func TestOpenAICompatibleReasoningField(t *testing.T) {
	t.Parallel()
	// Ollama's /v1 names the field "reasoning".
	sim := providersim.Start(t, providersim.Preset(providersim.Ollama))
	sim.When(providersim.Match{}).Reasoning("hmm").Text("ok")
	gw := startGateway(t, nil, oneProvider("openai", sim.URL+"/v1", ", no_tool_choice: true"))
	resp, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), chatReq("chat", userMsg("hi")))
	if err != nil {
		t.Fatal(err)
	}
	st, err := gw.client.ChatStream(ctxTimeout(t, 5*time.Second), &modelv1.ChatStreamRequest{Request: chatReq("chat", userMsg("hi"))})
	if err != nil {
		t.Fatal(err)
	}
	chunks, err := streamAll(t, st)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetMessage().GetReasoning() != "hmm" || chunks[0].GetReasoningDelta() != "hmm" {
		t.Errorf("reasoning %q / %v", resp.GetMessage().GetReasoning(), chunks[0])
	}
	if got, _ := sim.LastRequest(); got.Path != "/v1/chat/completions" {
		t.Errorf("path %s", got.Path)
	}
}

func TestEmbeddingsPerProvider(t *testing.T) {
	t.Parallel()
	for _, pc := range []providerCase{providerCases()[1], providerCases()[2], providerCases()[3]} {
		t.Run(pc.typ, func(t *testing.T) {
			t.Parallel()
			sim := providersim.Start(t, pc.opts)
			gw := startGateway(t, pc.env, strings.Replace(oneProvider(pc.typ, sim.URL, ""), "chat:", "embed:", 1))
			resp, err := gw.client.Embed(ctxTimeout(t, 5*time.Second), &modelv1.EmbedRequest{Model: "embed", Inputs: []string{"alpha beta", "gamma"}, Dimensions: 16})
			if err != nil {
				t.Fatal(err)
			}
			want := [][]float32{providersim.Embed("alpha beta", 16), providersim.Embed("gamma", 16)}
			for i, e := range resp.GetEmbeddings() {
				if !reflect.DeepEqual(e.GetValues(), want[i]) {
					t.Errorf("vector %d = %v", i, e.GetValues())
				}
			}
			reqs := sim.Requests()
			path := reqs[len(reqs)-1].Path
			if (pc.typ == "ollama") != (path == "/api/embed") || reqs[len(reqs)-1].Body["dimensions"] != float64(16) {
				t.Errorf("path %s body %s", path, reqs[len(reqs)-1].Raw)
			}
		})
	}
}
