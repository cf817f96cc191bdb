// Package openaiapi serves OpenAI's HTTP API for chat completions,
// embeddings and models in front of ModelService, so that OpenAI's SDKs
// and the tools built on them (LangChain, LlamaIndex, agent frameworks)
// reach the mesh's logical models with only their base URL and API key
// changed:
//
//	POST /openai/v1/chat/completions   unary, or stream: true as SSE chunks ending in data: [DONE]
//	POST /openai/v1/embeddings         float or base64 vectors
//	GET  /openai/v1/models             the logical models, as model ids
//	GET  /openai/v1/models/{model}
//	GET  /openai/v1/usage              token usage of the caller's tenant, by key and model (every replica's, given Peers)
//
// Requests are read field by field: unknown fields are ignored (OpenAI
// clients send many), a known field of the wrong type is a 400 naming it,
// even one the mesh drops, and what the mesh cannot do (several choices,
// log probabilities, remote image URLs) is refused rather than dropped.
// The README's conformance table lists every field. No route takes a
// query parameter (one is a 400 naming it), a route's path asked with
// another method is a 405 with Allow, and a compressed body (a
// Content-Encoding other than identity) a 415. Failures are OpenAI error
// objects with the matching HTTP status, and Retry-After when the
// provider gave one. A stream that stays silent gets ": keep-alive"
// comments.
//
// Two doors serve it, with the same keys, limits and answers: the model
// gateway's own listener (MODELGATEWAY_OPENAI_ADDR), which calls
// ModelService in process, and the REST gateway, one gRPC hop away from
// it. Each authenticates requests before they reach this handler (an
// OpenAI SDK sends its key as Authorization: Bearer; libs/frontdoor);
// Options.Caller tells the handler who asked, for usage metering.
package openaiapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// Prefix is the path under which the API is served. It sits beside the
// gateway's own routes without colliding with any, and OpenAI clients take
// it as their base URL: http://host:8080/openai/v1.
const Prefix = "/openai/v1"

// Caller is who made a request, as the gateway authenticated it.
type Caller struct {
	// Tenant is the API key's tenant.
	Tenant string
	// Project is the project the key is bound to; empty for a tenant-wide
	// key. A project's key sees only its project's usage.
	Project string
	// Key names the key: its configured caller name, or "key-" and 8 hex
	// digits of its SHA-256; empty in the gateway's open development mode
	// when the request names no caller.
	Key string
}

// Options configure a Handler.
type Options struct {
	// Client reaches ModelService. Required.
	Client modelv1.ModelServiceClient
	// Caller returns the authenticated caller of a request. Required.
	Caller func(*http.Request) (Caller, bool)
	// Metadata, if set, returns the gRPC metadata a request forwards to
	// ModelService (scope, request id).
	Metadata func(*http.Request) metadata.MD
	// KeepAlive is how long a stream may stay silent before a
	// ": keep-alive" comment; 0 means 15 seconds.
	KeepAlive time.Duration
	// MeterProvider receives the usage counters; nil uses the global one.
	MeterProvider metric.MeterProvider
	// Log receives failures on the server's side; nil discards them.
	Log *slog.Logger
	// Peers, if set, lists the base URLs (http://host:port) of every
	// replica serving this API, this one included: GET /usage then sums
	// what each replica counted, as each counts only the calls it served.
	// Fewer than two, or an error, and GET /usage answers for this
	// replica alone. See DNSPeers.
	// The replicas are asked with the API key the request authenticated
	// with (frontdoor.Credential), or in development mode its headers.
	Peers func(context.Context) ([]string, error)
}

// Handler serves the API. It is safe for concurrent use.
type Handler struct {
	opts    Options
	mux     *http.ServeMux
	usage   *ledger
	started time.Time
	// paths matches the routes' paths whatever the method, and allow
	// holds each path pattern's methods: a known path asked with another
	// method is a 405, not a 404.
	paths *http.ServeMux
	allow map[string][]string
}

// route is one route of the API: its method, and its path under Prefix.
type route struct {
	method, path string
	serve        http.HandlerFunc
}

// New returns a Handler serving the routes under Prefix. It fails when a
// required option is missing or the counters cannot be created.
func New(opts Options) (*Handler, error) {
	if opts.Client == nil || opts.Caller == nil {
		return nil, errors.New("openaiapi: Client and Caller are required")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = 15 * time.Second
	}
	if opts.MeterProvider == nil {
		opts.MeterProvider = otel.GetMeterProvider()
	}
	usage, err := newLedger(opts.MeterProvider)
	if err != nil {
		return nil, err
	}
	h := &Handler{opts: opts, usage: usage, started: time.Now(), paths: http.NewServeMux(), allow: map[string][]string{}}
	mux := http.NewServeMux()
	for _, rt := range []route{
		{method: "POST", path: "/chat/completions", serve: h.chat},
		{method: "POST", path: "/embeddings", serve: h.embeddings},
		{method: "GET", path: "/models", serve: h.models},
		{method: "GET", path: "/models/{model}", serve: h.model},
		{method: "GET", path: "/usage", serve: h.usageReport},
	} {
		mux.Handle(rt.method+" "+Prefix+rt.path, noQuery(rt))
		pattern := Prefix + rt.path
		if h.allow[pattern] == nil {
			h.paths.Handle(pattern, http.NotFoundHandler()) // only matched, never served
		}
		h.allow[pattern] = append(h.allow[pattern], rt.method)
		if rt.method == http.MethodGet {
			h.allow[pattern] = append(h.allow[pattern], http.MethodHead) // a GET route serves HEAD too
		}
	}
	mux.HandleFunc("/", h.notFound)
	h.mux = mux
	return h, nil
}

