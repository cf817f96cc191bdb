package httpgateway

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/agentmesh/agentmesh/libs/telemetry"
)

// Name is the gateway's name in logs, metrics and traces.
const Name = "gateway"

// Config is the gateway's configuration, read from the environment (with an
// empty prefix) by config.Load in main or `agentmesh up`.
type Config struct {
	// HTTPAddr is where main listens; Run itself serves on Runtime.Listener.
	HTTPAddr string `env:"HTTP_ADDR" default:":8080" help:"gateway HTTP listen address"`
	// MetricsAddr serves /metrics without an API key, for a scraper inside
	// the cluster (the public port's /metrics takes an operator key); set
	// to empty, it is off. The gateway binary reads it; agentmesh up has
	// its own.
	MetricsAddr string `env:"METRICS_ADDR" default:":9464" allowempty:"true" help:"Prometheus /metrics listen address; set but empty (METRICS_ADDR=) disables it. Under agentmesh up every service's metrics are on the gateway's /metrics, and on this address too only when it is set"`

	// ModelGatewayAddr is the model gateway's gRPC address.
	ModelGatewayAddr string `env:"MODELGATEWAY_ADDR" default:"localhost:9091" help:"model gateway gRPC address"`
	// OrchestratorAddr is the orchestrator's gRPC address.
	OrchestratorAddr string `env:"ORCHESTRATOR_ADDR" default:"localhost:9092" help:"orchestrator gRPC address"`
	// VisionAddr is the vision service's gRPC address.
	VisionAddr string `env:"VISION_ADDR" default:"localhost:9093" help:"vision gRPC address"`
	// IndexerAddr is the indexer's gRPC address.
	IndexerAddr string `env:"INDEXER_ADDR" default:"localhost:9094" help:"indexer gRPC address"`
	// ClassifierAddr is the classifier's gRPC address.
	ClassifierAddr string `env:"CLASSIFIER_ADDR" default:"localhost:9095" help:"classifier gRPC address"`
	// SQLAgentAddr is the SQL agent's gRPC address.
	SQLAgentAddr string `env:"SQLAGENT_ADDR" default:"localhost:9096" help:"SQL agent gRPC address"`

	// APIKeys lists the accepted API keys as "key=tenant[:project],...".
	// Empty runs the gateway open, in development mode.
	APIKeys string `env:"GATEWAY_API_KEYS" secret:"true" help:"API keys as key=tenant[:project][@caller],key2=tenant2; tenant * makes an operator key (no tenant: reads every tenant's usage at GET /v1/usage, names the tenant in other requests); the caller (default key- and 8 hex digits of the key's SHA-256) is recorded as who created conversations; empty = open development mode, tenant from the X-Tenant-Id header (default \"default\"; * as an operator key), caller from X-Caller-Id"`
	// CORSOrigins lists the browser origins allowed to call the API; "*"
	// allows any.
	CORSOrigins []string `env:"GATEWAY_CORS_ORIGINS" help:"comma-separated browser origins allowed by CORS; * = any; empty = no CORS headers"`
	// RateLimit and RateBurst hold each API key to a request rate on
	// this replica.
	RateLimit float64 `env:"GATEWAY_RATE_LIMIT" default:"0" min:"0" help:"requests a second each API key may make (in development mode: each tenant, project and caller), on each replica: past it 429 with Retry-After; streams count once; 0 = no limit. The model gateway's OpenAI-compatible listener reads it too"`
	RateBurst int     `env:"GATEWAY_RATE_BURST" default:"0" min:"0" help:"requests over GATEWAY_RATE_LIMIT a key may make at once after a quiet spell; 0 = a second's worth"`
	// Peers names every replica of this gateway, for the answers that
	// sum what each counted.
	Peers string `env:"GATEWAY_PEERS" help:"every REST gateway replica, as comma-separated host:port names (a headless Service resolves to each pod): GET /openai/v1/usage then sums every replica's counts; empty = this replica's alone"`
	// SSEKeepAlive is how long an SSE stream may stay silent before the
	// gateway sends a ": keep-alive" comment.
	SSEKeepAlive time.Duration `env:"GATEWAY_SSE_KEEPALIVE" default:"15s" help:"interval of the : keep-alive comment on an idle SSE stream"`
	// HealthTimeout bounds each service's health check in /healthz.
	HealthTimeout time.Duration `env:"GATEWAY_HEALTH_TIMEOUT" default:"2s" help:"timeout of each service's health check in /healthz"`
	// ReadyServices are the services whose health decides /readyz.
	ReadyServices []string `env:"GATEWAY_READY_SERVICES" default:"modelgateway,orchestrator,indexer,classifier,sqlagent" help:"services whose health decides the gateway's readiness (/readyz), comma-separated; the others are reported but do not take the gateway out of rotation (vision, by default: it waits for GPU nodes)"`
	// MaxBodyBytes is the largest request body accepted.
	MaxBodyBytes int64 `env:"GATEWAY_MAX_BODY_BYTES" default:"33554432" help:"largest HTTP request body accepted, in bytes"`
	// UploadMaxBytes caps the files of one upload (POST /v1/documents:upload).
	UploadMaxBytes int64 `env:"GATEWAY_UPLOAD_MAX_BYTES" default:"25165824" help:"largest total of the files of one multipart upload (POST /v1/documents:upload), in bytes; past it 413 names the file; keep it under GRPC_MAX_RECV_BYTES of the indexer"`
	// UploadMaxFileBytes caps one file of an upload.
	UploadMaxFileBytes int64 `env:"GATEWAY_UPLOAD_MAX_FILE_BYTES" default:"10485760" help:"largest single file of a multipart upload, in bytes; past it 413 names the file (the indexer takes attachments of at most 10 MiB)"`
	// BodyTimeout bounds how long a request body may take to arrive.
	BodyTimeout time.Duration `env:"GATEWAY_BODY_TIMEOUT" default:"60s" help:"longest time a request body may take to arrive; a slower client gets 408 and its connection closed (streamed responses are not limited)"`
	// ShutdownTimeout bounds how long shutdown waits for in-flight requests
	// and streams before cancelling them.
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" default:"20s" help:"how long shutdown waits for in-flight requests and streams to finish"`

	// Log configures logging.
	Log telemetry.LogConfig `env:""`
	// Telemetry configures tracing and metrics export.
	Telemetry telemetry.Config `env:""`
}

