package httpgateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/frontdoor"
	"github.com/agentmesh/agentmesh/libs/telemetry"
)

const (
	requestIDHeader   = frontdoor.RequestIDHeader
	requestIDMetadata = telemetry.RequestIDMetadata
	// reservedMetadataPrefix is the mesh's own metadata namespace: only the
	// gateway sets it, from authentication.
	reservedMetadataPrefix = "x-agentmesh-"
)

// probePaths are the endpoints health checkers and scrapers poll.
var probePaths = map[string]bool{"/healthz": true, "/readyz": true, "/livez": true, "/metrics": true}

// instruments are the gateway's metrics.
type instruments struct {
	streams metric.Int64UpDownCounter
}

func newInstruments() (instruments, error) {
	m := otel.Meter(meterScope)
	s, err := m.Int64UpDownCounter("agentmesh.gateway.active_streams",
		metric.WithDescription("SSE and NDJSON streams in progress."))
	if err != nil {
		return instruments{}, err
	}
	return instruments{streams: s}, nil
}

// meterScope names the gateway's spans and metrics.
const meterScope = "github.com/agentmesh/agentmesh/gateway/httpgateway"

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

// recoverPanics turns a handler panic into a 500 instead of a dropped
// connection, and logs it.
func (g *gateway) recoverPanics(next http.Handler) http.Handler {
	return frontdoor.Recover(g.log, writeStatus, next)
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
// project come from authentication only) or on the request id (the
// gateway's own, checked, goes: requestMetadata).
func incomingHeader(key string) (string, bool) {
	switch textproto.CanonicalMIMEHeaderKey(key) {
	case "Authorization", "Cookie", "X-Api-Key":
		return "", false
	}
	md, ok := runtime.DefaultHeaderMatcher(key)
	if !ok || strings.HasPrefix(strings.ToLower(md), reservedMetadataPrefix) || strings.EqualFold(md, requestIDMetadata) {
		return "", false
	}
	return md, true
}

// requestMetadata forwards the authenticated scope and the request id.
func requestMetadata(ctx context.Context, r *http.Request) metadata.MD {
	md := scopeMetadata(ctx, r)
	if id := frontdoor.RequestID(ctx); id != "" {
		md = metadata.Join(md, metadata.Pairs(requestIDMetadata, id))
	}
	return md
}
