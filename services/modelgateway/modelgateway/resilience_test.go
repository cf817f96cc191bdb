package modelgateway_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// oneProvider is a routing file with logical model "chat" served by one
// provider of type typ at url.
func oneProvider(typ, url string, extra string) string {
	return fmt.Sprintf(`
providers:
  up: {type: %s, base_url: %q %s}
models:
  chat:
    - {provider: up, model: m1}
`, typ, url, extra)
}

func TestRetriesRetryableErrorsHonouringRetryAfter(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Preset(providersim.DeepSeek))
	sim.When(providersim.Match{}).Error(http.StatusTooManyRequests, "Rate limit reached").RetryAfter(time.Second).Times(1)
	sim.When(providersim.Match{}).Error(http.StatusServiceUnavailable, "Server overloaded").Times(1)
	sim.When(providersim.Match{}).Error(http.StatusInternalServerError, "boom").Times(1)
	sim.When(providersim.Match{}).Text("finally")
	gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": "k", "MODELGATEWAY_MAX_ATTEMPTS": "4"}, oneProvider("deepseek", sim.URL, ""))

	start := time.Now()
	resp, err := gw.client.Chat(ctxTimeout(t, 20*time.Second), chatReq("chat", userMsg("hi")))
	if err != nil {
		t.Fatalf("Chat: %v", err)
	}
	if resp.GetMessage().GetContent() != "finally" || resp.GetAttempts() != 4 || sim.Count() != 4 {
		t.Fatalf("content %q attempts %d upstream %d", resp.GetMessage().GetContent(), resp.GetAttempts(), sim.Count())
	}
	// Backoff is 10-50ms here: only the honoured Retry-After explains a second.
	if el := time.Since(start); el < time.Second {
		t.Errorf("retried after %v, before Retry-After (1s)", el)
	}
}

func TestRetriesGiveUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Options{Flavor: providersim.DeepSeek})
	sim.When(providersim.Match{}).Error(http.StatusServiceUnavailable, "Server overloaded, please try again later")
	gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": "k", "MODELGATEWAY_MAX_ATTEMPTS": "3"}, oneProvider("deepseek", sim.URL, ""))
	_, err := gw.client.Chat(ctxTimeout(t, 10*time.Second), chatReq("chat", userMsg("hi")))
	st := wantCode(t, err, codes.Unavailable)
	if !strings.Contains(st.Message(), "Server overloaded") || sim.Count() != 3 {
		t.Errorf("message %q after %d attempts", st.Message(), sim.Count())
	}
}

func TestNonRetryableErrorsSurfaceAtOnce(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		msg    string
		code   codes.Code
	}{
		{http.StatusBadRequest, "Invalid request: messages[0].role is wrong", codes.InvalidArgument},
		{http.StatusUnauthorized, "Authentication Fails (no such user)", codes.FailedPrecondition},
		{http.StatusPaymentRequired, "Insufficient Balance", codes.ResourceExhausted},
		{http.StatusNotFound, "Model Not Exist", codes.NotFound},
		{http.StatusUnprocessableEntity, "Invalid Parameters: temperature", codes.InvalidArgument},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			sim := providersim.Start(t, providersim.Options{Flavor: providersim.DeepSeek})
			sim.When(providersim.Match{}).Error(tc.status, tc.msg)
			gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": "k"}, oneProvider("deepseek", sim.URL, ""))
			_, err := gw.client.Chat(ctxTimeout(t, 10*time.Second), chatReq("chat", userMsg("hi")))
			st := wantCode(t, err, tc.code)
			if !strings.Contains(st.Message(), tc.msg) {
				t.Errorf("message %q lacks the provider's %q", st.Message(), tc.msg)
			}
			if sim.Count() != 1 {
				t.Errorf("%d upstream requests, want 1 (no retry)", sim.Count())
			}
		})
	}
}

const twoProviders = `
providers:
  first: {type: deepseek, base_url: %q}
  second: {type: qwen, base_url: %q}
models:
  chat:
    - {provider: first, model: deepseek-chat}
    - {provider: second, model: qwen-plus}
`

