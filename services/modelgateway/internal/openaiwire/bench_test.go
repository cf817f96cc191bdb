package openaiwire_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/openaiwire"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/provider/deepseek"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/provider/openai"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/provider/qwen"
)

// benchRequest is a typical agent turn: system prompt, history with a tool
// call and its result, two tools.
func benchRequest() *llm.Request {
	on := true
	return &llm.Request{
		Model: "m",
		Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: "You are a financial analyst. Answer briefly."},
			{Role: llm.RoleUser, Content: "How is BHP doing this quarter?"},
			{Role: llm.RoleAssistant, Reasoning: "Need the price.", ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "get_stock_price", Arguments: `{"ticker":"BHP"}`}}},
			{Role: llm.RoleTool, ToolCallID: "call_1", Content: `{"price":45.1,"currency":"AUD"}`},
		},
		Tools: []llm.Tool{
			{Name: "get_stock_price", Description: "Latest price", Parameters: json.RawMessage(`{"type":"object","properties":{"ticker":{"type":"string"}},"required":["ticker"]}`)},
			{Name: "get_financials", Description: "Statements", Parameters: json.RawMessage(`{"type":"object","properties":{"ticker":{"type":"string"}}}`)},
		},
		Thinking: llm.Thinking{Enabled: &on},
	}
}

func BenchmarkEncode(b *testing.B) {
	for name, d := range map[string]openaiwire.Dialect{
		"deepseek": deepseek.Dialect(), "qwen": qwen.Dialect(), "openai": openai.Dialect(openai.Options{}),
	} {
		b.Run(name, func(b *testing.B) {
			req := benchRequest()
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				wr, err := openaiwire.Encode(req, &d, true)
				if err != nil {
					b.Fatal(err)
				}
				if buf, err = wr.AppendJSON(buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

const benchResponse = `{"id":"x","object":"chat.completion","created":1,"model":"deepseek-chat","choices":[{"index":0,"message":{"role":"assistant","content":"BHP trades at 45.10 AUD, up 2% this quarter on iron ore prices.","reasoning_content":"The price came back; summarise."},"finish_reason":"stop"}],"usage":{"prompt_tokens":180,"completion_tokens":40,"total_tokens":220,"prompt_cache_hit_tokens":128,"prompt_cache_miss_tokens":52,"completion_tokens_details":{"reasoning_tokens":12}}}`

func BenchmarkDecodeResponse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		var cr openaiwire.ChatResponse
		if err := openaiwire.DecodeChatResponse([]byte(benchResponse), &cr); err != nil {
			b.Fatal(err)
		}
		if _, err := openaiwire.DecodeResponse("p", &cr); err != nil {
			b.Fatal(err)
		}
	}
}

func benchStream() string {
	var sb strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&sb, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"word%d \"},\"finish_reason\":null}]}\n\n", i)
	}
	sb.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":\"}}]}}]}\n\n")
	sb.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]}}]}\n\n")
	sb.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n")
	sb.WriteString("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":42,\"total_tokens\":52}}\n\ndata: [DONE]\n\n")
	return sb.String()
}

// BenchmarkParseStream parses a 44-event stream (40 content deltas, a tool
// call in two fragments, finish, usage).
func BenchmarkParseStream(b *testing.B) {
	body := benchStream()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		err := openaiwire.ParseStream("p", strings.NewReader(body), func() {}, nil, func(llm.Event) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
	}
}
