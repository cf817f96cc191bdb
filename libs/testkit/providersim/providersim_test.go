package providersim_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

func post(t *testing.T, client *http.Client, url, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// events returns the data payloads of an SSE body.
func events(body string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if d, ok := strings.CutPrefix(l, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestDeepSeekStreamWireFormat(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Preset(providersim.DeepSeek))
	sim.When(providersim.Match{}).Reasoning("think").Text("answer").Usage(providersim.Usage{PromptTokens: 10, CompletionTokens: 5, ReasoningTokens: 2, CacheHitTokens: 4})
	resp, body := post(t, nil, sim.URL+"/chat/completions",
		`{"model":"deepseek-chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("content type %s", resp.Header.Get("Content-Type"))
	}
	if !strings.HasPrefix(body, ": keep-alive\n\n: keep-alive\n\n") || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("body framing:\n%s", body)
	}
	ev := events(body)
	var last map[string]any
	_ = json.Unmarshal([]byte(ev[len(ev)-2]), &last)
	usage, _ := last["usage"].(map[string]any)
	if choices, _ := last["choices"].([]any); len(choices) != 0 || usage["prompt_cache_hit_tokens"] != float64(4) || usage["prompt_cache_miss_tokens"] != float64(6) {
		t.Errorf("usage chunk %s", ev[len(ev)-2])
	}
	if !strings.Contains(body, `"reasoning_content":"think"`) {
		t.Errorf("no reasoning_content delta:\n%s", body)
	}
	// Without include_usage, no usage.
	_, body = post(t, nil, sim.URL+"/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if strings.Contains(body, `"usage"`) {
		t.Error("usage sent without stream_options.include_usage")
	}
}

func TestQwenQuirks(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Preset(providersim.Qwen))
	sim.When(providersim.Match{}).ToolCall("f", `{"a":1}`)
	_, body := post(t, nil, sim.URL+"/compatible-mode/v1/chat/completions",
		`{"model":"qwen-plus","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}`)
	ev := events(body)
	if !strings.Contains(ev[0], `"usage":null`) || !strings.Contains(ev[2], `"id":""`) || !strings.Contains(ev[1], `"id":"call_sim_`) {
		t.Errorf("events:\n%s", strings.Join(ev, "\n"))
	}
	resp, body := post(t, nil, sim.URL+"/compatible-mode/v1/chat/completions", `{"model":"qwen-plus","enable_thinking":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 400 || !strings.Contains(body, "invalid_parameter_error") || !strings.Contains(body, "non-streaming") {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
}

func TestDeepSeekReasoningAndJSONRules(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Preset(providersim.DeepSeek))
	noReasoning := `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}]}`
	resp, body := post(t, nil, sim.URL+"/chat/completions", noReasoning)
	if resp.StatusCode != 400 || !strings.Contains(body, "reasoning_content") {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	resp, body = post(t, nil, sim.URL+"/chat/completions", `{"model":"m","response_format":{"type":"json_object"},"messages":[{"role":"user","content":"colours"}]}`)
	if resp.StatusCode != 400 || !strings.Contains(body, "json") {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	// Non-streaming answers may start with blank lines.
	_, body = post(t, nil, sim.URL+"/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if !strings.HasPrefix(body, "\n\n{") {
		t.Errorf("body %q", body[:10])
	}
}

func TestOllamaNativeWireFormat(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Preset(providersim.Ollama))
	sim.When(providersim.Match{WithTools: true}).Text("calling").ToolCall("get_price", map[string]any{"ticker": "BHP"})
	resp, body := post(t, nil, sim.URL+"/api/chat", `{"model":"qwen3","messages":[{"role":"user","content":"hi","images":["aGk="]}],"tools":[{"type":"function","function":{"name":"get_price"}}]}`)
	if resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Errorf("content type %s", resp.Header.Get("Content-Type"))
	}
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	final := lines[len(lines)-1]
	if final["done"] != true || final["done_reason"] != "stop" || final["eval_count"] == nil {
		t.Errorf("final line %v", final)
	}
	tcLine := lines[len(lines)-2]["message"].(map[string]any)
	fn := tcLine["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)
	if args, ok := fn["arguments"].(map[string]any); !ok || args["ticker"] != "BHP" {
		t.Errorf("arguments %v (must be an object)", fn["arguments"])
	}
	if r := sim.ChatRequests()[0]; !r.Stream || r.Messages[0].Images[0] != "aGk=" || !r.Native {
		t.Errorf("recorded %+v", r)
	}
	resp, body = post(t, nil, sim.URL+"/api/chat", `{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"done":true`) || !strings.Contains(body, providersim.SimulatedPrefix) {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
}

func TestRulesAreTriedInOrderAndCounted(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Options{APIKeys: []string{"k"}})
	once := sim.When(providersim.Match{LastUserContains: "bhp"}).Text("first").Times(1)
	after := sim.When(providersim.Match{LastRole: "user"}).Text("second")
	errRule := sim.When(providersim.Match{LastRole: "tool"}).Error(503, "busy").RetryAfter(1500 * time.Millisecond)
	ask := func(body string) (int, string, http.Header) {
		resp, b := post(t, nil, sim.URL+"/v1/chat/completions", body, "Authorization", "Bearer k")
		return resp.StatusCode, b, resp.Header
	}
	user := `{"model":"m","messages":[{"role":"user","content":"About BHP"}]}`
	if _, b, _ := ask(user); !strings.Contains(b, `"content":"first"`) {
		t.Errorf("first answer %s", b)
	}
	if _, b, _ := ask(user); !strings.Contains(b, `"content":"second"`) {
		t.Errorf("second answer %s", b)
	}
	code, b, h := ask(`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"c","content":"y"}]}`)
	if code != 503 || h.Get("Retry-After") != "2" || !strings.Contains(b, `"message":"busy"`) {
		t.Errorf("%d %s %v", code, b, h)
	}
	if once.Hits() != 1 || after.Hits() != 1 || errRule.Hits() != 1 || sim.Count() != 3 {
		t.Errorf("hits %d %d %d count %d", once.Hits(), after.Hits(), errRule.Hits(), sim.Count())
	}
	resp, _ := post(t, nil, sim.URL+"/chat/completions", user, "Authorization", "Bearer wrong")
	if resp.StatusCode != 401 {
		t.Errorf("wrong key: %d", resp.StatusCode)
	}
	if reqs := sim.ChatRequests(); len(reqs) != 4 || reqs[0].Header.Get("Authorization") != "Bearer k" || reqs[0].Rule != "rule-1" {
		t.Errorf("recorded %+v", reqs[0])
	}
}

func TestDefaultJSONAnswerIsAnInstanceOfTheSchema(t *testing.T) {
	t.Parallel()
	schemas := []string{
		`{"type":"object","required":["a","b","c"],"properties":{"a":{"type":"string","minLength":30},"b":{"type":"array","minItems":2,"items":{"type":"integer","minimum":5}},"c":{"enum":["X","Y"]}}}`,
		`{"$defs":{"p":{"type":"object","required":["n"],"properties":{"n":{"type":"number","exclusiveMinimum":0}}}},"type":"object","properties":{"p":{"$ref":"#/$defs/p"}},"required":["p"]}`,
		`{"allOf":[{"type":"object","properties":{"x":{"type":"boolean"}},"required":["x"]},{"properties":{"y":{"type":["string","null"],"format":"date-time"}},"required":["y"]}]}`,
		`{"type":"object","properties":{"s":{"type":"string","maxLength":4}},"required":["s"],"additionalProperties":false}`,
		// A list that must name each allowed id once: items take successive enum values.
		`{"type":"array","minItems":3,"maxItems":3,"uniqueItems":true,"items":{"type":"object","required":["id"],"properties":{"id":{"enum":["c1","c2","c3"]}}}}`,
	}
	sim := providersim.Start(t, providersim.Options{})
	for _, s := range schemas {
		_, body := post(t, nil, sim.URL+"/chat/completions",
			`{"model":"m","response_format":{"type":"json_schema","json_schema":{"name":"x","schema":`+s+`}},"messages":[{"role":"user","content":"hi"}]}`)
		var resp struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(body), &resp); err != nil {
			t.Fatal(err)
		}
		content := resp.Choices[0].Message.Content
		c := jsonschema.NewCompiler()
		doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(s))
		_ = c.AddResource("s.json", doc)
		sch, err := c.Compile("s.json")
		if err != nil {
			t.Fatal(err)
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(content))
		if err != nil {
			t.Fatalf("%s: %v", content, err)
		}
		if err := sch.Validate(inst); err != nil {
			t.Errorf("answer %s does not validate against %s: %v", content, s, err)
		}
	}
}

func TestEmbeddingsAreDeterministicAndSimilarForSharedWords(t *testing.T) {
	t.Parallel()
	a, b, c := providersim.Embed("iron ore prices", 32), providersim.Embed("iron ore prices", 32), providersim.Embed("unrelated banana", 32)
	dot := func(x, y []float32) (s float32) {
		for i := range x {
			s += x[i] * y[i]
		}
		return s
	}
	if dot(a, b) < 0.999 || dot(a, providersim.Embed("iron ore", 32)) <= dot(a, c) {
		t.Errorf("dots %v %v %v", dot(a, b), dot(a, providersim.Embed("iron ore", 32)), dot(a, c))
	}
	sim := providersim.Start(t, providersim.Options{Flavor: providersim.Ollama})
	_, body := post(t, nil, sim.URL+"/api/embed", `{"model":"nomic","input":["iron ore prices"],"dimensions":32}`)
	var r struct{ Embeddings [][]float32 }
	_ = json.Unmarshal([]byte(body), &r)
	if len(r.Embeddings) != 1 || !bytes.Equal(mustJSON(r.Embeddings[0]), mustJSON(a)) {
		t.Errorf("body %s", body)
	}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

func TestInMemoryNeedsNoPort(t *testing.T) {
	t.Parallel()
	sim := providersim.New(providersim.Options{})
	mem := sim.InMemory()
	defer mem.Close()
	client := &http.Client{Transport: mem.Transport}
	_, body := post(t, client, mem.BaseURL+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if !strings.Contains(body, `"content":"[simulat"`) {
		t.Errorf("body %s", body)
	}
	if !strings.HasSuffix(body, "data: [DONE]\n\n") || sim.Count() != 1 {
		t.Errorf("count %d body %s", sim.Count(), body)
	}
}

func TestDefaultAnswerCallsAForcedTool(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Options{})
	tools := `"tools":[{"type":"function","function":{"name":"first","parameters":{"type":"object"}}},` +
		`{"type":"function","function":{"name":"get_stock_price","parameters":{"type":"object","required":["ticker"],"properties":{"ticker":{"type":"string","minLength":1}}}}}]`
	tests := []struct {
		name, choice, want string
	}{
		{"required calls the first tool", `"required"`, "first"},
		{"named function", `{"type":"function","function":{"name":"get_stock_price"}}`, "get_stock_price"},
		{"auto answers in text", `"auto"`, ""},
	}
	for _, tc := range tests {
		_, body := post(t, nil, sim.URL+"/chat/completions",
			`{"model":"m",`+tools+`,"tool_choice":`+tc.choice+`,"messages":[{"role":"user","content":"Analyse BHP"}]}`)
		var resp struct {
			Choices []struct {
				Message struct {
					Content   string
					ToolCalls []struct {
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(body), &resp); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		msg := resp.Choices[0].Message
		if tc.want == "" {
			if len(msg.ToolCalls) != 0 || !strings.HasPrefix(msg.Content, providersim.SimulatedPrefix) {
				t.Errorf("%s: got %+v", tc.name, msg)
			}
			continue
		}
		if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != tc.want || resp.Choices[0].FinishReason != "tool_calls" {
			t.Fatalf("%s: got %+v finish %q", tc.name, msg, resp.Choices[0].FinishReason)
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(msg.ToolCalls[0].Function.Arguments), &args); err != nil {
			t.Fatalf("%s: arguments %q: %v", tc.name, msg.ToolCalls[0].Function.Arguments, err)
		}
		if tc.want == "get_stock_price" {
			if s, _ := args["ticker"].(string); s == "" {
				t.Errorf("%s: arguments %v miss the required ticker", tc.name, args)
			}
		}
	}
}

// TestCutAnswersEndEarly: Cut stops streams after n events without the
// terminator (cleanly or with a reset) and non-streaming bodies after n
// bytes, on both wire formats.
func TestCutAnswersEndEarly(t *testing.T) {
	t.Parallel()
	const text = "a long enough answer to span several chunks"
	for _, tc := range []struct {
		name, path, body string
		how              providersim.CutMode
		after            int
		wantLines        int  // data events or NDJSON lines received
		wantBytes        int  // non-streaming: body bytes received
		wantReadErr      bool // the read fails instead of ending cleanly
	}{
		{"sse eof", "/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, providersim.CutEOF, 3, 3, 0, false},
		{"sse reset", "/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, providersim.CutReset, 3, 3, 0, true},
		{"sse past the end", "/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, providersim.CutEOF, 1000, 8, 0, false},
		{"ndjson eof", "/api/chat", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, providersim.CutEOF, 2, 2, 0, false},
		{"ndjson past the end", "/api/chat", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, providersim.CutEOF, 1000, 6, 0, false},
		{"json body eof", "/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, providersim.CutEOF, 25, 0, 25, true},
		{"ollama json body reset", "/api/chat", `{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`, providersim.CutReset, 25, 0, 25, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim := providersim.Start(t, providersim.Options{})
			sim.When(providersim.Match{}).Text(text).Cut(tc.after, tc.how)
			resp, err := http.Post(sim.URL+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if (err != nil) != tc.wantReadErr {
				t.Errorf("read error %v, want one: %v", err, tc.wantReadErr)
			}
			body := string(b)
			if strings.Contains(body, "[DONE]") || strings.Contains(body, `"done":true`) {
				t.Errorf("terminator sent: %q", body)
			}
			if tc.wantBytes > 0 {
				if len(b) != tc.wantBytes || resp.ContentLength <= int64(len(b)) {
					t.Errorf("%d bytes of %d announced, want %d", len(b), resp.ContentLength, tc.wantBytes)
				}
				return
			}
			lines := events(body)
			if tc.path == "/api/chat" {
				lines = strings.Fields(strings.TrimSpace(strings.ReplaceAll(body, " ", "")))
			}
			if len(lines) != tc.wantLines {
				t.Errorf("%d events, want %d: %q", len(lines), tc.wantLines, body)
			}
		})
	}
}
