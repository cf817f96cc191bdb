package httpgateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/telemetry"
)

const (
	requestIDHeader   = "X-Request-Id"
	requestIDMetadata = "x-request-id"
	// reservedMetadataPrefix is the mesh's own metadata namespace: only the
	// gateway sets it, from authentication.
	reservedMetadataPrefix = "x-agentmesh-"
)

// probePaths are the endpoints health checkers and scrapers poll.
var probePaths = map[string]bool{"/healthz": true, "/readyz": true, "/livez": true, "/metrics": true}

// requestInfo is what the outer middleware learns about a request from the
// inner ones, for its log line.
type requestInfo struct {
	id     string
	tenant string
}

type requestInfoKey struct{}

func requestInfoFrom(ctx context.Context) *requestInfo {
	ri, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	return ri
}

// recorder captures the status and size of a response for logs and metrics.
// Unwrap keeps the connection's Flush reachable for streams.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

// Flush flushes the wrapped writer.
func (r *recorder) Flush() { _ = http.NewResponseController(r.ResponseWriter).Flush() }

// FlushError flushes the wrapped writer, reporting failure.
func (r *recorder) FlushError() error { return http.NewResponseController(r.ResponseWriter).Flush() }

// Unwrap returns the wrapped ResponseWriter.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// instruments are the gateway's metrics.
type instruments struct {
	duration metric.Float64Histogram
	streams  metric.Int64UpDownCounter
}

func newInstruments() (instruments, error) {
	m := otel.Meter("github.com/agentmesh/agentmesh/gateway/httpgateway")
	d, err := m.Float64Histogram("http.server.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of HTTP requests, streams included, by method, route pattern and status."),
		metric.WithExplicitBucketBoundaries(telemetry.SecondsBuckets...))
	if err != nil {
		return instruments{}, err
	}
	s, err := m.Int64UpDownCounter("agentmesh.gateway.active_streams",
		metric.WithDescription("SSE and NDJSON streams in progress."))
	if err != nil {
		return instruments{}, err
	}
	return instruments{duration: d, streams: s}, nil
}

// route is the pattern that served r, for span names and metric labels: a
// bounded set (never the raw path, whose ids would make a series per
// entity). After the root mux ran, r.Pattern names its own routes; the API
// behind "/" is matched against the OpenAPI document's templates. A path
// that matches nothing is "" (no route).
func (g *gateway) route(r *http.Request) string {
	pattern := r.Pattern
	if _, path, ok := strings.Cut(pattern, " "); ok {
		pattern = path // "GET /healthz" → "/healthz"
	}
	switch pattern {
	case "/{$}":
		return "/"
	case "/":
		if rt, _ := g.routes.match(r.Method, r.URL.Path); rt != nil {
			return rt.template
		}
		return ""
	}
	return pattern
}

// observe gives every request a request id, a server span joined to the
// caller's W3C trace context, a duration metric and one log line. It never
// logs headers, so credentials stay out of the logs.
func (g *gateway) observe(next http.Handler) http.Handler {
	tracer := otel.Tracer("github.com/agentmesh/agentmesh/gateway/httpgateway")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		begin := time.Now()
		id := r.Header.Get(requestIDHeader)
		if id == "" || len(id) > 128 || !printableASCII(id) {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set(requestIDHeader, id)
		ri := &requestInfo{id: id}

		ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
		defer span.End()
		ctx = context.WithValue(ctx, requestInfoKey{}, ri)

		rec := &recorder{ResponseWriter: w}
		served := r.WithContext(ctx)
		next.ServeHTTP(rec, served)

		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		elapsed := time.Since(begin)
		attrs := []attribute.KeyValue{attribute.String("http.request.method", r.Method), attribute.Int("http.response.status_code", rec.status)}
		if route := g.route(served); route != "" {
			// Semantic conventions: "{method} {route}", the method alone
			// when no route matched.
			span.SetName(r.Method + " " + route)
			attrs = append(attrs, attribute.String("http.route", route))
		}
		span.SetAttributes(attrs...)
		if rec.status >= 500 {
			span.SetStatus(otelcodes.Error, http.StatusText(rec.status))
		}
		g.metrics.duration.Record(ctx, elapsed.Seconds(), metric.WithAttributes(attrs...))
		level := slog.LevelInfo
		if probePaths[r.URL.Path] && rec.status < 400 {
			level = slog.LevelDebug // probes every few seconds would drown the log
		}
		g.log.Log(ctx, level, "http request", "method", r.Method, "path", r.URL.Path, "status", rec.status,
			"bytes", rec.bytes, "duration_ms", elapsed.Milliseconds(), "request_id", id, "tenant", ri.tenant)
	})
}

