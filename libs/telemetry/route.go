package telemetry

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// serviceKey carries the name of the service a context works for.
type serviceKey struct{}

// WithService returns ctx marked as working for service: under SetupMesh,
// spans started with it, or with any context derived from it, belong to
// that service's tracer provider. `agentmesh up` marks the context it runs
// each service with; grpcx marks each incoming RPC with its server's.
func WithService(ctx context.Context, service string) context.Context {
	return context.WithValue(ctx, serviceKey{}, service)
}

// ServiceFrom returns the service ctx works for, or "" if none.
func ServiceFrom(ctx context.Context) string {
	s, _ := ctx.Value(serviceKey{}).(string)
	return s
}

// router is the global tracer provider of SetupMesh: it hands each span to
// the provider of the service its context works for, and spans of no
// service to fallback.
type router struct {
	embedded.TracerProvider
	tracing  *tracing
	fallback trace.TracerProvider
}

var _ trace.TracerProvider = (*router)(nil)

// Tracer returns a tracer that picks its provider at each Start.
func (r *router) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return &routedTracer{r: r, name: name, opts: opts}
}

// routedTracer is one instrumentation scope's tracer across every service.
type routedTracer struct {
	embedded.Tracer
	r       *router
	name    string
	opts    []trace.TracerOption
	tracers sync.Map // service name → trace.Tracer
}

// Start starts the span on the tracer of ctx's service.
func (t *routedTracer) Start(ctx context.Context, spanName string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	svc := ServiceFrom(ctx)
	if svc == "" {
		return t.r.fallback.Tracer(t.name, t.opts...).Start(ctx, spanName, opts...)
	}
	tr, ok := t.tracers.Load(svc)
	if !ok {
		tr, _ = t.tracers.LoadOrStore(svc, t.r.tracing.provider(svc).Tracer(t.name, t.opts...))
	}
	return tr.(trace.Tracer).Start(ctx, spanName, opts...)
}
