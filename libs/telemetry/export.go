package telemetry

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// newSpanExporter is the OTLP span exporter over cfg.Protocol.
func newSpanExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	var exp sdktrace.SpanExporter
	var err error
	if cfg.Protocol == ProtocolHTTP {
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(signalURL(cfg, "traces")))
	} else {
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(baseURL(cfg)))
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP trace exporter (%s): %w", cfg.Protocol, err)
	}
	return exp, nil
}

// newMetricExporter is the OTLP metric exporter over cfg.Protocol.
func newMetricExporter(ctx context.Context, cfg Config) (sdkmetric.Exporter, error) {
	var exp sdkmetric.Exporter
	var err error
	if cfg.Protocol == ProtocolHTTP {
		exp, err = otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(signalURL(cfg, "metrics")))
	} else {
		exp, err = otlpmetricgrpc.New(ctx, otlpmetricgrpc.WithEndpointURL(baseURL(cfg)))
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP metric exporter (%s): %w", cfg.Protocol, err)
	}
	return exp, nil
}

// baseURL is the endpoint with a scheme: as given, or http:// (insecure)
// or https:// added to a bare host:port.
func baseURL(cfg Config) string {
	ep := cfg.Endpoint
	if strings.HasPrefix(ep, "http://") || strings.HasPrefix(ep, "https://") {
		return ep
	}
	if cfg.Insecure {
		return "http://" + ep
	}
	return "https://" + ep
}

// signalURL is the OTLP/HTTP URL of one signal: the specification makes
// OTEL_EXPORTER_OTLP_ENDPOINT a base to which v1/<signal> is appended.
func signalURL(cfg Config, signal string) string {
	return strings.TrimSuffix(baseURL(cfg), "/") + "/v1/" + signal
}
