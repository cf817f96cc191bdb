// Package telemetry sets up tracing, metrics and logging for a process.
//
// Setup installs global OpenTelemetry tracer and meter providers for a
// process that is one service; SetupMesh does it for `agentmesh up`, one
// process running every service, where each service's spans still carry
// its own service.name (see WithService). Traces and metrics are exported
// over OTLP (gRPC or HTTP, OTEL_EXPORTER_OTLP_PROTOCOL) when an endpoint is
// configured; metrics are always exposed in Prometheus format by
// MetricsHandler. The variables are the SDK's standard ones, read through
// Config like every other setting.
//
// Metric names follow one convention: agentmesh.<service>.<thing> for a
// service's own metrics (agentmesh.orchestrator.turn.duration), with
// agentmesh.gateway.* and agentmesh.events.* for the gateway and the shared
// event bus, and the OpenTelemetry semantic-convention names where one
// exists (http.server.request.duration, rpc.server.duration). The unit is
// given to the instrument, so Prometheus sees it as a suffix
// (agentmesh_orchestrator_turn_duration_seconds), and every histogram's
// boundaries are in that unit: SecondsBuckets for durations.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// SecondsBuckets are the histogram boundaries of every duration measured
// in seconds: 5 ms to 5 minutes, so a fast RPC, a model call and a long SSE
// stream each land in a bucket of their own size.
var SecondsBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Protocols of OTEL_EXPORTER_OTLP_PROTOCOL.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Config configures telemetry with the OpenTelemetry SDK's standard
// variables. Services embed it in their own config struct.
type Config struct {
	// ServiceName overrides service.name; under SetupMesh it names the
	// mesh (service.namespace) instead, since each service keeps its own.
	ServiceName string `env:"OTEL_SERVICE_NAME" help:"service.name of this process's traces and metrics (default: the service's own name); under agentmesh up every service keeps its own name and this sets service.namespace"`
	// Endpoint is the OTLP collector; empty disables OTLP export.
	Endpoint string `env:"OTEL_EXPORTER_OTLP_ENDPOINT" help:"OTLP collector endpoint: host:4317 for grpc, http://host:4318 for http/protobuf (/v1/traces and /v1/metrics are appended); empty = no OTLP export"`
	// Protocol is grpc or http/protobuf.
	Protocol string `env:"OTEL_EXPORTER_OTLP_PROTOCOL" default:"grpc" oneof:"grpc,http/protobuf" help:"OTLP transport: grpc or http/protobuf"`
	// Insecure turns off TLS to a collector named without a scheme.
	Insecure bool `env:"OTEL_EXPORTER_OTLP_INSECURE" default:"true" help:"plaintext connection to an OTLP collector named without http:// or https://"`
	// Sampler is one of the SDK's standard sampler names.
	Sampler string `env:"OTEL_TRACES_SAMPLER" default:"parentbased_always_on" oneof:"always_on,always_off,traceidratio,parentbased_always_on,parentbased_always_off,parentbased_traceidratio" help:"trace sampler when an OTLP endpoint is set (without one no span is recorded; logs still carry trace ids)"`
	// SamplerArg is the probability of the traceidratio samplers.
	SamplerArg float64 `env:"OTEL_TRACES_SAMPLER_ARG" default:"1" min:"0" max:"1" help:"sampling probability (0..1) of traceidratio and parentbased_traceidratio"`
}

// Telemetry holds the installed providers.
type Telemetry struct {
	tracer   trace.TracerProvider
	flush    func(context.Context) error // shuts the tracer provider(s) and exporter down
	meter    *sdkmetric.MeterProvider
	registry *prometheus.Registry
}

// Setup builds and installs the global tracer and meter providers and the
// W3C trace-context propagator for a process that is one service, named
// serviceName unless cfg.ServiceName says otherwise. Call Shutdown on the
// result before exit to flush exporters.
func Setup(ctx context.Context, serviceName, version string, cfg Config) (*Telemetry, error) {
	if cfg.ServiceName != "" {
		serviceName = cfg.ServiceName
	}
	tracing, err := newTracing(ctx, cfg, version, "")
	if err != nil {
		return nil, err
	}
	tp := tracing.provider(serviceName)
	return install(ctx, cfg, tracing, tp, serviceName)
}

// SetupMesh is Setup for a process that runs several services. Each span
// is recorded by the tracer provider of the service whose context starts it
// (see WithService), so its resource says which service it came from; a
// span started outside every service (the embedded database's internals,
// say) is not recorded at all. Metrics are process-wide, with
// service.name "agentmesh".
func SetupMesh(ctx context.Context, version string, cfg Config) (*Telemetry, error) {
	tracing, err := newTracing(ctx, cfg, version, cfg.ServiceName)
	if err != nil {
		return nil, err
	}
	r := &router{tracing: tracing, fallback: noop.NewTracerProvider()}
	return install(ctx, cfg, tracing, r, "agentmesh")
}