func TestFallbackChainMovesOnAfterRetries(t *testing.T) {
	t.Parallel()
	a := providersim.Start(t, providersim.Options{Flavor: providersim.DeepSeek})
	a.When(providersim.Match{}).Error(http.StatusInternalServerError, "internal error")
	b := providersim.Start(t, providersim.Options{Flavor: providersim.Qwen})
	b.When(providersim.Match{}).Text("from qwen")
	gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": "k1", "QWEN_API_KEY": "k2"}, fmt.Sprintf(twoProviders, a.URL, b.URL))
	resp, err := gw.client.Chat(ctxTimeout(t, 10*time.Second), chatReq("chat", userMsg("hi")))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetProvider() != "second" || resp.GetProviderModel() != "qwen-plus" || resp.GetMessage().GetContent() != "from qwen" {
		t.Errorf("answered by %s/%s: %q", resp.GetProvider(), resp.GetProviderModel(), resp.GetMessage().GetContent())
	}
	if resp.GetAttempts() != 4 || a.Count() != 3 || b.Count() != 1 {
		t.Errorf("attempts %d, first %d, second %d", resp.GetAttempts(), a.Count(), b.Count())
	}
}

func TestBadRequestDoesNotFallBack(t *testing.T) {
	t.Parallel()
	a := providersim.Start(t, providersim.Options{Flavor: providersim.DeepSeek})
	a.When(providersim.Match{}).Error(http.StatusBadRequest, "This model's maximum context length is 65536 tokens")
	b := providersim.Start(t, providersim.Options{Flavor: providersim.Qwen})
	gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": "k1", "QWEN_API_KEY": "k2"}, fmt.Sprintf(twoProviders, a.URL, b.URL))
	_, err := gw.client.Chat(ctxTimeout(t, 10*time.Second), chatReq("chat", userMsg("hi")))
	st := wantCode(t, err, codes.InvalidArgument)
	if !strings.Contains(st.Message(), "maximum context length") || b.Count() != 0 {
		t.Errorf("message %q; second provider got %d requests", st.Message(), b.Count())
	}
}

func TestConcurrencyLimitRefusesBeyondTheQueue(t *testing.T) {
	t.Parallel()
	// One request at a time and no queue: while one is upstream, the next is
	// refused at once (queueing itself is covered by dispatch's limiter test).
	sim := providersim.Start(t, providersim.Options{})
	sim.When(providersim.Match{LastUserContains: "hold"}).Text("held").Hang()
	gw := startGateway(t, nil, oneProvider("openai", sim.URL, ", max_concurrency: 1, max_queue: 0"))

	holdCtx, release := context.WithCancel(context.Background())
	defer release()
	held := make(chan error, 1)
	go func() {
		_, err := gw.client.Chat(holdCtx, chatReq("chat", userMsg("hold the slot")))
		held <- err
	}()
	testkit.Eventually(t, 5*time.Second, func() bool { return sim.Count() == 1 }, "first request upstream")
	start := time.Now()
	_, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), chatReq("chat", userMsg("second")))
	st := wantCode(t, err, codes.ResourceExhausted)
	if !strings.Contains(st.Message(), "too many requests") || time.Since(start) > time.Second || sim.Count() != 1 {
		t.Errorf("after %v (%d upstream): %q", time.Since(start), sim.Count(), st.Message())
	}
	release()
	wantCode(t, <-held, codes.Canceled)
	// The cancelled call gives its slot back.
	testkit.Eventually(t, 5*time.Second, func() bool {
		_, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), chatReq("chat", userMsg("third")))
		return err == nil
	}, "slot released after the cancelled call")
}

func TestFirstChunkTimeout(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Options{Latency: 3 * time.Second})
	gw := startGateway(t, map[string]string{"MODELGATEWAY_FIRST_CHUNK_TIMEOUT": "200ms", "MODELGATEWAY_MAX_ATTEMPTS": "1"}, oneProvider("openai", sim.URL, ""))
	start := time.Now()
	_, err := gw.client.Chat(ctxTimeout(t, 10*time.Second), chatReq("chat", userMsg("hi")))
	st := wantCode(t, err, codes.DeadlineExceeded)
	if !strings.Contains(st.Message(), "first-chunk timeout") || time.Since(start) > 2*time.Second {
		t.Errorf("after %v: %q", time.Since(start), st.Message())
	}
}