// withDefaults returns a copy of c with zero durations and sizes replaced by
// their defaults, so a Config built in code (tests) behaves like a loaded one.
func (c Config) withDefaults() Config {
	if c.SSEKeepAlive <= 0 {
		c.SSEKeepAlive = 15 * time.Second
	}
	if c.HealthTimeout <= 0 {
		c.HealthTimeout = 2 * time.Second
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = 60 * time.Second
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 32 << 20
	}
	if c.UploadMaxBytes <= 0 {
		c.UploadMaxBytes = 24 << 20
	}
	if c.UploadMaxFileBytes <= 0 {
		c.UploadMaxFileBytes = 10 << 20
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 20 * time.Second
	}
	if len(c.ReadyServices) == 0 {
		c.ReadyServices = []string{"modelgateway", "orchestrator", "indexer", "classifier", "sqlagent"}
	}
	return c
}

// Runtime is what Run receives from whoever starts the gateway: its binary
// or `agentmesh up`.
type Runtime struct {
	// Logger is the gateway's logger. Nil discards logs.
	Logger *slog.Logger
	// Listener is where the HTTP server serves. Run closes it on return.
	Listener net.Listener
	// Metrics, if set, is served at /metrics.
	Metrics http.Handler
	// Ready, if set, is called once the gateway is serving.
	Ready func()
}

// Backends are the gRPC connections the gateway translates to, one per
// service. Every field is required.
type Backends struct {
	// Model reaches the model gateway (ModelService).
	Model *grpc.ClientConn
	// Orchestrator reaches ConversationService, ToolService and JobService.
	Orchestrator *grpc.ClientConn
	// Vision reaches VisionService.
	Vision *grpc.ClientConn
	// Indexer reaches DocumentService, SearchService and GraphService.
	Indexer *grpc.ClientConn
	// Classifier reaches ClassifierService.
	Classifier *grpc.ClientConn
	// SQLAgent reaches SqlAgentService.
	SQLAgent *grpc.ClientConn
}

// backend is one named service connection.
type backend struct {
	name string
	conn *grpc.ClientConn
}

// list returns the backends in a fixed order under the names /healthz uses.
func (b Backends) list() []backend {
	return []backend{
		{"modelgateway", b.Model},
		{"orchestrator", b.Orchestrator},
		{"vision", b.Vision},
		{"indexer", b.Indexer},
		{"classifier", b.Classifier},
		{"sqlagent", b.SQLAgent},
	}
}