func install(ctx context.Context, cfg Config, tracing *tracing, tp trace.TracerProvider, metricsName string) (*Telemetry, error) {
	res, err := tracing.resource(metricsName)
	if err != nil {
		return nil, err
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	promExp, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	meterOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(promExp), sdkmetric.WithView(rpcViews()...)}
	if cfg.Endpoint != "" {
		mexp, err := newMetricExporter(ctx, cfg)
		if err != nil {
			return nil, err
		}
		meterOpts = append(meterOpts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp, sdkmetric.WithInterval(15*time.Second))))
	}
	t := &Telemetry{
		tracer:   tp,
		flush:    tracing.shutdown,
		meter:    sdkmetric.NewMeterProvider(meterOpts...),
		registry: registry,
	}
	otel.SetTracerProvider(t.tracer)
	otel.SetMeterProvider(t.meter)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return t, nil
}

// rpcViews give gRPC's call durations (otelgrpc: 5 ms to 10 s) the mesh's
// SecondsBuckets: a server stream lasts as long as a chat turn or a job
// watch, and above 10 s every one of them would share the +Inf bucket.
func rpcViews() []sdkmetric.View {
	var views []sdkmetric.View
	for _, name := range []string{"rpc.server.call.duration", "rpc.client.call.duration"} {
		views = append(views, sdkmetric.NewView(
			sdkmetric.Instrument{Name: name},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: SecondsBuckets}},
		))
	}
	return views
}

// TracerProvider is the installed global tracer provider.
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tracer }

// MetricsHandler serves every metric of the process in Prometheus text format.
func (t *Telemetry) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{Registry: t.registry})
}

// Shutdown flushes and stops the exporters.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	return errors.Join(t.flush(ctx), t.meter.Shutdown(ctx))
}

// tracing builds one SDK tracer provider per service name, all sharing one
// sampler and one span exporter. Safe for concurrent use.
type tracing struct {
	cfg       Config
	version   string
	namespace string
	exporter  sdktrace.SpanExporter // nil without an OTLP endpoint

	mu        sync.Mutex
	providers map[string]*sdktrace.TracerProvider // guarded by mu
}

func newTracing(ctx context.Context, cfg Config, version, namespace string) (*tracing, error) {
	t := &tracing{cfg: cfg, version: version, namespace: namespace, providers: map[string]*sdktrace.TracerProvider{}}
	if cfg.Endpoint != "" {
		exp, err := newSpanExporter(ctx, cfg)
		if err != nil {
			return nil, err
		}
		t.exporter = exp
	}
	return t, nil
}

func (t *tracing) resource(service string) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{semconv.ServiceName(service), semconv.ServiceVersion(t.version)}
	if t.namespace != "" {
		attrs = append(attrs, semconv.ServiceNamespace(t.namespace))
	}
	// Environment reads OTEL_RESOURCE_ATTRIBUTES (and OTEL_SERVICE_NAME,
	// which ours overrides as Config says): the SDK's own reading of its
	// standard variable, left to it since the format is its.
	res, err := resource.Merge(resource.Default(), resource.Environment())
	if err == nil {
		res, err = resource.Merge(res, resource.NewSchemaless(attrs...))
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	return res, nil
}

// provider returns the tracer provider of service, creating it on first use.
func (t *tracing) provider(service string) *sdktrace.TracerProvider {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.providers[service]; ok {
		return p
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSampler(sampler(t.cfg))}
	if res, err := t.resource(service); err == nil {
		opts = append(opts, sdktrace.WithResource(res))
	}
	if t.exporter != nil {
		opts = append(opts, sdktrace.WithBatcher(sharedExporter{t.exporter}))
	}
	p := sdktrace.NewTracerProvider(opts...)
	t.providers[service] = p
	return p
}

// shutdown flushes every provider, then closes the one exporter they share.
func (t *tracing) shutdown(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for _, p := range t.providers {
		errs = append(errs, p.Shutdown(ctx))
	}
	if t.exporter != nil {
		errs = append(errs, t.exporter.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// sharedExporter lets several batch processors feed one exporter: their
// shutdowns flush, and only tracing.shutdown closes the exporter.
type sharedExporter struct{ sdktrace.SpanExporter }

func (sharedExporter) Shutdown(context.Context) error { return nil }

// sampler is cfg's sampler when spans are exported. Without an exporter no
// span is recorded (recording one nobody reads costs CPU on every call),
// but spans still get trace and span ids: logs carry them and they
// propagate to other services, so logs join across the mesh.
func sampler(cfg Config) sdktrace.Sampler {
	if cfg.Endpoint == "" {
		return sdktrace.NeverSample()
	}
	switch cfg.Sampler {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(cfg.SamplerArg)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SamplerArg))
	default: // parentbased_always_on, the SDK's default
		return sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
}
