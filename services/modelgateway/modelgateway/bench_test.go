package modelgateway_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// BenchmarkChatRoundTrip is one unary Chat through the gateway (gRPC over
// loopback, HTTP to an instant mock upstream), sequentially: the gateway's
// own cost per call plus the two hops, with every party in this process.
func BenchmarkChatRoundTrip(b *testing.B) {
	body := []byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"The quarterly revenue grew by four percent."},"finish_reason":"stop"}],"usage":{"prompt_tokens":42,"completion_tokens":9,"total_tokens":51}}`)
	mock := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	defer mock.Close()
	gw := startGatewayB(b, oneProvider("openai", mock.URL, ""))
	req := &modelv1.ChatRequest{Model: "chat", Messages: []*modelv1.Message{
		{Role: modelv1.Role_ROLE_SYSTEM, Content: "You are a concise financial analyst."},
		{Role: modelv1.Role_ROLE_USER, Content: "Summarise the quarter in one sentence."},
	}}
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := gw.Chat(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGRPCFloor is ListModels through the same server: the cost of the
// gRPC hop and interceptors alone, to read BenchmarkChatRoundTrip against.
func BenchmarkGRPCFloor(b *testing.B) {
	gw := startGatewayB(b, oneProvider("openai", "http://127.0.0.1:9", ""))
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := gw.ListModels(ctx, &modelv1.ListModelsRequest{}); err != nil {
			b.Fatal(err)
		}
	}
}
