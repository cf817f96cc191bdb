package openaiapi_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// A unary completion comes back as OpenAI's chat.completion object, and
// the request's sampling parameters reach the provider.
func TestChatCompletion(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		m := startMesh(t, d)
		m.sim.When(providersim.Match{LastUserContains: "unary marker"}).Text("Hello from the mesh.").
			Usage(providersim.Usage{PromptTokens: 21, CompletionTokens: 5, CacheHitTokens: 16})
		resp, body := post(t, m.base+"/chat/completions", aliceKey, `{
			"model": "chat",
			"messages": [{"role": "developer", "content": "Be brief."},
			             {"role": "user", "content": [{"type": "text", "text": "unary marker"}, {"type": "text", "text": "second part"}]}],
			"temperature": 0.3, "top_p": 0.9, "max_tokens": 10, "max_completion_tokens": 64,
			"stop": "END", "seed": 7, "user": "u-1",
			"store": true, "metadata": {"x": "y"}, "frequency_penalty": 0.5, "service_tier": "auto"}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		var c struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			Model   string `json:"model"`
			Choices []struct {
				Index   int `json:"index"`
				Message struct {
					Role    string  `json:"role"`
					Content *string `json:"content"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				PromptTokens        int64 `json:"prompt_tokens"`
				CompletionTokens    int64 `json:"completion_tokens"`
				TotalTokens         int64 `json:"total_tokens"`
				PromptTokensDetails struct {
					CachedTokens int64 `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(body, &c); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(c.ID, "chatcmpl-") || c.Object != "chat.completion" || c.Model != "chat" || time.Since(time.Unix(c.Created, 0)) > time.Minute {
			t.Errorf("envelope: %s", body)
		}
		if len(c.Choices) != 1 || c.Choices[0].Message.Role != "assistant" || c.Choices[0].Message.Content == nil ||
			*c.Choices[0].Message.Content != "Hello from the mesh." || c.Choices[0].FinishReason != "stop" {
			t.Errorf("choices: %s", body)
		}
		if u := c.Usage; u.PromptTokens != 21 || u.CompletionTokens != 5 || u.TotalTokens != 26 || u.PromptTokensDetails.CachedTokens != 16 {
			t.Errorf("usage: %+v", u)
		}
		if p := resp.Header.Get("X-Agentmesh-Provider"); p != "ds" {
			t.Errorf("X-Agentmesh-Provider = %q, want ds", p)
		}

		got, _ := m.sim.LastRequest()
		// DeepSeek takes no seed (the model gateway drops it for DeepSeek).
		for k, want := range map[string]any{"temperature": 0.3, "top_p": 0.9, "max_tokens": 64.0} {
			if got.Body[k] != want {
				t.Errorf("provider got %s = %v, want %v (max_completion_tokens wins over max_tokens)", k, got.Body[k], want)
			}
		}
		if stop, _ := json.Marshal(got.Body["stop"]); string(stop) != `["END"]` {
			t.Errorf("provider got stop %s", stop)
		}
		if len(got.Messages) != 2 || got.Messages[0].Role != "system" || got.Messages[1].Content != "unary marker\nsecond part" {
			t.Errorf("provider got messages %+v", got.Messages)
		}
		if _, has := got.Body["seed"]; has {
			t.Errorf("DeepSeek got a seed: %v", got.Body["seed"])
		}

		// An OpenAI-style provider takes the seed.
		resp, body = post(t, m.base+"/chat/completions", aliceKey, `{"model": "vision", "seed": 7, "messages": [{"role": "user", "content": "seeded"}]}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if got, _ = m.sim.LastRequest(); got.Body["seed"] != 7.0 {
			t.Errorf("provider got seed %v, want 7", got.Body["seed"])
		}
	})
}

