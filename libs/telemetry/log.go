package telemetry

import (
	"context"
	"io"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// NewLogger returns a slog logger writing to w. format is "json" (default,
// for production) or "text"; level is debug, info (default), warn or error.
// Every record logged with a context that carries a span gets trace_id and
// span_id attributes, so logs join traces; one logged while serving an RPC
// that carries a request id (RequestIDMetadata: the gateway sends the id it
// answered the HTTP client with in X-Request-Id) gets request_id, so a
// client's request id finds the services' lines too.
func NewLogger(w io.Writer, format, level, service string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: ParseLevel(level)}
	var h slog.Handler
	if strings.EqualFold(format, "text") {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	l := slog.New(traceHandler{h})
	if service != "" {
		l = l.With("service", service)
	}
	return l
}

// ParseLevel maps a level name to a slog level; unknown names mean info
// (LogConfig refuses them at load, so only callers that bypass it see this).
func ParseLevel(s string) slog.Level {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug
	case "warn", "warning":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// LogConfig configures logging. Services embed it in their config struct.
type LogConfig struct {
	// Format is json or text.
	Format string `env:"LOG_FORMAT" default:"json" oneof:"json,text" help:"log format: json or text"`
	// Level is debug, info, warn or error.
	Level string `env:"LOG_LEVEL" default:"info" oneof:"debug,info,warn,warning,error" help:"log level: debug, info, warn, error"`
}

// RequestIDMetadata is the gRPC metadata key of the request id the gateway
// gave an HTTP request.
const RequestIDMetadata = "x-request-id"

type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if ids := md.Get(RequestIDMetadata); len(ids) > 0 && ids[0] != "" {
			r.AddAttrs(slog.String("request_id", ids[0]))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
