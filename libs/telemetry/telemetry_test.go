package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

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