func TestIdleTimeoutBetweenChunks(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Options{ChunkDelay: 2 * time.Second})
	gw := startGateway(t, map[string]string{"MODELGATEWAY_IDLE_TIMEOUT": "200ms", "MODELGATEWAY_FIRST_CHUNK_TIMEOUT": "5s"}, oneProvider("openai", sim.URL, ""))
	start := time.Now()
	st, err := gw.client.ChatStream(ctxTimeout(t, 10*time.Second), &modelv1.ChatStreamRequest{Request: chatReq("chat", userMsg("hi"))})
	if err != nil {
		t.Fatal(err)
	}
	_, err = streamAll(t, st)
	s := wantCode(t, err, codes.DeadlineExceeded)
	// Every attempt (retries included, ~1.1 s in all) must end on the 200 ms
	// idle timeout: one 2 s chunk gap waited out would take longer than this
	// bound, which leaves a loaded test machine some room.
	if !strings.Contains(s.Message(), "idle timeout") || time.Since(start) > 1900*time.Millisecond {
		t.Errorf("after %v: %q", time.Since(start), s.Message())
	}
	// The long first wait of a reasoning model is not an idle gap: a slow
	// first chunk within the first-chunk timeout passes.
	slow := providersim.Start(t, providersim.Options{Latency: 500 * time.Millisecond})
	gw2 := startGateway(t, map[string]string{"MODELGATEWAY_IDLE_TIMEOUT": "200ms", "MODELGATEWAY_FIRST_CHUNK_TIMEOUT": "5s"}, oneProvider("openai", slow.URL, ""))
	st2, err := gw2.client.ChatStream(ctxTimeout(t, 10*time.Second), &modelv1.ChatStreamRequest{Request: chatReq("chat", userMsg("hi"))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := streamAll(t, st2); err != nil {
		t.Errorf("slow first chunk: %v", err)
	}
}

func TestCancellingStreamCancelsUpstream(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"openai", "ollama"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			sim := providersim.Start(t, providersim.Options{})
			sim.When(providersim.Match{}).Text("first words and then nothing").Hang()
			gw := startGateway(t, nil, oneProvider(typ, sim.URL, ""))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := gw.client.ChatStream(ctx, &modelv1.ChatStreamRequest{Request: chatReq("chat", userMsg("hi"))})
			if err != nil {
				t.Fatal(err)
			}
			first, err := st.Recv()
			if err != nil || first.GetContentDelta() == "" {
				t.Fatalf("first chunk %v, %v", first, err)
			}
			if sim.Disconnects() != 0 {
				t.Fatal("upstream gone before cancel")
			}
			cancel()
			testkit.Eventually(t, 2*time.Second, func() bool { return sim.Disconnects() == 1 }, "upstream request cancelled")
		})
	}
}

func TestAPIKeysUsedInTurnFromEnvAndFile(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Options{Flavor: providersim.DeepSeek, APIKeys: []string{"sk-one", "sk-two", "sk-three"}})
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("sk-three\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": "sk-one, sk-two", "DEEPSEEK_API_KEY_FILE": keyFile,
		"MODELGATEWAY_PROBE_INTERVAL": "1h"}, oneProvider("deepseek", sim.URL, ""))
	// The start-up probe draws a key too: let it finish first.
	waitProbed(t, gw)
	for i := 0; i < 6; i++ {
		if _, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), chatReq("chat", userMsg("hi"))); err != nil {
			t.Fatal(err)
		}
	}
	count := map[string]int{}
	for _, r := range sim.ChatRequests() {
		count[r.Header.Get("Authorization")]++
	}
	for _, k := range []string{"sk-one", "sk-two", "sk-three"} {
		if count["Bearer "+k] != 2 {
			t.Errorf("key %s used %d times of 6: %v", k, count["Bearer "+k], count)
		}
	}
}

