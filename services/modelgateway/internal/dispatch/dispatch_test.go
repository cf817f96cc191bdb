package dispatch_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/dispatch"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/provider/deepseek"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/routing"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/upstream"
)

type harness struct {
	gw     *dispatch.Gateway
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
}

func newHarness(t *testing.T, sim *providersim.Server) *harness {
	t.Helper()
	table, err := routing.Parse([]byte(`
providers:
  ds: {type: deepseek}
models:
  chat: [{provider: ds, model: deepseek-chat}]
`))
	if err != nil {
		t.Fatal(err)
	}
	up := &upstream.Client{Provider: "ds", BaseURL: sim.URL, Transport: upstream.NewTransport(time.Second, 4),
		Timeouts: upstream.Timeouts{FirstChunk: 5 * time.Second, Idle: 5 * time.Second}}
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	gw, err := dispatch.New(table, []dispatch.Backend{{Name: "ds", Provider: deepseek.New(up), MaxConcurrency: 4, MaxQueue: 4}}, dispatch.Options{
		Retry:          dispatch.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond},
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{gw: gw, reader: reader, spans: spans}
}

func (h *harness) metrics(t *testing.T) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func attrKey(k string) attribute.Key { return attribute.Key(k) }

func sumWhere(t *testing.T, agg metricdata.Aggregation, key, value string) int64 {
	t.Helper()
	s, ok := agg.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("aggregation %T", agg)
	}
	var n int64
	for _, dp := range s.DataPoints {
		if v, ok := dp.Attributes.Value(attrKey(key)); ok && v.AsString() == value {
			if lm, _ := dp.Attributes.Value("logical_model"); lm.AsString() != "chat" {
				t.Errorf("logical_model %q", lm.AsString())
			}
			n += dp.Value
		}
	}
	return n
}

func userRequest(text string) *llm.Request {
	return &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: text}}}
}

func TestMetricsAndSpanRecordUsageRetriesAndLatency(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Options{Flavor: providersim.DeepSeek})
	sim.When(providersim.Match{}).Error(http.StatusTooManyRequests, "slow down").Times(1)
	sim.When(providersim.Match{}).Text("ok").Usage(providersim.Usage{PromptTokens: 50, CompletionTokens: 20, ReasoningTokens: 5, CacheHitTokens: 30})
	h := newHarness(t, sim)

	res, err := h.gw.Chat(context.Background(), dispatch.Call{Logical: "chat", Request: userRequest("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 || res.Response.Usage.CacheMiss != 20 {
		t.Fatalf("attempts %d usage %+v", res.Attempts, res.Response.Usage)
	}
	m := h.metrics(t)
	calls := m["agentmesh.modelgateway.upstream.calls"]
	if sumWhere(t, calls, "outcome", "rate_limited") != 1 || sumWhere(t, calls, "outcome", "ok") != 1 {
		t.Errorf("calls %+v", calls)
	}
	tokens := m["agentmesh.modelgateway.tokens"]
	for kind, want := range map[string]int64{"prompt": 50, "completion": 20, "reasoning": 5, "cache_hit": 30, "cache_miss": 20} {
		if got := sumWhere(t, tokens, "kind", kind); got != want {
			t.Errorf("tokens %s = %d, want %d", kind, got, want)
		}
	}
	lat, ok := m["agentmesh.modelgateway.call.duration"].(metricdata.Histogram[float64])
	if !ok || len(lat.DataPoints) != 1 || lat.DataPoints[0].Count != 1 {
		t.Errorf("latency %+v", m["agentmesh.modelgateway.call.duration"])
	}

	ended := h.spans.Ended()
	if len(ended) != 1 || ended[0].Name() != "modelgateway.chat" {
		t.Fatalf("spans %v", ended)
	}
	var retries int
	for _, ev := range ended[0].Events() {
		if ev.Name == "retry" {
			retries++
		}
	}
	if retries != 1 {
		t.Errorf("span events %+v, want one retry", ended[0].Events())
	}

	// A stream records time to first token.
	if _, err := h.gw.Stream(context.Background(), dispatch.Call{Logical: "chat", Request: userRequest("hi")}, func(llm.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ttft, ok := h.metrics(t)["agentmesh.modelgateway.time_to_first_token"].(metricdata.Histogram[float64])
	if !ok || len(ttft.DataPoints) != 1 || ttft.DataPoints[0].Count != 1 {
		t.Errorf("time to first token %+v", ttft)
	}
}

func TestLimiterQueueBound(t *testing.T) {
	t.Parallel()
	l := dispatch.NewLimiter("p", 1, 1)
	release, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := l.Acquire(context.Background())
		if err == nil {
			r()
		}
		got <- err
	}()
	// Once the waiter is queued, a third is refused at once.
	testkit.Eventually(t, 2*time.Second, func() bool { return l.Queued() == 1 }, "waiter queued")
	_, err = l.Acquire(context.Background())
	if le, ok := err.(*llm.Error); !ok || le.Kind != llm.KindOverloaded {
		t.Fatalf("third acquire: %v", err)
	}
	release()
	if err := <-got; err != nil {
		t.Fatalf("queued waiter: %v", err)
	}
	if l.InFlight() != 0 {
		t.Errorf("in flight %d", l.InFlight())
	}
}
