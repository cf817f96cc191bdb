package modelgateway_test

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// cutText is long enough for several stream chunks (8 runes each).
const cutText = "The quarterly report shows revenue up four percent and costs flat."

// firstThenSecond routes "chat" to the provider under test ("first"), then
// to an OpenAI-compatible fallback ("second").
func firstThenSecond(typ, firstURL, secondURL string) string {
	return fmt.Sprintf(`
providers:
  first: {type: %s, base_url: %q}
  second: {type: openai, base_url: %q}
models:
  chat:
    - {provider: first, model: m1}
    - {provider: second, model: m2}
`, typ, firstURL, secondURL)
}

// errorInfo returns the ErrorInfo detail of a gRPC error.
func errorInfo(t *testing.T, err error) *errdetails.ErrorInfo {
	t.Helper()
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	t.Fatalf("error %v carries no ErrorInfo", err)
	return nil
}

// wantCut checks that err reports a cut answer from provider "first" as
// what it is, not as a missing provider.
func wantCut(t *testing.T, err error, partial bool) {
	t.Helper()
	st := wantCode(t, err, codes.Unavailable)
	info := errorInfo(t, err)
	if info.GetReason() != "UPSTREAM_STREAM_CUT" || info.GetMetadata()["provider"] != "first" {
		t.Errorf("ErrorInfo %v, want reason UPSTREAM_STREAM_CUT from provider first", info)
	}
	if n, err := strconv.Atoi(info.GetMetadata()["bytes_received"]); err != nil || n <= 0 {
		t.Errorf("bytes_received %q", info.GetMetadata()["bytes_received"])
	}
	if got := info.GetMetadata()["partial_output_sent"]; got != strconv.FormatBool(partial) {
		t.Errorf("partial_output_sent %q, want %v", got, partial)
	}
	for _, wrong := range []string{"no working provider", "API_KEY"} {
		if strings.Contains(st.Message(), wrong) {
			t.Errorf("message %q says %q", st.Message(), wrong)
		}
	}
}

func streamChat(t *testing.T, gw *gateway) (content string, end *modelv1.StreamEnd, err error) {
	t.Helper()
	s, err := gw.client.ChatStream(ctxTimeout(t, 10*time.Second), &modelv1.ChatStreamRequest{Request: chatReq("chat", userMsg("summarise the report"))})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := streamAll(t, s)
	for _, m := range msgs {
		content += m.GetContentDelta()
		if m.GetEnd() != nil {
			end = m.GetEnd()
		}
	}
	return content, end, err
}

