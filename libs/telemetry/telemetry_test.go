package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/agentmesh/agentmesh/libs/telemetry"
)

func TestLoggerAddsTraceIDs(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), "svc", "test", telemetry.Config{SampleRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	var buf bytes.Buffer
	log := telemetry.NewLogger(&buf, "json", "info", "svc")
	ctx, span := otel.Tracer("t").Start(context.Background(), "op")
	log.InfoContext(ctx, "hello")
	span.End()
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not JSON: %q", buf.String())
	}
	if rec["trace_id"] != span.SpanContext().TraceID().String() || rec["service"] != "svc" {
		t.Fatalf("record = %v", rec)
	}
	if span.IsRecording() {
		t.Fatal("span recorded with no exporter configured")
	}
}

func TestSpansRecordedWhenExported(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), "svc", "test", telemetry.Config{OTLPEndpoint: "127.0.0.1:1", OTLPInsecure: true, SampleRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = tel.Shutdown(ctx) // the collector does not exist
	}()
	_, span := otel.Tracer("t").Start(context.Background(), "op")
	defer span.End()
	if !span.IsRecording() {
		t.Fatal("span not recorded with an exporter configured and ratio 1")
	}
}

func TestMetricsHandlerServesPrometheus(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), "svc", "test", telemetry.Config{SampleRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	c, _ := otel.Meter("t").Int64Counter("agentmesh_test_total")
	c.Add(context.Background(), 3)
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if !strings.Contains(string(body), "agentmesh_test_total") || !strings.Contains(string(body), "go_goroutines") {
		t.Fatalf("metrics missing:\n%s", body)
	}
}