// A streamed completion is a sequence of chat.completion.chunk events
// with one id, the role in the first delta, reasoning and content deltas,
// whole tool calls with their index, the finish reason, then (with
// include_usage) a usage chunk with no choices, and data: [DONE]; every
// other chunk carries "usage": null.
func TestChatStream(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		m := startMesh(t, d)
		m.sim.When(providersim.Match{LastUserContains: "stream marker"}).
			Reasoning("Need price and financials.").
			Text("Looking it up.").
			ToolCallWithID("call_price", "get_stock_price", map[string]any{"ticker": "BHP"}).
			ToolCallWithID("call_fin", "get_financials", map[string]any{"ticker": "BHP", "period": "FY24"}).
			Usage(providersim.Usage{PromptTokens: 120, CompletionTokens: 40, ReasoningTokens: 12})
		resp := open(t, http.MethodPost, m.base+"/chat/completions", aliceKey, `{"model": "chat", "stream": true,
			"stream_options": {"include_usage": true},
			"messages": [{"role": "user", "content": "stream marker: how is BHP?"}],
			"tools": [{"type": "function", "function": {"name": "get_stock_price", "parameters": {"type": "object", "properties": {"ticker": {"type": "string"}}}}},
			          {"type": "function", "function": {"name": "get_financials", "parameters": {"type": "object"}}}]}`)
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		events := sseData(t, resp.Body)
		if len(events) < 4 || events[len(events)-1] != "[DONE]" {
			t.Fatalf("stream does not end in [DONE]: %q", events)
		}
		type toolDelta struct {
			Index    *int   `json:"index"`
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		}
		var (
			ids                       = map[string]bool{}
			content, reasoning, roles string
			finish                    []string
			calls                     []toolDelta
			usage                     map[string]any
		)
		chunks := events[:len(events)-1]
		for i, data := range chunks {
			var c struct {
				ID      string          `json:"id"`
				Object  string          `json:"object"`
				Model   string          `json:"model"`
				Usage   json.RawMessage `json:"usage"`
				Choices []struct {
					Index int `json:"index"`
					Delta struct {
						Role             string      `json:"role"`
						Content          string      `json:"content"`
						ReasoningContent string      `json:"reasoning_content"`
						ToolCalls        []toolDelta `json:"tool_calls"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				t.Fatalf("chunk %d is not JSON: %v: %s", i, err, data)
			}
			ids[c.ID] = true
			if c.Object != "chat.completion.chunk" || c.Model != "chat" {
				t.Errorf("chunk %d: %s", i, data)
			}
			if i == len(chunks)-1 {
				if !strings.Contains(data, `"choices":[]`) || json.Unmarshal(c.Usage, &usage) != nil {
					t.Errorf("last chunk is not the usage chunk: %s", data)
				}
				continue
			}
			if string(c.Usage) != "null" {
				t.Errorf("chunk %d: usage %s, want null before the last chunk", i, c.Usage)
			}
			if len(c.Choices) != 1 {
				t.Fatalf("chunk %d: %s", i, data)
			}
			d := c.Choices[0].Delta
			if d.Role != "" {
				roles += d.Role
			}
			content += d.Content
			reasoning += d.ReasoningContent
			calls = append(calls, d.ToolCalls...)
			if f := c.Choices[0].FinishReason; f != nil {
				finish = append(finish, *f)
			}
			if i == 0 && d.Role != "assistant" {
				t.Errorf("first chunk has no role: %s", data)
			}
		}
		if len(ids) != 1 {
			t.Errorf("chunk ids %v, want one", ids)
		}
		if roles != "assistant" || content != "Looking it up." || reasoning != "Need price and financials." {
			t.Errorf("roles %q, content %q, reasoning %q", roles, content, reasoning)
		}
		if !slices.Equal(finish, []string{"tool_calls"}) {
			t.Errorf("finish reasons %v", finish)
		}
		if len(calls) != 2 || *calls[0].Index != 0 || *calls[1].Index != 1 || calls[0].ID != "call_price" || calls[1].ID != "call_fin" ||
			calls[0].Type != "function" || calls[0].Function.Name != "get_stock_price" || calls[1].Function.Name != "get_financials" ||
			calls[1].Function.Arguments != `{"period":"FY24","ticker":"BHP"}` && calls[1].Function.Arguments != `{"ticker":"BHP","period":"FY24"}` {
			t.Errorf("tool calls %+v", calls)
		}
		if usage["prompt_tokens"] != 120.0 || usage["completion_tokens"] != 40.0 || usage["total_tokens"] != 160.0 ||
			usage["completion_tokens_details"].(map[string]any)["reasoning_tokens"] != 12.0 {
			t.Errorf("usage %v", usage)
		}
		if got, _ := m.sim.LastRequest(); !got.Stream {
			t.Error("the provider was not asked to stream")
		}
	})
}

// Without include_usage no chunk has a usage field.
func TestChatStreamWithoutUsage(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		m := startMesh(t, d)
		resp := open(t, http.MethodPost, m.base+"/chat/completions", aliceKey, `{"model": "chat", "stream": true, "messages": [{"role": "user", "content": "hi"}]}`)
		defer resp.Body.Close()
		events := sseData(t, resp.Body)
		if len(events) < 2 || events[len(events)-1] != "[DONE]" {
			t.Fatalf("events %q", events)
		}
		for _, e := range events[:len(events)-1] {
			if c := decodeChunk(t, e); c["usage"] != nil || len(c["choices"].([]any)) != 1 {
				t.Errorf("chunk %s", e)
			}
		}
	})
}

func decodeChunk(t *testing.T, data string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		t.Fatalf("chunk %q: %v", data, err)
	}
	return m
}

// A stream that fails before its first chunk is an HTTP error like a
// unary call; one that fails after it ends with an error event and no
// [DONE], which OpenAI's SDKs raise.
func TestChatStreamFailures(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		m := startMesh(t, d)
		resp, body := post(t, m.base+"/chat/completions", aliceKey, `{"model": "nope", "stream": true, "messages": [{"role": "user", "content": "hi"}]}`)
		if e := decodeError(t, body); resp.StatusCode != http.StatusNotFound || deref(e.Error.Code) != "model_not_found" {
			t.Errorf("unknown model, streamed: %d %s", resp.StatusCode, body)
		}

		m.sim.When(providersim.Match{LastUserContains: "cut marker"}).Text("partial answer that goes on").FailMidStream("model crashed")
		r := open(t, http.MethodPost, m.base+"/chat/completions", aliceKey, `{"model": "chat", "stream": true, "messages": [{"role": "user", "content": "cut marker"}]}`)
		defer r.Body.Close()
		events := sseData(t, r.Body)
		if r.StatusCode != http.StatusOK || len(events) < 2 {
			t.Fatalf("status %d, events %q", r.StatusCode, events)
		}
		last := events[len(events)-1]
		if slices.Contains(events, "[DONE]") || !strings.Contains(last, `"error"`) {
			t.Fatalf("a failed stream must end in an error event without [DONE]: %q", events)
		}
		e := decodeError(t, []byte(last))
		if e.Error.Type != "service_unavailable_error" || e.Error.Message == "" {
			t.Errorf("error event %s", last)
		}
		if !strings.Contains(events[0], "partial") {
			t.Errorf("first chunk %s", events[0])
		}
	})
}

// Tools and a named tool_choice reach the provider in its format; the
// assistant's tool calls come back with null content.
func TestChatTools(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		m := startMesh(t, d)
		// Tried in order: the tool results' turn first.
		m.sim.When(providersim.Match{LastRole: "tool"}).Text("BHP trades at 45.10.")
		m.sim.When(providersim.Match{LastUserContains: "tools marker"}).ToolCallWithID("call_1", "get_stock_price", map[string]any{"ticker": "BHP"})
		tools := `[{"type": "function", "function": {"name": "get_stock_price", "description": "Latest price", "strict": true,
			"parameters": {"type": "object", "properties": {"ticker": {"type": "string"}}, "required": ["ticker"]}}}]`
		resp, body := post(t, m.base+"/chat/completions", aliceKey, `{"model": "chat", "tools": `+tools+`,
			"tool_choice": {"type": "function", "function": {"name": "get_stock_price"}}, "parallel_tool_calls": false,
			"messages": [{"role": "user", "content": "tools marker"}]}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		c := decode(t, body)
		choice := c["choices"].([]any)[0].(map[string]any)
		msg := choice["message"].(map[string]any)
		if choice["finish_reason"] != "tool_calls" || msg["content"] != nil {
			t.Errorf("choice %v", choice)
		}
		if _, present := msg["content"]; !present {
			t.Errorf("content must be present and null: %s", body)
		}
		calls := msg["tool_calls"].([]any)
		call := calls[0].(map[string]any)
		fn := call["function"].(map[string]any)
		if len(calls) != 1 || call["id"] != "call_1" || call["type"] != "function" || fn["name"] != "get_stock_price" || fn["arguments"] != `{"ticker":"BHP"}` {
			t.Errorf("tool calls %v", calls)
		}
		if _, has := call["index"]; has {
			t.Errorf("a unary tool call has no index: %v", call)
		}
		got, _ := m.sim.LastRequest()
		if tc, _ := json.Marshal(got.ToolChoice); string(tc) != `{"function":{"name":"get_stock_price"},"type":"function"}` {
			t.Errorf("provider got tool_choice %s", tc)
		}

		// The tool result goes back with the assistant turn, as OpenAI clients send it.
		resp, body = post(t, m.base+"/chat/completions", aliceKey, `{"model": "chat", "tools": `+tools+`, "messages": [
			{"role": "user", "content": "tools marker"},
			{"role": "assistant", "content": null, "reasoning_content": "I should look.", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_stock_price", "arguments": "{\"ticker\":\"BHP\"}"}}]},
			{"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "{\"price\": 45.10}"}]}]}`)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "BHP trades at 45.10.") {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		got, _ = m.sim.LastRequest()
		if len(got.Messages) != 3 || got.Messages[1].Reasoning != "I should look." || len(got.Messages[1].ToolCalls) != 1 ||
			got.Messages[2].ToolCallID != "call_1" || got.Messages[2].Content != `{"price": 45.10}` {
			t.Errorf("provider got messages %+v", got.Messages)
		}
	})
}

// A user message's image_url data URL reaches the provider as the same
// data URL, typed by its bytes.
func TestChatImageDataURL(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		m := startMesh(t, d)
		png := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nnot really"))
		resp, body := post(t, m.base+"/chat/completions", aliceKey, `{"model": "vision", "messages": [{"role": "user", "content": [
			{"type": "text", "text": "What is this?"},
			{"type": "image_url", "image_url": {"url": "data:image/png;base64,`+png+`", "detail": "low"}}]}]}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		got, _ := m.sim.LastRequest()
		if len(got.Messages) != 1 || len(got.Messages[0].Images) != 1 || got.Messages[0].Images[0] != "data:image/png;base64,"+png {
			t.Errorf("provider got %+v", got.Messages)
		}
		// A JPEG labelled PNG goes as what its bytes are.
		jpeg := base64.StdEncoding.EncodeToString([]byte("\xff\xd8\xff\xe0 not really"))
		resp, body = post(t, m.base+"/chat/completions", aliceKey, `{"model": "vision", "messages": [{"role": "user", "content": [
			{"type": "image_url", "image_url": {"url": "data:image/png;base64,`+jpeg+`"}}]}]}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if got, _ = m.sim.LastRequest(); len(got.Messages) != 1 || len(got.Messages[0].Images) != 1 || got.Messages[0].Images[0] != "data:image/jpeg;base64,"+jpeg {
			t.Errorf("a JPEG labelled PNG: provider got %+v", got.Messages)
		}
	})
}

// json_schema answers are validated by the gateway for every provider
// (DeepSeek has no native schemas): a valid answer passes, one that still
// fails after the repair attempt is a 500, not the caller's fault.
func TestChatResponseFormat(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		m := startMesh(t, d)
		m.sim.When(providersim.Match{LastUserContains: "schema-ok marker"}).JSON(map[string]any{"status": "RESOLVED"})
		m.sim.When(providersim.Match{LastUserContains: "schema-bad marker"}).Text(`{"status": "MAYBE"}`)
		format := `"response_format": {"type": "json_schema", "json_schema": {"name": "verdict", "strict": true, "schema":
			{"type": "object", "properties": {"status": {"type": "string", "enum": ["RESOLVED", "UNRESOLVED"]}}, "required": ["status"]}}}`
		resp, body := post(t, m.base+"/chat/completions", aliceKey, `{"model": "chat", `+format+`, "messages": [{"role": "user", "content": "schema-ok marker, answer in json"}]}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		content := decode(t, body)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
		if decode(t, []byte(content))["status"] != "RESOLVED" {
			t.Errorf("content %s", content)
		}
		got, _ := m.sim.LastRequest()
		if got.JSONMode != "json_object" {
			t.Errorf("DeepSeek was asked for %q, want its json_object mode", got.JSONMode)
		}

		resp, body = post(t, m.base+"/chat/completions", aliceKey, `{"model": "chat", `+format+`, "messages": [{"role": "user", "content": "schema-bad marker, answer in json"}]}`)
		e := decodeError(t, body)
		if resp.StatusCode != http.StatusInternalServerError || e.Error.Type != "server_error" || deref(e.Error.Code) != "schema_validation_failed" {
			t.Errorf("status %d: %s", resp.StatusCode, body)
		}

		resp, body = post(t, m.base+"/chat/completions", aliceKey, `{"model": "chat", "response_format": {"type": "json_object"}, "messages": [{"role": "user", "content": "schema-ok marker, json"}]}`)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("json_object: status %d: %s", resp.StatusCode, body)
		}
	})
}

// Every failure is an OpenAI error object with the HTTP status an OpenAI
// client expects, the offending parameter named; unknown fields are
// ignored.
func TestErrors(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		m := startMesh(t, d)
		m.sim.When(providersim.Match{LastUserContains: "ratelimit marker"}).Error(429, "slow down").RetryAfter(3 * time.Second)
		m.sim.When(providersim.Match{LastUserContains: "overload marker"}).Error(503, "overloaded")
		msgs := `"messages": [{"role": "user", "content": "hi"}]`
		for _, tc := range []struct {
			name, method, path, key, body string
			status                        int
			typ, param, code              string
		}{
			{"no key", "POST", "/chat/completions", "", `{"model": "chat", ` + msgs + `}`, 401, "authentication_error", "<null>", "invalid_api_key"},
			{"wrong key", "GET", "/models", "sk-wrong", "", 401, "authentication_error", "<null>", "invalid_api_key"},
			{"unknown model", "POST", "/chat/completions", aliceKey, `{"model": "gpt-9", ` + msgs + `}`, 404, "invalid_request_error", "model", "model_not_found"},
			{"unknown model, embeddings", "POST", "/embeddings", aliceKey, `{"model": "gpt-9", "input": "x"}`, 404, "invalid_request_error", "model", "model_not_found"},
			{"missing model", "POST", "/chat/completions", aliceKey, `{` + msgs + `}`, 400, "invalid_request_error", "model", "<null>"},
			{"no messages", "POST", "/chat/completions", aliceKey, `{"model": "chat", "messages": []}`, 400, "invalid_request_error", "messages", "<null>"},
			{"temperature of the wrong type", "POST", "/chat/completions", aliceKey, `{"model": "chat", "temperature": "hot", ` + msgs + `}`, 400, "invalid_request_error", "temperature", "<null>"},
			{"temperature out of range", "POST", "/chat/completions", aliceKey, `{"model": "chat", "temperature": 3, ` + msgs + `}`, 400, "invalid_request_error", "temperature", "<null>"},
			{"temperature past any float", "POST", "/chat/completions", aliceKey, `{"model": "chat", "temperature": 1e400, ` + msgs + `}`, 400, "invalid_request_error", "temperature", "<null>"},
			{"max_tokens not an integer", "POST", "/chat/completions", aliceKey, `{"model": "chat", "max_tokens": 1.5, ` + msgs + `}`, 400, "invalid_request_error", "max_tokens", "<null>"},
			{"too many stop sequences", "POST", "/chat/completions", aliceKey, `{"model": "chat", "stop": ["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"], ` + msgs + `}`, 400, "invalid_request_error", "stop", "<null>"},
			{"stream not a boolean", "POST", "/chat/completions", aliceKey, `{"model": "chat", "stream": "yes", ` + msgs + `}`, 400, "invalid_request_error", "stream", "<null>"},
			{"content of the wrong type", "POST", "/chat/completions", aliceKey, `{"model": "chat", "messages": [{"role": "user", "content": 42}]}`, 400, "invalid_request_error", "messages[0].content", "<null>"},
			{"empty content array", "POST", "/chat/completions", aliceKey, `{"model": "chat", "messages": [{"role": "user", "content": []}]}`, 400, "invalid_request_error", "messages[0].content", "<null>"},
			{"name of the wrong type", "POST", "/chat/completions", aliceKey, `{"model": "chat", "messages": [{"role": "user", "content": "hi", "name": 123}]}`, 400, "invalid_request_error", "messages[0].name", "<null>"},
			{"body not UTF-8", "POST", "/chat/completions", aliceKey, "{\"model\": \"chat\", \"messages\": [{\"role\": \"user\", \"content\": \"caf\xe9\"}]}", 400, "invalid_request_error", "body", "<null>"},
			{"embeddings body not UTF-8", "POST", "/embeddings", aliceKey, "{\"model\": \"embed\", \"input\": \"caf\xe9\"}", 400, "invalid_request_error", "body", "<null>"},
			{"unknown role", "POST", "/chat/completions", aliceKey, `{"model": "chat", "messages": [{"role": "function", "content": "x"}]}`, 400, "invalid_request_error", "messages[0].role", "<null>"},
			{"tool message without its call id", "POST", "/chat/completions", aliceKey, `{"model": "chat", "messages": [{"role": "tool", "content": "x"}]}`, 400, "invalid_request_error", "messages[0].tool_call_id", "<null>"},
			{"remote image URL", "POST", "/chat/completions", aliceKey, `{"model": "chat", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": "http://169.254.169.254/latest"}}]}]}`, 400, "invalid_request_error", "messages[0].content[1].image_url.url", "<null>"},
			{"image data URL holding text", "POST", "/chat/completions", aliceKey, `{"model": "chat", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}]}]}`, 400, "invalid_request_error", "messages[0].content[1].image_url.url", "<null>"},
			{"image data URL holding a BMP", "POST", "/chat/completions", aliceKey, `{"model": "chat", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/bmp;base64,Qk0AAAAAAAAAAAAAAAAAAAAAAA=="}}]}]}`, 400, "invalid_request_error", "messages[0].content[0].image_url.url", "<null>"},
			{"audio part", "POST", "/chat/completions", aliceKey, `{"model": "chat", "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}]}]}`, 400, "invalid_request_error", "messages[0].content[0].type", "<null>"},
			{"several choices", "POST", "/chat/completions", aliceKey, `{"model": "chat", "n": 2, ` + msgs + `}`, 400, "invalid_request_error", "n", "<null>"},
			{"logprobs", "POST", "/chat/completions", aliceKey, `{"model": "chat", "logprobs": true, ` + msgs + `}`, 400, "invalid_request_error", "logprobs", "<null>"},
			{"tool_choice names no offered tool", "POST", "/chat/completions", aliceKey, `{"model": "chat", "tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": {"type": "function", "function": {"name": "b"}}, ` + msgs + `}`, 400, "invalid_request_error", "tool_choice.function.name", "<null>"},
			{"bad tool name", "POST", "/chat/completions", aliceKey, `{"model": "chat", "tools": [{"type": "function", "function": {"name": "has space"}}], ` + msgs + `}`, 400, "invalid_request_error", "tools[0].function.name", "<null>"},
			{"invalid schema", "POST", "/chat/completions", aliceKey, `{"model": "chat", "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 12}}}, ` + msgs + `}`, 400, "invalid_request_error", "response_format.json_schema.schema", "<null>"},
			{"schema with a reference cycle", "POST", "/chat/completions", aliceKey, `{"model": "chat", "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/definitions/a", "definitions": {"a": {"$ref": "#/definitions/a"}}}}}, ` + msgs + `}`, 400, "invalid_request_error", "response_format.json_schema.schema", "<null>"},
			{"unknown reasoning effort", "POST", "/chat/completions", aliceKey, `{"model": "chat", "reasoning_effort": "max", ` + msgs + `}`, 400, "invalid_request_error", "reasoning_effort", "<null>"},
			{"body not JSON", "POST", "/chat/completions", aliceKey, `{"model": `, 400, "invalid_request_error", "body", "<null>"},
			{"token-id embedding input", "POST", "/embeddings", aliceKey, `{"model": "embed", "input": [[1, 2, 3]]}`, 400, "invalid_request_error", "input[0]", "<null>"},
			{"unknown encoding format", "POST", "/embeddings", aliceKey, `{"model": "embed", "input": "x", "encoding_format": "int8"}`, 400, "invalid_request_error", "encoding_format", "<null>"},
			{"unknown route", "POST", "/completions", aliceKey, `{"model": "chat", "prompt": "x"}`, 404, "invalid_request_error", "<null>", "unknown_url"},
			{"rate limited upstream", "POST", "/chat/completions", aliceKey, `{"model": "chat", "messages": [{"role": "user", "content": "ratelimit marker"}]}`, 429, "rate_limit_error", "<null>", "rate_limit_exceeded"},
			{"provider overloaded", "POST", "/chat/completions", aliceKey, `{"model": "chat", "messages": [{"role": "user", "content": "overload marker"}]}`, 503, "service_unavailable_error", "<null>", "provider_error"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				resp, body := send(t, tc.method, m.base+tc.path, tc.key, tc.body)
				e := decodeError(t, body)
				if resp.StatusCode != tc.status || e.Error.Type != tc.typ || deref(e.Error.Param) != tc.param || deref(e.Error.Code) != tc.code || e.Error.Message == "" {
					t.Errorf("got %d type %q param %q code %q; want %d %q %q %q\n%s", resp.StatusCode, e.Error.Type, deref(e.Error.Param), deref(e.Error.Code),
						tc.status, tc.typ, tc.param, tc.code, body)
				}
				if tc.status == 429 && resp.Header.Get("Retry-After") != "3" {
					t.Errorf("Retry-After %q, want the provider's 3", resp.Header.Get("Retry-After"))
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
			})
		}
	})
}

