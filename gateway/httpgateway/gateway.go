// Package httpgateway is the mesh's REST and Server-Sent Events front door.
//
// Every RPC mapped in gateway/api_config.yaml is served through grpc-gateway's
// runtime.ServeMux and the generated Register<Service>HandlerClient
// functions, as lowerCamelCase JSON. gRPC errors become HTTP statuses with a
// {code, message, details} body. Server-streaming RPCs are served as
// text/event-stream (or application/x-ndjson when asked for), flushed per
// event, with keep-alive comments while idle; see stream.go for how.
//
// Callers authenticate with an API key (Authorization: Bearer or X-API-Key)
// that names their tenant and project; the gateway forwards that scope to the
// services as gRPC metadata, where grpcx.Scope checks it against the request.
// Without configured keys the gateway runs open, for development.
//
// POST /v1/documents:upload takes files as multipart/form-data and makes
// one IngestDocument call of them (upload.go).
//
// Besides the API: /healthz (every service's grpc.health.v1 status),
// /readyz (the readiness probe: the services of GATEWAY_READY_SERVICES),
// /livez (the liveness probe: this process only), / (a redirect to the
// console), /openapi.json, /docs/ (an API reference page rendered from
// it) and, when given, /metrics (which takes an API key
// when keys are configured).
//
// Run serves the gateway; Handler builds the same http.Handler over
// connections the caller has dialled, for tests.
package httpgateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"

	"github.com/agentmesh/agentmesh/gateway/openapi"
	"github.com/agentmesh/agentmesh/libs/frontdoor"
	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	visionv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/vision/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/modelgateway/openaiapi"
)

// gateway holds what the handlers share. Immutable after Handler returns.
type gateway struct {
	cfg      Config
	log      *slog.Logger
	door     *frontdoor.Door
	backends Backends
	metrics  instruments
	routes   routeTable
}

// Handler returns the gateway's whole HTTP surface over already-dialled
// backends: the REST/SSE API, health endpoints, /openapi.json and, if
// metrics is not nil, /metrics. log may be nil. It fails when a backend is
// missing or GATEWAY_API_KEYS cannot be parsed. The connections stay the
// caller's to close.
func Handler(cfg *Config, backends Backends, log *slog.Logger, metrics http.Handler) (http.Handler, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	for _, b := range backends.list() {
		if b.conn == nil {
			return nil, fmt.Errorf("httpgateway: no connection for %s", b.name)
		}
	}
	keys, err := frontdoor.ParseKeys(cfg.APIKeys)
	if err != nil {
		return nil, err
	}
	inst, err := newInstruments()
	if err != nil {
		return nil, fmt.Errorf("httpgateway: metrics: %w", err)
	}
	routes, err := specRoutes()
	if err != nil {
		return nil, err
	}
	g := &gateway{cfg: cfg.withDefaults(), log: log, backends: backends, metrics: inst, routes: routes}
	g.door = &frontdoor.Door{Keys: keys, CORSOrigins: g.cfg.CORSOrigins, Limit: frontdoor.NewRateLimit(g.cfg.RateLimit, g.cfg.RateBurst)}
	if err := checkReadyServices(g.cfg.ReadyServices, backends); err != nil {
		return nil, err
	}

	mux, err := g.apiMux()
	if err != nil {
		return nil, err
	}
	api := g.authenticate(g.headAsGet(refuseMethodOverride(g.readBody(g.checkRequestLine(resumeLastEventID(g.classifierCommands(g.streaming(mux))))))))

	root := http.NewServeMux()
	root.HandleFunc("GET /healthz", g.serveHealth)
	root.HandleFunc("GET /readyz", g.serveReady)
	root.HandleFunc("GET /livez", serveLive)
	root.HandleFunc("GET /openapi.json", serveOpenAPI)
	root.Handle("GET /console/", consoleHandler())
	root.Handle("GET /console", http.RedirectHandler("/console/", http.StatusMovedPermanently))
	root.Handle("GET /docs/", apiDocsHandler())
	root.Handle("GET /docs", http.RedirectHandler("/docs/", http.StatusMovedPermanently))
	// A browser pointed at the gateway lands in the console.
	root.Handle("GET /{$}", http.RedirectHandler("/console/", http.StatusFound))
	if metrics != nil {
		// Metrics name every tenant, their models and key names: on the
		// public port they take an operator key (tenant *; scrapers send it
		// as a bearer token), as every tenant's usage does.
		root.Handle("GET /metrics", g.authenticate(g.operatorOnly(metrics)))
	}
	root.Handle("/", api)
	// Multipart uploads: read and checked whole by upload.go, then one
	// IngestDocument call, in the API's scope.
	root.Handle("POST "+uploadPath, g.authenticate(http.HandlerFunc(g.serveUpload)))
	// MCP clients: the mesh's tools over streamable HTTP (see mcp.go).
	root.Handle(mcpPath, g.mcpHandler())
	openai, err := g.openAIHandler()
	if err != nil {
		return nil, err
	}
	root.Handle(openaiapi.Prefix+"/", openai)
	obs, err := frontdoor.NewObserver(meterScope, log)
	if err != nil {
		return nil, fmt.Errorf("httpgateway: metrics: %w", err)
	}
	obs.Route = g.route
	obs.Quiet = func(r *http.Request) bool { return probePaths[r.URL.Path] }
	return obs.Wrap(g.recoverPanics(g.cors(root))), nil
}

