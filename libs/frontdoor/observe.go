package frontdoor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/telemetry"
)

// RequestIDHeader carries a request's id: taken from the caller when it
// sends a usable one, made up otherwise, and answered either way.
const RequestIDHeader = "X-Request-Id"

// requestInfo is what the outer middleware learns about a request from the
// inner ones, for its log line.
type requestInfo struct {
	id     string
	tenant string
}

type requestInfoKey struct{}

// RequestID returns the id Observer gave the request of ctx ("" outside
// one).
func RequestID(ctx context.Context) string {
	if ri, _ := ctx.Value(requestInfoKey{}).(*requestInfo); ri != nil {
		return ri.id
	}
	return ""
}

// noteTenant records the authenticated tenant for the request's log line.
func noteTenant(ctx context.Context, tenant string) {
	if ri, _ := ctx.Value(requestInfoKey{}).(*requestInfo); ri != nil {
		ri.tenant = tenant
	}
}

// Observer gives every request a request id, a server span joined to the
// caller's W3C trace context, a duration metric (http.server.request.duration)
// and one log line. It never logs headers, so credentials stay out of the
// logs.
type Observer struct {
	// Log receives the line of each request.
	Log *slog.Logger
	// Route returns the pattern that served a request, for span names and
	// metric labels ("" when none matched): a bounded set, never the raw
	// path.
	Route func(*http.Request) string
	// Quiet reports requests logged at debug level when they succeed
	// (probes and scrapers, which would drown the log).
	Quiet func(*http.Request) bool

	tracer   trace.Tracer
	duration metric.Float64Histogram
}

// NewObserver returns an Observer whose spans and metric carry the
// instrumentation scope name (the package that serves).
func NewObserver(scope string, log *slog.Logger) (*Observer, error) {
	d, err := otel.Meter(scope).Float64Histogram("http.server.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of HTTP requests, streams included, by method, route pattern and status."),
		metric.WithExplicitBucketBoundaries(telemetry.SecondsBuckets...))
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Observer{Log: log, tracer: otel.Tracer(scope), duration: d,
		Route: func(*http.Request) string { return "" }, Quiet: func(*http.Request) bool { return false }}, nil
}

// Wrap observes the requests next serves.
func (o *Observer) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		begin := time.Now()
		id := r.Header.Get(RequestIDHeader)
		if id == "" || len(id) > 128 || !printableASCII(id) {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set(RequestIDHeader, id)
		ri := &requestInfo{id: id}

		ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := o.tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
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
		if route := o.Route(served); route != "" {
			// Semantic conventions: "{method} {route}", the method alone
			// when no route matched.
			span.SetName(r.Method + " " + route)
			attrs = append(attrs, attribute.String("http.route", route))
		}
		span.SetAttributes(attrs...)
		if rec.status >= 500 {
			span.SetStatus(otelcodes.Error, http.StatusText(rec.status))
		}
		o.duration.Record(ctx, elapsed.Seconds(), metric.WithAttributes(attrs...))
		level := slog.LevelInfo
		if rec.status < 400 && o.Quiet(r) {
			level = slog.LevelDebug
		}
		o.Log.Log(ctx, level, "http request", "method", r.Method, "path", r.URL.Path, "status", rec.status,
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

// Recover turns a handler panic into a 500 answered with fail instead of a
// dropped connection, and logs it.
func Recover(log *slog.Logger, fail StatusWriter, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.ErrorContext(r.Context(), "panic serving request", "panic", fmt.Sprint(v), "path", r.URL.Path)
				fail(w, http.StatusInternalServerError, status.New(codes.Internal, "internal error"))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
