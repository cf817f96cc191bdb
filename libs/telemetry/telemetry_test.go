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
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/agentmesh/agentmesh/libs/config"
	"github.com/agentmesh/agentmesh/libs/telemetry"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// load reads a telemetry.Config from env the way every service does.
func load(t *testing.T, env map[string]string) telemetry.Config {
	t.Helper()
	var cfg telemetry.Config
	if err := config.Load("", &cfg, config.Map(env)); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func shutdown(t *testing.T, tel *telemetry.Telemetry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func TestLoggerAddsTraceIDs(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), "svc", "test", load(t, nil))
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

// TestLoggerAddsRequestIDs: a record logged while serving an RPC the
// gateway sent carries the request id the HTTP client was answered with;
// one logged elsewhere carries none.
func TestLoggerAddsRequestIDs(t *testing.T) {
	var buf bytes.Buffer
	log := telemetry.NewLogger(&buf, "json", "info", "svc")
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(telemetry.RequestIDMetadata, "req-42"))
	log.InfoContext(ctx, "served")
	log.InfoContext(context.Background(), "elsewhere")
	var recs []map[string]any
	for line := range strings.Lines(buf.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		recs = append(recs, rec)
	}
	if len(recs) != 2 || recs[0]["request_id"] != "req-42" || recs[1]["request_id"] != nil {
		t.Fatalf("records = %v, want request_id req-42 on the first only", recs)
	}
}

// TestOTLPExport: with either OTLP protocol, spans reach a collector, under
// the name OTEL_SERVICE_NAME gives, or else the service's own.
func TestOTLPExport(t *testing.T) {
	for _, tc := range []struct {
		name, protocol, serviceName, want string
	}{
		{"grpc", telemetry.ProtocolGRPC, "", "orders"},
		{"http/protobuf", telemetry.ProtocolHTTP, "", "orders"},
		{"OTEL_SERVICE_NAME wins", telemetry.ProtocolHTTP, "orders-eu", "orders-eu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
			rcv, endpoint := testkit.StartOTLP(t, tc.protocol)
			cfg := load(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": tc.protocol, "OTEL_SERVICE_NAME": tc.serviceName})
			tel, err := telemetry.Setup(context.Background(), "orders", "test", cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, span := otel.Tracer("t").Start(context.Background(), "op")
			span.End()
			shutdown(t, tel) // flushes
			if got := strings.Join(rcv.Names(), " "); got != "op@"+tc.want {
				t.Fatalf("received %q, want op@%s", got, tc.want)
			}
			if env := rcv.Spans()[0].Resource["deployment.environment"]; env != "test" {
				t.Errorf("deployment.environment = %q, want OTEL_RESOURCE_ATTRIBUTES's test", env)
			}
		})
	}
}

// TestMeshNamesEachService: under SetupMesh each service's spans carry its
// own service.name, children inherit it through their context, and a span
// started outside every service (the embedded database's, here FerretDB's
// way: otel.Tracer("") on a fresh context) is not exported at all.
func TestMeshNamesEachService(t *testing.T) {
	rcv, endpoint := testkit.StartOTLP(t, telemetry.ProtocolGRPC)
	cfg := load(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "staging"})
	tel, err := telemetry.SetupMesh(context.Background(), "test", cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := otel.Tracer("t")
	ctx, gw := tr.Start(telemetry.WithService(context.Background(), "gateway"), "GET /v1/jobs/{jobId}")
	_, child := tr.Start(ctx, "child")
	child.End()
	gw.End()
	// A remote parent (the gateway's traceparent, extracted by the
	// orchestrator) still yields an orchestrator span.
	remote := trace.ContextWithRemoteSpanContext(telemetry.WithService(context.Background(), "orchestrator"), gw.SpanContext())
	_, orch := tr.Start(remote, "GetJob")
	orch.End()
	_, db := otel.Tracer("").Start(context.Background(), "")
	db.End()
	if db.IsRecording() || db.SpanContext().IsValid() {
		t.Errorf("a span outside every service is recorded: %v", db.SpanContext())
	}
	shutdown(t, tel)

	want := "GET /v1/jobs/{jobId}@gateway GetJob@orchestrator child@gateway"
	if got := strings.Join(rcv.Names(), " "); got != want {
		t.Fatalf("received %q, want %q", got, want)
	}
	for _, s := range rcv.Spans() {
		if ns := s.Resource["service.namespace"]; ns != "staging" {
			t.Errorf("%s: service.namespace = %q, want OTEL_SERVICE_NAME's staging", s.Name, ns)
		}
	}
}

// TestSamplers: OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG decide as
// the SDK's specification says, for a root span and for a sampled remote
// parent.
func TestSamplers(t *testing.T) {
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	for _, tc := range []struct {
		sampler, arg        string
		root, sampledParent bool
	}{
		{"", "", true, true}, // parentbased_always_on
		{"always_on", "", true, true},
		{"always_off", "", false, false},
		{"traceidratio", "0", false, false},
		{"traceidratio", "1", true, true},
		{"parentbased_always_off", "", false, true},
		{"parentbased_traceidratio", "0", false, true},
		{"parentbased_traceidratio", "1", true, true},
	} {
		t.Run(tc.sampler+"/"+tc.arg, func(t *testing.T) {
			cfg := load(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:1", "OTEL_TRACES_SAMPLER": tc.sampler, "OTEL_TRACES_SAMPLER_ARG": tc.arg})
			tel, err := telemetry.Setup(context.Background(), "svc", "test", cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				_ = tel.Shutdown(ctx) // the collector does not exist
			}()
			_, root := otel.Tracer("t").Start(context.Background(), "root")
			_, child := otel.Tracer("t").Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "child")
			if root.IsRecording() != tc.root || child.IsRecording() != tc.sampledParent {
				t.Fatalf("root recorded %v, child of a sampled parent %v; want %v, %v", root.IsRecording(), child.IsRecording(), tc.root, tc.sampledParent)
			}
		})
	}
}

// TestConfigRefusesUnknownValues: a misspelt sampler, protocol or level is
// an error naming the variable, all of them at once.
func TestConfigRefusesUnknownValues(t *testing.T) {
	var cfg struct {
		Log telemetry.LogConfig `env:""`
		Tel telemetry.Config    `env:""`
	}
	err := config.Load("", &cfg, config.Map(map[string]string{
		"LOG_LEVEL": "verbose", "LOG_FORMAT": "yaml", "OTEL_TRACES_SAMPLER": "jaeger_remote",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_TRACES_SAMPLER_ARG": "10",
	}))
	if err == nil {
		t.Fatal("loaded")
	}
	for _, name := range []string{`LOG_LEVEL="verbose"`, `LOG_FORMAT="yaml"`, `OTEL_TRACES_SAMPLER="jaeger_remote"`, `OTEL_EXPORTER_OTLP_PROTOCOL="http/json"`, `OTEL_TRACES_SAMPLER_ARG="10"`} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
}

func TestMetricsHandlerServesPrometheus(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), "svc", "test", load(t, nil))
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
