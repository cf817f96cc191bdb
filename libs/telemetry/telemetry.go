// Package telemetry sets up tracing, metrics and logging for a process.
//
// Setup installs global OpenTelemetry tracer and meter providers. Traces and
// metrics are exported over OTLP/gRPC when an OTLP endpoint is configured;
// metrics are always exposed in Prometheus format by MetricsHandler. The
// providers are process-wide on purpose: `agentmesh up` runs every service in
// one process and one /metrics endpoint serves them all, labelled by service.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// Config configures telemetry. Services embed it in their own config struct.
type Config struct {
	// OTLPEndpoint is the OTLP/gRPC collector address (host:port or URL);
	// empty disables OTLP export.
	OTLPEndpoint string `env:"OTEL_EXPORTER_OTLP_ENDPOINT" help:"OTLP/gRPC collector endpoint; empty = no OTLP export"`
	// OTLPInsecure turns off TLS to the collector.
	OTLPInsecure bool `env:"OTEL_EXPORTER_OTLP_INSECURE" default:"true" help:"plaintext connection to the OTLP collector"`
	// SampleRatio is the fraction of root traces sampled.
	SampleRatio float64 `env:"OTEL_TRACES_SAMPLER_RATIO" default:"1" help:"fraction of root traces sampled (0..1) when an OTLP endpoint is set; without one no span is recorded (logs still carry trace ids)"`
}

// Telemetry holds the installed providers.
type Telemetry struct {
	tracer   *sdktrace.TracerProvider
	meter    *sdkmetric.MeterProvider
	registry *prometheus.Registry
}

// Setup builds and installs the global tracer and meter providers and the
// W3C trace-context propagator. serviceName names the process in resources.
// Call Shutdown on the result before exit to flush exporters.
func Setup(ctx context.Context, serviceName, version string, cfg Config) (*Telemetry, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(serviceName),
		semconv.ServiceVersion(version),
	))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	promExp, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	meterOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(promExp)}
	traceOpts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler(cfg)),
	}

	if cfg.OTLPEndpoint != "" {
		tOpts := []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(endpointURL(cfg))}
		mOpts := []otlpmetricgrpc.Option{otlpmetricgrpc.WithEndpointURL(endpointURL(cfg))}
		texp, err := otlptracegrpc.New(ctx, tOpts...)
		if err != nil {
			return nil, fmt.Errorf("telemetry: otlp trace exporter: %w", err)
		}
		mexp, err := otlpmetricgrpc.New(ctx, mOpts...)
		if err != nil {
			return nil, fmt.Errorf("telemetry: otlp metric exporter: %w", err)
		}
		traceOpts = append(traceOpts, sdktrace.WithBatcher(texp))
		meterOpts = append(meterOpts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp, sdkmetric.WithInterval(15*time.Second))))
	}

	t := &Telemetry{
		tracer:   sdktrace.NewTracerProvider(traceOpts...),
		meter:    sdkmetric.NewMeterProvider(meterOpts...),
		registry: registry,
	}
	otel.SetTracerProvider(t.tracer)
	otel.SetMeterProvider(t.meter)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return t, nil
}

// sampler samples cfg.SampleRatio of root traces when spans are exported.
// Without an exporter no span is recorded (recording one nobody reads costs
// CPU on every call), but spans still get trace and span ids: logs carry
// them and they propagate to other services, so logs join across the mesh.
func sampler(cfg Config) sdktrace.Sampler {
	if cfg.OTLPEndpoint == "" {
		return sdktrace.NeverSample()
	}
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))
}

func endpointURL(cfg Config) string {
	ep := cfg.OTLPEndpoint
	if len(ep) > 7 && (ep[:7] == "http://" || (len(ep) > 8 && ep[:8] == "https://")) {
		return ep
	}
	if cfg.OTLPInsecure {
		return "http://" + ep
	}
	return "https://" + ep
}

// MetricsHandler serves every metric of the process in Prometheus text format.
func (t *Telemetry) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{Registry: t.registry})
}

// Shutdown flushes and stops the exporters.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	return errors.Join(t.tracer.Shutdown(ctx), t.meter.Shutdown(ctx))
}