func printableASCII(s string) bool {
	for _, c := range []byte(s) {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// recoverPanics turns a handler panic into a 500 instead of a dropped
// connection, and logs it.
func (g *gateway) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				g.log.ErrorContext(r.Context(), "panic serving request", "panic", fmt.Sprint(v), "path", r.URL.Path)
				writeStatus(w, http.StatusInternalServerError, status.New(codes.Internal, "internal error"))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// cors answers preflight requests and marks responses readable by the
// configured origins. Credentials travel in headers, never cookies, so
// Allow-Credentials is not needed.
func (g *gateway) cors(next http.Handler) http.Handler {
	if len(g.cfg.CORSOrigins) == 0 {
		return next
	}
	anyOrigin := false
	allowed := map[string]bool{}
	for _, o := range g.cfg.CORSOrigins {
		if o == "*" {
			anyOrigin = true
		}
		allowed[strings.TrimSuffix(o, "/")] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" || !(anyOrigin || allowed[origin]) {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Expose-Headers", requestIDHeader)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Accept, X-API-Key, X-Tenant-Id, X-Project-Id, X-Caller-Id, X-Request-Id, Last-Event-ID")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// commandAliases are the command names the original classification agent's
// clients send ({"type": "ApproveFetch"}), mapped to the proto enum.
var commandAliases = map[string]string{
	"ApproveFetch": "COMMAND_TYPE_APPROVE_FETCH",
	"RejectFetch":  "COMMAND_TYPE_REJECT_FETCH",
	"ApproveBatch": "COMMAND_TYPE_APPROVE_BATCH",
	"RejectBatch":  "COMMAND_TYPE_REJECT_BATCH",
	"Stop":         "COMMAND_TYPE_STOP",
}

// classifierCommands accepts the original agent's command names on
// POST /agents/classificationAgent/runs/{runId}/command, so its clients work
// unchanged; the enum names work as well.
func (g *gateway) classifierCommands(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !isCommandPath(r.URL.Path) || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, status.Newf(codes.InvalidArgument, "reading body: %v", err))
			return
		}
		var fields map[string]json.RawMessage
		if json.Unmarshal(body, &fields) == nil {
			var name string
			if json.Unmarshal(fields["type"], &name) == nil && commandAliases[name] != "" {
				fields["type"], _ = json.Marshal(commandAliases[name])
				body, _ = json.Marshal(fields)
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

func isCommandPath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/agents/classificationAgent/runs/")
	if !ok {
		return false
	}
	id, ok := strings.CutSuffix(rest, "/command")
	return ok && id != "" && !strings.Contains(id, "/")
}

// incomingHeader decides which HTTP headers reach the services as metadata:
// runtime's defaults, minus credentials and cookies, and never a header that
// would land in the mesh's reserved x-agentmesh-* namespace (the tenant and
// project come from authentication only).
func incomingHeader(key string) (string, bool) {
	switch textproto.CanonicalMIMEHeaderKey(key) {
	case "Authorization", "Cookie", "X-Api-Key":
		return "", false
	}
	md, ok := runtime.DefaultHeaderMatcher(key)
	if !ok || strings.HasPrefix(strings.ToLower(md), reservedMetadataPrefix) {
		return "", false
	}
	return md, true
}

// requestMetadata forwards the authenticated scope and the request id.
func requestMetadata(ctx context.Context, r *http.Request) metadata.MD {
	md := scopeMetadata(ctx, r)
	if ri := requestInfoFrom(ctx); ri != nil {
		md = metadata.Join(md, metadata.Pairs(requestIDMetadata, ri.id))
	}
	return md
}