// An X-API-Key header works as well as a bearer token, and an invalid one
// is not rescued by a valid bearer token (the gateway's rule).
func TestAPIKeyHeader(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		m := startMesh(t, d)
		for _, tc := range []struct {
			name   string
			header map[string]string
			status int
		}{
			{"X-API-Key", map[string]string{"X-API-Key": aliceKey}, 200},
			{"bearer", map[string]string{"Authorization": "Bearer " + aliceKey}, 200},
			{"bad X-API-Key beside a good bearer", map[string]string{"X-API-Key": "sk-wrong", "Authorization": "Bearer " + aliceKey}, 401},
		} {
			req, _ := http.NewRequest(http.MethodGet, m.base+"/models", nil)
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.status)
			}
		}
	})
}

// Embeddings come back in input order, as floats or as OpenAI's base64 of
// little-endian float32s.
func TestEmbeddings(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		m := startMesh(t, d)
		vec := []float32{0.25, -0.5, 1, 3.1415927}
		m.sim.When(providersim.Match{Endpoint: providersim.EndpointEmbed}).Embedding(vec)
		for _, format := range []string{"", "float", "base64"} {
			body := `{"model": "embed", "input": ["one", "two"], "dimensions": 4`
			if format != "" {
				body += `, "encoding_format": "` + format + `"`
			}
			resp, b := post(t, m.base+"/embeddings", aliceKey, body+"}")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%q: status %d: %s", format, resp.StatusCode, b)
			}
			var out struct {
				Object string `json:"object"`
				Model  string `json:"model"`
				Data   []struct {
					Object    string          `json:"object"`
					Index     int             `json:"index"`
					Embedding json.RawMessage `json:"embedding"`
				} `json:"data"`
			}
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatal(err)
			}
			if out.Object != "list" || out.Model != "embed" || len(out.Data) != 2 || out.Data[1].Index != 1 || out.Data[0].Object != "embedding" {
				t.Fatalf("%q: %s", format, b)
			}
			var got []float32
			if format == "base64" {
				var s string
				_ = json.Unmarshal(out.Data[0].Embedding, &s)
				raw, err := base64.StdEncoding.DecodeString(s)
				if err != nil || len(raw) != 4*len(vec) {
					t.Fatalf("base64 %q: %v", s, err)
				}
				for i := 0; i < len(raw); i += 4 {
					got = append(got, math.Float32frombits(binary.LittleEndian.Uint32(raw[i:])))
				}
			} else if err := json.Unmarshal(out.Data[0].Embedding, &got); err != nil {
				t.Fatalf("%q: %v: %s", format, err, b)
			}
			if !slices.Equal(got, vec) {
				t.Errorf("%q: embedding %v, want %v", format, got, vec)
			}
		}
		var got providersim.Request
		for _, r := range m.sim.Requests() {
			if r.Endpoint == providersim.EndpointEmbed {
				got = r
			}
		}
		if !slices.Equal(got.Inputs, []string{"one", "two"}) || got.Body["dimensions"] != 4.0 {
			t.Errorf("provider got inputs %q, dimensions %v", got.Inputs, got.Body["dimensions"])
		}
	})
}