// ServeHTTP serves one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
}

// Route returns the pattern of the route that serves r ("" for none), for
// span names and metric labels: one of the few, never the raw path.
func (h *Handler) Route(r *http.Request) string {
	_, pattern := h.mux.Handler(r)
	if _, path, ok := strings.Cut(pattern, " "); ok {
		return path
	}
	return "" // "/": the not-found route
}

// noQuery serves rt, refusing any query parameter with a 400 naming it,
// as the rest of the gateway refuses one a route does not take: no route
// here takes one (GET /usage shows the caller's own usage, which its key
// decides), and dropped, a parameter would change nothing unseen
// (?tenant=other would show the caller's own usage as if another's).
func noQuery(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery == "" {
			rt.serve(w, r)
			return
		}
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			writeError(w, http.StatusBadRequest, failureOf(badParam("query", "%v", err)))
			return
		}
		if names := slices.Sorted(maps.Keys(q)); len(names) > 0 {
			name := names[0]
			if name == "" {
				name = "query" // ?=x
			}
			writeError(w, http.StatusBadRequest, failureOf(badParam(name, "unknown query parameter of %s %s (it takes none)", rt.method, Prefix+rt.path)))
			return
		}
		rt.serve(w, r)
	})
}

// notFound answers paths the API does not have with 404, and a path it
// has asked with another method with 405 and the methods it takes, in its
// error shape (a ServeMux would answer in plain text).
func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	if _, pattern := h.paths.Handler(r); pattern != "" {
		allow := strings.Join(h.allow[pattern], ", ")
		writeError(w, http.StatusMethodNotAllowed, failure{header: http.Header{"Allow": {allow}}, body: apiError{
			Message: "method " + r.Method + " is not allowed on " + r.URL.Path + " (allowed: " + allow + ")",
			Type:    "invalid_request_error", Code: strPtr("method_not_allowed"),
		}})
		return
	}
	writeError(w, http.StatusNotFound, failure{body: apiError{
		Message: "unknown route " + r.Method + " " + r.URL.Path + " (this gateway serves chat/completions, embeddings, models and usage under " + Prefix + ")",
		Type:    "invalid_request_error", Code: strPtr("unknown_url"),
	}})
}

// outgoing returns the context of the ModelService call: the request's,
// with the gateway's metadata.
func (h *Handler) outgoing(r *http.Request) context.Context {
	if h.opts.Metadata == nil {
		return r.Context()
	}
	return metadata.NewOutgoingContext(r.Context(), h.opts.Metadata(r))
}

// caller returns the request's caller; the gateway authenticated it, so
// its absence is a wiring error.
func (h *Handler) caller(r *http.Request) Caller {
	c, ok := h.opts.Caller(r)
	if !ok {
		return Caller{Tenant: "unknown"}
	}
	return c
}

// fail answers err (a paramError or a ModelService status) and logs what
// went wrong on the server's side.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	f := failureOf(err)
	if f.status >= 500 {
		h.opts.Log.WarnContext(r.Context(), "openai api request failed", "path", r.URL.Path, "http_status", f.status,
			"code", status.Code(err).String(), "error", err.Error())
	}
	writeError(w, f.status, f)
}

// readBody returns the request body; the gateway has already read it
// whole within its size and time limits. A compressed body is refused
// with 415: read as JSON it would be a misleading 400.
func readBody(r *http.Request) ([]byte, error) {
	for _, v := range r.Header.Values("Content-Encoding") {
		for _, coding := range strings.Split(v, ",") {
			if coding = strings.TrimSpace(coding); coding != "" && !strings.EqualFold(coding, "identity") {
				return nil, &statusError{failure{status: http.StatusUnsupportedMediaType,
					header: http.Header{"Accept-Encoding": {"identity"}},
					body: apiError{Message: "Content-Encoding " + coding + " is not supported: send the body uncompressed",
						Type: "invalid_request_error", Param: strPtr("Content-Encoding"), Code: strPtr("unsupported_content_encoding")}}}
			}
		}
	}
	if r.Body == nil {
		return nil, badParam("body", "a JSON object is required")
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, badParam("body", "reading it: %v", err)
	}
	if len(b) == 0 {
		return nil, badParam("body", "a JSON object is required")
	}
	return b, nil
}