// apiMux registers every service's generated REST handlers.
func (g *gateway) apiMux() (*runtime.ServeMux, error) {
	jsonpb := newJSONMarshaler()
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, eventStreamMarshaler{JSONPb: jsonpb}),
		runtime.WithMarshalerOption(mimeNDJSON, ndjsonMarshaler{JSONPb: jsonpb}),
		runtime.WithErrorHandler(g.handleError),
		runtime.WithRoutingErrorHandler(g.handleRoutingError),
		runtime.WithIncomingHeaderMatcher(incomingHeader),
		runtime.WithMetadata(requestMetadata),
		runtime.WithForwardResponseOption(startStream),
		runtime.WithForwardResponseRewriter(seedResponses),
		// A request is served by the route of its own method only: no
		// X-HTTP-Method-Override (refuseMethodOverride answers 400
		// before this mux), and no form-encoded POST served by the GET
		// of its path, whose body parameters would skip
		// checkRequestLine.
		runtime.WithDisableHTTPMethodOverride(),
		runtime.WithDisablePathLengthFallback(),
	)
	wrap := func(name string, cc *grpc.ClientConn) streamConn {
		return streamConn{ClientConn: cc, name: name, wait: g.cfg.SSEKeepAlive, log: g.log}
	}
	b := g.backends
	model, orch, vision := wrap("modelgateway", b.Model), wrap("orchestrator", b.Orchestrator), wrap("vision", b.Vision)
	indexer, classifier, sql := wrap("indexer", b.Indexer), wrap("classifier", b.Classifier), wrap("sqlagent", b.SQLAgent)

	ctx := context.Background() // only the in-process registration variants use it
	err := errors.Join(
		// ModelService includes the console's usage panel's endpoint:
		//   GET /v1/usage[?resolution=USAGE_RESOLUTION_MINUTE|USAGE_RESOLUTION_HOUR][&tenantId=T]
		//   → {"resolution": "USAGE_RESOLUTION_MINUTE", "startTime": RFC 3339,
		//      "endTime": RFC 3339, "bucketWidth": "60s", "tenantLimit": 100,
		//      "points": [{"startTime", "logicalModel", "provider", "tenantId",
		//        "calls", "promptTokens", "completionTokens", "reasoningTokens"}]}
		// (int64 counts as JSON strings; empty buckets left out; points oldest
		// first). A tenant's key sees its tenant, another tenantId is 403; an
		// operator key (tenant *; without keys X-Tenant-Id: *) sees all
		// tenants ("other" past the limit, "none" for calls on no tenant's
		// behalf). The answer sums every model gateway replica's counts
		// ("replicas", "replicasUnanswered"; see everyReplicaUsage).
		modelv1.RegisterModelServiceHandlerClient(ctx, mux, everyReplicaUsage{ModelServiceClient: modelv1.NewModelServiceClient(model), target: b.Model.Target()}),
		orchestratorv1.RegisterConversationServiceHandlerClient(ctx, mux, orchestratorv1.NewConversationServiceClient(orch)),
		orchestratorv1.RegisterToolServiceHandlerClient(ctx, mux, orchestratorv1.NewToolServiceClient(orch)),
		orchestratorv1.RegisterJobServiceHandlerClient(ctx, mux, orchestratorv1.NewJobServiceClient(orch)),
		visionv1.RegisterVisionServiceHandlerClient(ctx, mux, visionv1.NewVisionServiceClient(vision)),
		indexerv1.RegisterDocumentServiceHandlerClient(ctx, mux, indexerv1.NewDocumentServiceClient(indexer)),
		indexerv1.RegisterSearchServiceHandlerClient(ctx, mux, indexerv1.NewSearchServiceClient(indexer)),
		indexerv1.RegisterGraphServiceHandlerClient(ctx, mux, indexerv1.NewGraphServiceClient(indexer)),
		classifierv1.RegisterClassifierServiceHandlerClient(ctx, mux, classifierv1.NewClassifierServiceClient(classifier)),
		sqlagentv1.RegisterSqlAgentServiceHandlerClient(ctx, mux, sqlagentv1.NewSqlAgentServiceClient(sql)),
	)
	if err != nil {
		return nil, fmt.Errorf("httpgateway: register handlers: %w", err)
	}
	return mux, nil
}