func TestAPIKeysNeverInErrorsOrLogs(t *testing.T) {
	t.Parallel()
	const secret = "sk-secret-0123456789abcdef"
	// The simulator echoes a rejected key in its message, as some providers do.
	sim := providersim.Start(t, providersim.Options{Flavor: providersim.DeepSeek, APIKeys: []string{"sk-the-right-one"}})
	gw := startGateway(t, map[string]string{"DEEPSEEK_API_KEY": secret}, oneProvider("deepseek", sim.URL, ""))
	_, err := gw.client.Chat(ctxTimeout(t, 5*time.Second), chatReq("chat", userMsg("hi")))
	st := wantCode(t, err, codes.FailedPrecondition)
	if strings.Contains(st.Message(), secret) || !strings.Contains(st.Message(), "[REDACTED]") {
		t.Errorf("error message %q shows the key or was not scrubbed", st.Message())
	}
	if sim.Count() != 1 {
		t.Fatalf("upstream requests %d", sim.Count())
	}
	if got := sim.ChatRequests()[0].Header.Get("Authorization"); got != "Bearer "+secret {
		t.Fatalf("key not sent: %q", got)
	}
	testkit.Eventually(t, 2*time.Second, func() bool { return strings.Contains(gw.logs.String(), "REDACTED") }, "failed RPC logged")
	if strings.Contains(gw.logs.String(), secret) {
		t.Errorf("logs show the key:\n%s", gw.logs.String())
	}
}

func TestNoProviderStillStartsAndSaysHowToConfigure(t *testing.T) {
	t.Parallel()
	// Built-in routing, no keys, Ollama not running.
	gw := startGateway(t, nil, "")
	ctx := ctxTimeout(t, 10*time.Second)
	var chat *modelv1.LogicalModel
	testkit.Eventually(t, 5*time.Second, func() bool {
		lm, err := gw.client.ListModels(ctx, &modelv1.ListModelsRequest{})
		if err != nil {
			return false
		}
		for _, m := range lm.GetModels() {
			if m.GetName() == "chat" {
				chat = m
				last := m.GetTargets()[len(m.GetTargets())-1]
				return last.GetDetail() != "not checked yet"
			}
		}
		return false
	}, "ollama probed")
	if chat.GetAvailable() {
		t.Fatalf("chat available without any provider: %v", chat)
	}
	details := map[string]string{}
	for _, tg := range chat.GetTargets() {
		details[tg.GetProvider()] = tg.GetDetail()
	}
	if !strings.Contains(details["deepseek"], "DEEPSEEK_API_KEY") || !strings.Contains(details["qwen"], "QWEN_API_KEY") {
		t.Errorf("cloud details %v", details)
	}
	if !strings.Contains(details["ollama"], "connect") {
		t.Errorf("ollama detail %q", details["ollama"])
	}
	_, err := gw.client.Chat(ctx, chatReq("chat", userMsg("hi")))
	st := wantCode(t, err, codes.Unavailable)
	for _, want := range []string{"OLLAMA_HOST", "DEEPSEEK_API_KEY", "MODELGATEWAY_PROVIDER=sim"} {
		if !strings.Contains(st.Message(), want) {
			t.Errorf("message %q does not mention %s", st.Message(), want)
		}
	}
}

func TestOllamaModelNotPulledIsReported(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Options{Flavor: providersim.Ollama, Models: []string{"llama3.2:latest"}})
	gw := startGateway(t, nil, `
providers:
  ollama: {type: ollama, base_url: "`+sim.URL+`"}
models:
  chat:
    - {provider: ollama, model: "qwen3:8b"}
  small:
    - {provider: ollama, model: llama3.2}
`)
	lm := waitProbed(t, gw)
	chat, small := lm.GetModels()[0], lm.GetModels()[1]
	if chat.GetAvailable() || !strings.Contains(chat.GetTargets()[0].GetDetail(), "ollama pull qwen3:8b") {
		t.Errorf("chat: %v", chat)
	}
	if !small.GetAvailable() {
		t.Errorf("llama3.2 (pulled as llama3.2:latest) unavailable: %v", small)
	}
}

// waitProbed waits until every target has been probed and returns the
// models then.
func waitProbed(t *testing.T, gw *gateway) *modelv1.ListModelsResponse {
	t.Helper()
	var lm *modelv1.ListModelsResponse
	testkit.Eventually(t, 5*time.Second, func() bool {
		var err error
		lm, err = gw.client.ListModels(ctxTimeout(t, time.Second), &modelv1.ListModelsRequest{})
		if err != nil {
			return false
		}
		for _, m := range lm.GetModels() {
			for _, tg := range m.GetTargets() {
				if tg.GetDetail() == "not checked yet" {
					return false
				}
			}
		}
		return true
	}, "every target probed")
	return lm
}
