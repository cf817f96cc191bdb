package testkit

import (
	"context"
	"io"
	"net"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// OTLPReceiver is an OpenTelemetry collector inside the test process: it
// keeps every span exported to it, over OTLP/gRPC or OTLP/HTTP, as a real
// collector receives it, and accepts (and drops) metrics. Safe for
// concurrent use.
type OTLPReceiver struct {
	coltracepb.UnimplementedTraceServiceServer

	mu    sync.Mutex
	spans []ReceivedSpan // guarded by mu
}

// ReceivedSpan is one span as a collector received it.
type ReceivedSpan struct {
	// Name is the span's name.
	Name string
	// Resource holds the string attributes of the resource it came under
	// (service.name, service.namespace, ...).
	Resource map[string]string
	// Attributes holds the span's own string attributes.
	Attributes map[string]string
}

// Service returns the span's service.name.
func (s ReceivedSpan) Service() string { return s.Resource["service.name"] }

// StartOTLP serves OTLP on loopback until the test ends: OTLP/HTTP when
// protocol is "http/protobuf", OTLP/gRPC otherwise. It returns the value
// for OTEL_EXPORTER_OTLP_ENDPOINT: a base URL for HTTP, host:port for gRPC.
func StartOTLP(t testing.TB, protocol string) (*OTLPReceiver, string) {
	t.Helper()
	r := &OTLPReceiver{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if protocol == "http/protobuf" {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
			body, _ := io.ReadAll(req.Body)
			var msg coltracepb.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &msg); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.keep(&msg)
			writeProto(w, &coltracepb.ExportTraceServiceResponse{})
		})
		mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, _ *http.Request) {
			writeProto(w, &colmetricpb.ExportMetricsServiceResponse{})
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(func() { _ = srv.Close() })
		return r, "http://" + lis.Addr().String()
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	colmetricpb.RegisterMetricsServiceServer(srv, metricsSink{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return r, lis.Addr().String()
}

func writeProto(w http.ResponseWriter, m proto.Message) {
	out, _ := proto.Marshal(m)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// metricsSink accepts exported metrics, which no test reads from here.
type metricsSink struct {
	colmetricpb.UnimplementedMetricsServiceServer
}

// Export accepts metrics over gRPC.
func (metricsSink) Export(context.Context, *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

// Export receives spans over gRPC.
func (r *OTLPReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.keep(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *OTLPReceiver) keep(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := stringAttrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, ReceivedSpan{Name: s.GetName(), Resource: res, Attributes: stringAttrs(s.GetAttributes())})
			}
		}
	}
}

func stringAttrs(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		if v, ok := kv.GetValue().GetValue().(*commonpb.AnyValue_StringValue); ok {
			out[kv.GetKey()] = v.StringValue
		}
	}
	return out
}

// Spans returns every span received so far.
func (r *OTLPReceiver) Spans() []ReceivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ReceivedSpan(nil), r.spans...)
}

// Names returns the spans received as "name@service.name", sorted.
func (r *OTLPReceiver) Names() []string {
	var out []string
	for _, s := range r.Spans() {
		out = append(out, s.Name+"@"+s.Service())
	}
	sort.Strings(out)
	return out
}