// serveOpenAPI serves the generated OpenAPI v2 document.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(openapi.Spec)
}

// Run dials the six services, serves the gateway on rt.Listener until ctx
// ends, then shuts down gracefully: it stops accepting connections and
// waits up to ShutdownTimeout for in-flight requests and streams, then
// cancels whatever is still running. It returns nil after a clean shutdown,
// or the error that stopped it. Run closes rt.Listener.
func Run(ctx context.Context, cfg *Config, rt Runtime) error {
	log := rt.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := cfg.withDefaults()

	backends, closeBackends, err := dial(&c)
	if err != nil {
		rt.Listener.Close()
		return err
	}
	defer closeBackends()
	h, err := Handler(&c, backends, log, rt.Metrics)
	if err != nil {
		rt.Listener.Close()
		return err
	}

	mode := "api keys"
	if c.APIKeys == "" {
		mode = "open (development: tenant from X-Tenant-Id)"
	}
	log.Info("serving HTTP", "addr", rt.Listener.Addr().String(), "auth", mode)
	if err := frontdoor.Serve(ctx, rt.Listener, h, log, c.ShutdownTimeout, rt.Ready); err != nil {
		return fmt.Errorf("httpgateway: serve: %w", err)
	}
	return nil
}

// dial connects to the six services, lazily: a service that is down makes
// its routes answer 503 and /healthz say so; it does not stop the gateway.
func dial(c *Config) (Backends, func(), error) {
	var b Backends
	targets := []struct {
		env, addr string
		conn      **grpc.ClientConn
	}{
		{"MODELGATEWAY_ADDR", c.ModelGatewayAddr, &b.Model},
		{"ORCHESTRATOR_ADDR", c.OrchestratorAddr, &b.Orchestrator},
		{"VISION_ADDR", c.VisionAddr, &b.Vision},
		{"INDEXER_ADDR", c.IndexerAddr, &b.Indexer},
		{"CLASSIFIER_ADDR", c.ClassifierAddr, &b.Classifier},
		{"SQLAGENT_ADDR", c.SQLAgentAddr, &b.SQLAgent},
	}
	var opened []*grpc.ClientConn
	closeAll := func() {
		for _, cc := range opened {
			_ = cc.Close()
		}
	}
	for _, t := range targets {
		if t.addr == "" {
			closeAll()
			return Backends{}, nil, fmt.Errorf("httpgateway: %s is empty", t.env)
		}
		cc, err := grpcx.Dial(t.addr)
		if err != nil {
			closeAll()
			return Backends{}, nil, fmt.Errorf("httpgateway: %s: %w", t.env, err)
		}
		opened = append(opened, cc)
		*t.conn = cc
	}
	return b, closeAll, nil
}
