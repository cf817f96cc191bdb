package modelgateway_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// MODELGATEWAY_PROVIDER=sim serves every logical model from the built-in
// simulator: chat, streaming, JSON schema, embeddings, all simulated.
func TestSimProviderServesEveryLogicalModel(t *testing.T) {
	t.Parallel()
	gw := startGateway(t, map[string]string{"MODELGATEWAY_PROVIDER": "sim"}, "")
	ctx := ctxTimeout(t, 20*time.Second)

	resp, err := gw.client.Chat(ctx, chatReq("chat", userMsg("hello there")))
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if !strings.HasPrefix(resp.GetMessage().GetContent(), "[simulated] ") {
		t.Errorf("content %q does not say it is simulated", resp.GetMessage().GetContent())
	}
	if resp.GetProvider() != "sim" || resp.GetProviderModel() != "sim-chat" || resp.GetModel() != "chat" {
		t.Errorf("provider/model = %s/%s/%s", resp.GetProvider(), resp.GetProviderModel(), resp.GetModel())
	}
	if resp.GetUsage().GetPromptTokens() == 0 || resp.GetUsage().GetTotalTokens() == 0 {
		t.Errorf("usage missing: %v", resp.GetUsage())
	}

	// JSON schema: the simulator answers with an instance of the schema.
	schema := `{"type":"object","required":["status","count"],"properties":{"status":{"enum":["RESOLVED","UNRESOLVED"]},"count":{"type":"integer","minimum":2}}}`
	jr, err := gw.client.Chat(ctx, &modelv1.ChatRequest{Model: "classifier", Messages: []*modelv1.Message{userMsg("classify")},
		ResponseFormat: &modelv1.ResponseFormat{Type: modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, JsonSchema: schema}})
	if err != nil {
		t.Fatalf("Chat JSON: %v", err)
	}
	if got := jr.GetMessage().GetContent(); !strings.Contains(got, `"RESOLVED"`) || !strings.Contains(got, `"count":2`) {
		t.Errorf("JSON answer %s", got)
	}

	st, err := gw.client.ChatStream(ctx, &modelv1.ChatStreamRequest{Request: chatReq("planner", userMsg("stream please"))})
	if err != nil {
		t.Fatal(err)
	}
	chunks, err := streamAll(t, st)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	var text strings.Builder
	for _, c := range chunks[:len(chunks)-1] {
		text.WriteString(c.GetContentDelta())
	}
	end := chunks[len(chunks)-1].GetEnd()
	if end == nil || end.GetFinishReason() != modelv1.FinishReason_FINISH_REASON_STOP || end.GetUsage().GetCompletionTokens() == 0 {
		t.Fatalf("last chunk %v", chunks[len(chunks)-1])
	}
	if !strings.HasPrefix(text.String(), "[simulated] ") || len(chunks) < 2 {
		t.Errorf("streamed %q in %d chunks", text.String(), len(chunks))
	}

	er, err := gw.client.Embed(ctx, &modelv1.EmbedRequest{Model: "embed", Inputs: []string{"a b", "a b", "c"}})
	if err != nil {
		t.Fatal(err)
	}
	e := er.GetEmbeddings()
	if len(e) != 3 || len(e[0].GetValues()) == 0 {
		t.Fatalf("embeddings %v", e)
	}
	for i := range e[0].GetValues() {
		if e[0].GetValues()[i] != e[1].GetValues()[i] {
			t.Fatal("same text, different vectors")
		}
	}

	testkit.Eventually(t, 5*time.Second, func() bool {
		lm, err := gw.client.ListModels(ctx, &modelv1.ListModelsRequest{})
		if err != nil {
			return false
		}
		for _, m := range lm.GetModels() {
			if !m.GetAvailable() {
				return false
			}
		}
		return len(lm.GetModels()) >= 8
	}, "every logical model available through sim")

	_, err = gw.client.Chat(ctx, chatReq("no-such-model", userMsg("x")))
	wantCode(t, err, codes.NotFound)
}

// MODELGATEWAY_SIM_LATENCY and MODELGATEWAY_SIM_CHUNK_DELAY pace the
// simulator like a model: a wait before each answer, and between chunks.
func TestSimProviderPace(t *testing.T) {
	t.Parallel()
	const latency, gap = 300 * time.Millisecond, 50 * time.Millisecond
	gw := startGateway(t, map[string]string{"MODELGATEWAY_PROVIDER": "sim",
		"MODELGATEWAY_SIM_LATENCY": latency.String(), "MODELGATEWAY_SIM_CHUNK_DELAY": gap.String()}, "")
	ctx := ctxTimeout(t, 20*time.Second)

	start := time.Now()
	if _, err := gw.client.Chat(ctx, chatReq("chat", userMsg("hello there"))); err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if took := time.Since(start); took < latency {
		t.Errorf("Chat answered after %v, before the %v latency", took, latency)
	}

	start = time.Now()
	st, err := gw.client.ChatStream(ctx, &modelv1.ChatStreamRequest{Request: chatReq("chat", userMsg("stream please"))})
	if err != nil {
		t.Fatal(err)
	}
	var at []time.Duration
	for {
		c, err := st.Recv()
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		at = append(at, time.Since(start))
		if c.GetEnd() != nil {
			break
		}
	}
	if at[0] < latency {
		t.Errorf("first chunk after %v, before the %v latency", at[0], latency)
	}
	if len(at) < 3 || at[len(at)-1]-at[0] < gap {
		t.Errorf("chunks at %v: not spaced by %v", at, gap)
	}
}