// TestCutStreamsAreReportedAsUpstreamFailures: for every provider type, an
// answer that breaks off is UNAVAILABLE / UPSTREAM_STREAM_CUT naming the
// provider and the bytes received, never NO_PROVIDER. Once part of the
// answer reached the client nothing is retried or sent to the fallback; a
// cut before any output is retried like any broken connection; and one cut
// does not mark the provider down: the next call goes to it again.
func TestCutStreamsAreReportedAsUpstreamFailures(t *testing.T) {
	t.Parallel()
	for _, pc := range providerCases() {
		native := pc.typ == "ollama"
		// The first stream event of the OpenAI-style dialect is the role
		// chunk, with empty content; Ollama's first line carries content.
		contentEvents := 3
		if native {
			contentEvents = 2
		}
		cases := []struct {
			name string
			// script scripts the provider under test.
			script func(*providersim.Server)
			stream bool
			// partial: part of the answer reaches the client before the cut.
			partial bool
		}{
			{"eof after content", func(s *providersim.Server) {
				s.When(providersim.Match{}).Text(cutText).Cut(contentEvents, providersim.CutEOF).Times(1)
			}, true, true},
			{"reset mid-stream", func(s *providersim.Server) {
				s.When(providersim.Match{}).Text(cutText).Cut(contentEvents, providersim.CutReset).Times(1)
			}, true, true},
			{"eof after the first chunk", func(s *providersim.Server) {
				s.When(providersim.Match{}).Text(cutText).Cut(1, providersim.CutEOF).Times(1)
			}, true, native},
			{"unary body cut mid-JSON", func(s *providersim.Server) {
				s.When(providersim.Match{}).Text(cutText).Cut(60, providersim.CutEOF)
			}, false, false},
		}
		for _, tc := range cases {
			t.Run(pc.typ+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				opts := pc.opts
				opts.Models = []string{"m1"} // Ollama's probe wants it pulled
				first := providersim.Start(t, opts)
				tc.script(first)
				second := providersim.Start(t, providersim.Options{})
				second.When(providersim.Match{}).Text("from the fallback")
				env := map[string]string{"MODELGATEWAY_MAX_ATTEMPTS": "2", "MODELGATEWAY_PROBE_INTERVAL": "1h"}
				maps.Copy(env, pc.env)
				gw := startGateway(t, env, firstThenSecond(pc.typ, first.URL, second.URL))
				waitProbed(t, gw) // no probe may mark "first" up again behind the test's back

				if !tc.stream {
					// Each attempt on "first" is cut; the call is retried, then
					// falls back, since the client has nothing yet.
					resp, err := gw.client.Chat(ctxTimeout(t, 10*time.Second), chatReq("chat", userMsg("summarise the report")))
					if err != nil || resp.GetProvider() != "second" || first.Count() != 2 {
						t.Fatalf("answer %v, %v after %d requests to first", resp, err, first.Count())
					}
					// Not marked down: the next call tries "first" first again.
					if _, err := gw.client.Chat(ctxTimeout(t, 10*time.Second), chatReq("chat", userMsg("again"))); err != nil || first.Count() != 4 {
						t.Fatalf("second call: %v; first got %d requests in all, want 4", err, first.Count())
					}
					return
				}

				content, end, err := streamChat(t, gw)
				if tc.partial {
					wantCut(t, err, true)
					if content == "" || !strings.HasPrefix(cutText, content) || content == cutText {
						t.Errorf("client received %q, want a proper prefix of the answer", content)
					}
					if first.Count() != 1 || second.Count() != 0 {
						t.Errorf("after output was sent: %d requests to first, %d to the fallback; want 1, 0", first.Count(), second.Count())
					}
				} else {
					// Nothing reached the client: retried on the same provider.
					if err != nil || !strings.HasPrefix(content, "[simulated]") || end.GetProvider() != "first" || first.Count() != 2 || second.Count() != 0 {
						t.Fatalf("retry: %q %v from %s; requests first %d, second %d", content, err, end.GetProvider(), first.Count(), second.Count())
					}
				}
				// One cut does not mark the provider down.
				content, end, err = streamChat(t, gw)
				if err != nil || end.GetProvider() != "first" || !strings.HasPrefix(content, "[simulated]") {
					t.Errorf("next call: %q from %q, %v; want an answer from first", content, end.GetProvider(), err)
				}
			})
		}
	}
}

// TestCutAnswerWithoutFallbackSaysWhatArrived: with one provider and no
// retries a cut unary answer is the error, with the bytes that arrived.
func TestCutAnswerWithoutFallbackSaysWhatArrived(t *testing.T) {
	t.Parallel()
	for _, pc := range providerCases() {
		t.Run(pc.typ, func(t *testing.T) {
			t.Parallel()
			sim := providersim.Start(t, pc.opts)
			sim.When(providersim.Match{}).Text(cutText).Cut(60, providersim.CutReset)
			env := map[string]string{"MODELGATEWAY_MAX_ATTEMPTS": "1"}
			maps.Copy(env, pc.env)
			gw := startGateway(t, env, fmt.Sprintf(`
providers:
  first: {type: %s, base_url: %q}
models:
  chat:
    - {provider: first, model: m1}
`, pc.typ, sim.URL))
			_, err := gw.client.Chat(ctxTimeout(t, 10*time.Second), chatReq("chat", userMsg("hi")))
			wantCut(t, err, false)
			if got := errorInfo(t, err).GetMetadata()["bytes_received"]; got != "60" {
				t.Errorf("bytes_received %s, want 60", got)
			}
		})
	}
}

// TestNoProviderOnlyWhenNothingIsConfiguredOrReachable: NO_PROVIDER stays
// the reason for a chain whose providers are not configured or cannot be
// reached at all.
func TestNoProviderOnlyWhenNothingIsConfiguredOrReachable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, routing, says string
	}{
		{"not configured", `
providers:
  ds: {type: deepseek}
models:
  chat:
    - {provider: ds, model: deepseek-chat}
`, "DEEPSEEK_API_KEY"},
		{"unreachable", oneProvider("openai", closedPort(t), ""), "connect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			gw := startGateway(t, map[string]string{"MODELGATEWAY_MAX_ATTEMPTS": "1"}, tc.routing)
			_, err := gw.client.Chat(ctxTimeout(t, 10*time.Second), chatReq("chat", userMsg("hi")))
			st := wantCode(t, err, codes.Unavailable)
			if grpcx.Reason(err) != "NO_PROVIDER" || !strings.Contains(st.Message(), tc.says) {
				t.Errorf("reason %q, message %q; want NO_PROVIDER saying %q", grpcx.Reason(err), st.Message(), tc.says)
			}
		})
	}
}
