package dispatch

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agentmesh/agentmesh/libs/telemetry"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
)

// instrumentation is the gateway's OpenTelemetry metrics.
type instrumentation struct {
	calls   metric.Int64Counter
	tokens  metric.Int64Counter
	latency metric.Float64Histogram
	ttft    metric.Float64Histogram
}

func newInstrumentation(mp metric.MeterProvider) (*instrumentation, error) {
	m := mp.Meter("github.com/agentmesh/agentmesh/services/modelgateway")
	var in instrumentation
	var err error
	if in.calls, err = m.Int64Counter("agentmesh.modelgateway.upstream.calls",
		metric.WithDescription("Upstream model calls (one per attempt), by provider, model, logical name and outcome.")); err != nil {
		return nil, err
	}
	if in.tokens, err = m.Int64Counter("agentmesh.modelgateway.tokens",
		metric.WithDescription("Tokens used, by provider, model, logical name, kind (prompt, completion, reasoning, cache_hit, cache_miss) and tenant (the first MODELGATEWAY_USAGE_TENANTS tenants by name, then other; none without a tenant)."),
		metric.WithUnit("{token}")); err != nil {
		return nil, err
	}
	buckets := metric.WithExplicitBucketBoundaries(telemetry.SecondsBuckets...)
	if in.latency, err = m.Float64Histogram("agentmesh.modelgateway.call.duration",
		metric.WithDescription("Wall time of gateway calls (retries and fallbacks included), by provider, model, logical name, operation and outcome."),
		metric.WithUnit("s"), buckets); err != nil {
		return nil, err
	}
	if in.ttft, err = m.Float64Histogram("agentmesh.modelgateway.time_to_first_token",
		metric.WithDescription("Time from the call to the first streamed chunk, by provider, model and logical name."),
		metric.WithUnit("s"), buckets); err != nil {
		return nil, err
	}
	return &in, nil
}

// attrCache holds measurement options by label values: building an
// attribute set per measurement costs allocations on the hot path.
var attrCache sync.Map // attrKey → metric.MeasurementOption

type attrKey struct{ provider, model, logical, k1, v1, k2, v2 string }

func cachedAttrs(provider, model, logical, k1, v1, k2, v2 string) metric.MeasurementOption {
	key := attrKey{provider, model, logical, k1, v1, k2, v2}
	if o, ok := attrCache.Load(key); ok {
		return o.(metric.MeasurementOption)
	}
	var extra []attribute.KeyValue
	if k1 != "" {
		extra = append(extra, attribute.String(k1, v1))
	}
	if k2 != "" {
		extra = append(extra, attribute.String(k2, v2))
	}
	o := attrs(provider, model, logical, extra...)
	attrCache.Store(key, o)
	return o
}

func attrs(provider, model, logical string, extra ...attribute.KeyValue) metric.MeasurementOption {
	kv := append([]attribute.KeyValue{
		attribute.String("provider", provider),
		attribute.String("model", model),
		attribute.String("logical_model", logical),
	}, extra...)
	return metric.WithAttributes(kv...)
}

func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return llm.AsError(err).Kind.String()
}

func (in *instrumentation) attempt(ctx context.Context, provider, model, logical string, err error) {
	in.calls.Add(ctx, 1, cachedAttrs(provider, model, logical, "outcome", outcome(err), "", ""))
}

// usage counts tokens by kind; tenant is a bounded label (usage.Recorder).
func (in *instrumentation) usage(ctx context.Context, provider, model, logical, tenant string, u llm.Usage) {
	add := func(kind string, n int64) {
		if n > 0 {
			in.tokens.Add(ctx, n, cachedAttrs(provider, model, logical, "kind", kind, "tenant", tenant))
		}
	}
	add("prompt", u.Prompt)
	add("completion", u.Completion)
	add("reasoning", u.Reasoning)
	add("cache_hit", u.CacheHit)
	add("cache_miss", u.CacheMiss)
}

func (in *instrumentation) call(ctx context.Context, op, provider, model, logical string, d time.Duration, err error) {
	in.latency.Record(ctx, d.Seconds(), cachedAttrs(provider, model, logical, "operation", op, "outcome", outcome(err)))
}

func (in *instrumentation) firstToken(ctx context.Context, provider, model, logical string, d time.Duration) {
	in.ttft.Record(ctx, d.Seconds(), cachedAttrs(provider, model, logical, "", "", "", ""))
}