// The logical models are the model ids.
func TestModels(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		m := startMesh(t, d)
		resp, body := send(t, http.MethodGet, m.base+"/models", aliceKey, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		var list struct {
			Object string `json:"object"`
			Data   []struct {
				ID, Object, OwnedBy string
			} `json:"data"`
		}
		_ = json.Unmarshal(body, &list)
		var ids []string
		for _, d := range list.Data {
			ids = append(ids, d.ID)
		}
		for _, want := range []string{"chat", "embed", "vision"} {
			if !slices.Contains(ids, want) {
				t.Errorf("models %v lack %q", ids, want)
			}
		}
		if list.Object != "list" || list.Data[0].Object != "model" {
			t.Errorf("list %s", body)
		}
		resp, body = send(t, http.MethodGet, m.base+"/models/embed", aliceKey, "")
		if resp.StatusCode != http.StatusOK || decode(t, body)["id"] != "embed" {
			t.Errorf("retrieve: %d %s", resp.StatusCode, body)
		}
		resp, body = send(t, http.MethodGet, m.base+"/models/nope", aliceKey, "")
		if e := decodeError(t, body); resp.StatusCode != http.StatusNotFound || deref(e.Error.Code) != "model_not_found" {
			t.Errorf("retrieve unknown: %d %s", resp.StatusCode, body)
		}
	})
}

// Every answer names its request id at either door: the caller's
// X-Request-Id when it sends a usable one, a new one otherwise.
func TestRequestID(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		m := startMesh(t, d)
		for _, tc := range []struct{ sent, want string }{
			{"trace-me-42", "trace-me-42"},
			{"", ""},
			{strings.Repeat("x", 200), ""}, // longer than 128 characters
		} {
			req, _ := http.NewRequest(http.MethodGet, m.base+"/models", nil)
			req.Header.Set("Authorization", "Bearer "+aliceKey)
			if tc.sent != "" {
				req.Header["X-Request-Id"] = []string{tc.sent}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := resp.Header.Get("X-Request-Id")
			switch {
			case resp.StatusCode != http.StatusOK:
				t.Errorf("sent %q: status %d", tc.sent, resp.StatusCode)
			case tc.want != "" && got != tc.want:
				t.Errorf("sent %q: X-Request-Id %q, want it echoed", tc.sent, got)
			case tc.want == "" && (len(got) != 24 || got == tc.sent):
				t.Errorf("sent %q: X-Request-Id %q, want a new id", tc.sent, got)
			}
		}
	})
}
