// Package modelgateway is the model gateway: every LLM and embedding call in
// the mesh, behind ModelService.
//
// Run starts it; the service binary and `agentmesh up` both call Run.
package modelgateway

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"time"

	"google.golang.org/grpc"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/credentials"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/dispatch"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/grpcapi"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/provider/deepseek"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/provider/ollama"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/provider/openai"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/provider/qwen"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/provider/sim"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/routing"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/upstream"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/usage"
)

// Name is the service name used in logs, metrics and health.
const Name = "modelgateway"

// Config is the service's configuration, read from the environment.
type Config struct {
	service.Common `env:""`

	// RoutingFile is the routing table (YAML or JSON).
	RoutingFile string `env:"MODELGATEWAY_CONFIG" help:"routing file (YAML or JSON) mapping logical models to provider chains; empty = built-in default (DeepSeek, Qwen when keyed, then Ollama)"`
	// Provider restricts every logical model to one provider.
	Provider string `env:"MODELGATEWAY_PROVIDER" help:"serve every logical model from this provider only; \"sim\" = built-in simulator with simulated answers (demos, machines without a model)"`
	// SimLatency and SimChunkDelay pace the simulator like a model.
	SimLatency    time.Duration `env:"MODELGATEWAY_SIM_LATENCY" help:"the simulator's wait before each answer, as a model's time to first token (0 = answer at once)"`
	SimChunkDelay time.Duration `env:"MODELGATEWAY_SIM_CHUNK_DELAY" help:"the simulator's wait between streamed chunks, as a model's pace (0 = all at once)"`

	OllamaHost string `env:"OLLAMA_HOST" default:"http://localhost:11434" help:"Ollama server URL"`

	DeepSeekAPIKey     string `env:"DEEPSEEK_API_KEY" secret:"true" help:"DeepSeek API key(s), comma-separated, used in turn; DeepSeek joins the routes when set"`
	DeepSeekAPIKeyFile string `env:"DEEPSEEK_API_KEY_FILE" help:"file holding DeepSeek API key(s), comma- or newline-separated"`
	DeepSeekBaseURL    string `env:"DEEPSEEK_BASE_URL" default:"https://api.deepseek.com" help:"DeepSeek API base URL"`

	QwenAPIKey     string `env:"QWEN_API_KEY" secret:"true" help:"DashScope (Qwen) API key(s), comma-separated, used in turn; keys are per region"`
	QwenAPIKeyFile string `env:"QWEN_API_KEY_FILE" help:"file holding DashScope API key(s)"`
	QwenBaseURL    string `env:"QWEN_BASE_URL" default:"https://dashscope.aliyuncs.com/compatible-mode/v1" help:"DashScope compatible-mode base URL of the key's region (international: https://dashscope-intl.aliyuncs.com/compatible-mode/v1)"`

	OpenAIAPIKey     string `env:"OPENAI_API_KEY" secret:"true" help:"API key(s) for providers of type openai, comma-separated"`
	OpenAIAPIKeyFile string `env:"OPENAI_API_KEY_FILE" help:"file holding API key(s) for providers of type openai"`
	OpenAIBaseURL    string `env:"OPENAI_BASE_URL" help:"base URL of an OpenAI-compatible server (vLLM, llama.cpp, LM Studio, Ollama /v1) for providers of type openai without base_url"`

	ConnectTimeout    time.Duration `env:"MODELGATEWAY_CONNECT_TIMEOUT" default:"5s" help:"TCP/TLS connect timeout to a provider"`
	FirstChunkTimeout time.Duration `env:"MODELGATEWAY_FIRST_CHUNK_TIMEOUT" default:"120s" help:"longest wait for a provider's first answer data (keep-alive comments do not count)"`
	IdleTimeout       time.Duration `env:"MODELGATEWAY_IDLE_TIMEOUT" default:"60s" help:"longest gap between two stream chunks"`
	RequestTimeout    time.Duration `env:"MODELGATEWAY_REQUEST_TIMEOUT" default:"10m" help:"longest single upstream request"`

	MaxAttempts    int           `env:"MODELGATEWAY_MAX_ATTEMPTS" default:"3" help:"attempts per provider on 429/5xx/connection errors/timeouts (1 = no retry)"`
	RetryBaseDelay time.Duration `env:"MODELGATEWAY_RETRY_BASE_DELAY" default:"250ms" help:"first retry backoff; doubles per retry, with jitter"`
	RetryMaxDelay  time.Duration `env:"MODELGATEWAY_RETRY_MAX_DELAY" default:"8s" help:"largest retry backoff"`
	MaxRetryAfter  time.Duration `env:"MODELGATEWAY_MAX_RETRY_AFTER" default:"30s" help:"longest provider Retry-After honoured; longer ones move on to the next provider"`

	MaxConcurrency int `env:"MODELGATEWAY_MAX_CONCURRENCY" default:"64" help:"concurrent requests per provider (routing file may override per provider)"`
	MaxQueue       int `env:"MODELGATEWAY_MAX_QUEUE" default:"256" help:"requests waiting per provider beyond the concurrency limit; more fail with RESOURCE_EXHAUSTED"`

	UsageTenants int `env:"MODELGATEWAY_USAGE_TENANTS" default:"100" min:"1" help:"tenants whose tokens are counted by name in the token metric and GetUsage (GET /v1/usage); the calls of tenants first seen after that many count as tenant \"other\""`

	ProbeInterval time.Duration `env:"MODELGATEWAY_PROBE_INTERVAL" default:"30s" help:"how often provider availability is checked in the background"`

	// OpenAIAddr serves the OpenAI-compatible API from this process.
	OpenAIAddr string `env:"MODELGATEWAY_OPENAI_ADDR" help:"listen address of the OpenAI-compatible HTTP API (/openai/v1) served by the model gateway itself, in the process that runs ModelService: without the REST gateway's hop (an Ingress routes /openai/v1 here); empty = not served here (the REST gateway serves the same API, one hop further)"`
	// APIKeys authenticate the OpenAI-compatible listener.
	APIKeys string `env:"GATEWAY_API_KEYS" secret:"true" help:"API keys of the OpenAI-compatible listener, in the REST gateway's GATEWAY_API_KEYS format (give both the same keys); empty = open development mode, tenant from X-Tenant-Id"`
	// OpenAIMaxBodyBytes and OpenAIBodyTimeout bound a request body.
	OpenAIMaxBodyBytes int64         `env:"MODELGATEWAY_OPENAI_MAX_BODY_BYTES" default:"33554432" min:"1" help:"largest request body the OpenAI-compatible listener accepts, in bytes"`
	OpenAIBodyTimeout  time.Duration `env:"MODELGATEWAY_OPENAI_BODY_TIMEOUT" default:"60s" help:"longest time a request body may take to arrive at the OpenAI-compatible listener; a slower client gets 408"`
	RateLimit          float64       `env:"GATEWAY_RATE_LIMIT" default:"0" min:"0" help:"requests a second each API key may make at the OpenAI-compatible listener, on each replica (as at the REST gateway); 0 = no limit"`
	RateBurst          int           `env:"GATEWAY_RATE_BURST" default:"0" min:"0" help:"requests over GATEWAY_RATE_LIMIT a key may make at once after a quiet spell; 0 = a second's worth"`
	OpenAIPeers        string        `env:"MODELGATEWAY_OPENAI_PEERS" help:"every model gateway replica's OpenAI-compatible listener, as comma-separated host:port names (a headless Service resolves to each pod): GET /openai/v1/usage then sums every replica's counts; empty = this replica's alone"`
	OpenAIKeepAlive    time.Duration `env:"MODELGATEWAY_OPENAI_KEEPALIVE" default:"15s" help:"interval of the : keep-alive comment on a silent stream of the OpenAI-compatible listener"`

	// OpenAIListener, if set, is where the OpenAI-compatible API is served
	// instead of OpenAIAddr (tests). Run closes it on return.
	OpenAIListener net.Listener
}

// Run serves the service on rt.Listener until ctx is done, then shuts down
// gracefully. Providers that cannot be reached do not stop the start:
// ListModels reports them and calls to their logical models fail with
// UNAVAILABLE and how to configure one.
func Run(ctx context.Context, cfg *Config, rt service.Runtime) error {
	gw, closeGW, err := build(cfg, rt)
	if err != nil {
		if rt.Listener != nil {
			_ = rt.Listener.Close() // Run owns the listener
		}
		return err
	}
	defer closeGW()

	// A fixed pool of stream workers reuses goroutines (and their grown
	// stacks) across RPCs instead of starting one per RPC: on the hot path
	// that saves the stack growth every request otherwise pays.
	srv := grpcx.NewServer(rt.Server, rt.Logger, grpc.NumStreamWorkers(uint32(4*runtime.GOMAXPROCS(0))))
	api := grpcapi.New(gw)
	modelv1.RegisterModelServiceServer(srv.GRPC(), api)

	openAI, err := startOpenAI(ctx, cfg, rt, api)
	if err != nil {
		_ = rt.Listener.Close()
		return err
	}
	defer openAI.stop()

	pctx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	go gw.RunProbes(pctx)

	if rt.Ready != nil {
		rt.Ready()
	}
	return srv.Serve(ctx, rt.Listener)
}

// build loads the routing table and wires one adapter per provider.
func build(cfg *Config, rt service.Runtime) (*dispatch.Gateway, func(), error) {
	table, err := routing.Load(cfg.RoutingFile)
	if err != nil {
		return nil, nil, err
	}
	if cfg.Provider != "" {
		if _, ok := table.Providers[cfg.Provider]; !ok && cfg.Provider != routing.TypeSim {
			return nil, nil, fmt.Errorf("MODELGATEWAY_PROVIDER=%q names no provider of the routing table", cfg.Provider)
		}
		table.Only(cfg.Provider)
	}
	timeouts := upstream.Timeouts{FirstChunk: cfg.FirstChunkTimeout, Idle: cfg.IdleTimeout, Request: cfg.RequestTimeout}
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	var backends []dispatch.Backend
	for name, p := range table.Providers {
		be := dispatch.Backend{Name: name, MaxConcurrency: cfg.MaxConcurrency, MaxQueue: cfg.MaxQueue}
		if p.MaxConcurrency != nil {
			be.MaxConcurrency = *p.MaxConcurrency
		}
		if p.MaxQueue != nil {
			be.MaxQueue = *p.MaxQueue
		}
		if p.Type == routing.TypeSim {
			if cfg.SimLatency < 0 || cfg.SimChunkDelay < 0 {
				closeAll()
				return nil, nil, fmt.Errorf("MODELGATEWAY_SIM_LATENCY and MODELGATEWAY_SIM_CHUNK_DELAY must not be negative")
			}
			sp := sim.New(name, timeouts, sim.Pace{Latency: cfg.SimLatency, ChunkDelay: cfg.SimChunkDelay})
			closers = append(closers, sp.Close)
			be.Provider = sp
			backends = append(backends, be)
			continue
		}
		keys, base, missing, err := providerAccess(cfg, p)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		if missing != "" {
			be.Unconfigured = missing
			backends = append(backends, be)
			continue
		}
		transport := upstream.NewTransport(cfg.ConnectTimeout, be.MaxConcurrency)
		closers = append(closers, transport.CloseIdleConnections)
		up := &upstream.Client{Provider: name, BaseURL: strings.TrimRight(base, "/"), Transport: transport, Keys: keys, Timeouts: timeouts}
		switch p.Type {
		case routing.TypeDeepSeek:
			be.Provider = deepseek.New(up)
		case routing.TypeQwen:
			be.Provider = qwen.New(up)
		case routing.TypeOllama:
			be.Provider = ollama.New(up)
		case routing.TypeOpenAI:
			be.Provider = openai.New(up, openai.Options{NoToolChoice: p.NoToolChoice, NoJSONSchema: p.NoJSONSchema})
		}
		backends = append(backends, be)
	}
	gw, err := dispatch.New(table, backends, dispatch.Options{
		Retry: dispatch.RetryPolicy{
			MaxAttempts: cfg.MaxAttempts, BaseDelay: cfg.RetryBaseDelay,
			MaxDelay: cfg.RetryMaxDelay, MaxRetryAfter: cfg.MaxRetryAfter,
		},
		ProbeInterval: cfg.ProbeInterval,
		Logger:        rt.Logger,
		Usage:         usage.New(cfg.UsageTenants, nil),
		HowTo: fmt.Sprintf("To configure one: run Ollama at OLLAMA_HOST (now %s) and pull the model named above, "+
			"or set DEEPSEEK_API_KEY or QWEN_API_KEY, or point MODELGATEWAY_CONFIG at a routing file; "+
			"MODELGATEWAY_PROVIDER=sim serves simulated answers for demos", ollamaURL(cfg.OllamaHost)),
	})
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return gw, closeAll, nil
}

// providerAccess finds a provider's keys and base URL. missing says why the
// provider is not configured ("" when it is); err is a broken configuration
// (an unreadable key file) that must stop the start.
func providerAccess(cfg *Config, p *routing.Provider) (keys *credentials.KeyRing, base, missing string, err error) {
	creds := p.Credentials
	if creds == "" {
		creds = p.Type
	}
	var list, file, envName string
	switch creds {
	case routing.TypeDeepSeek:
		list, file, envName, base = cfg.DeepSeekAPIKey, cfg.DeepSeekAPIKeyFile, "DEEPSEEK", cfg.DeepSeekBaseURL
	case routing.TypeQwen:
		list, file, envName, base = cfg.QwenAPIKey, cfg.QwenAPIKeyFile, "QWEN", cfg.QwenBaseURL
	case routing.TypeOpenAI:
		list, file, envName, base = cfg.OpenAIAPIKey, cfg.OpenAIAPIKeyFile, "OPENAI", cfg.OpenAIBaseURL
	case routing.TypeOllama:
		base = ollamaURL(cfg.OllamaHost)
	default:
		return nil, "", "", fmt.Errorf("routing: providers.%s.credentials %q is not one of deepseek, qwen, openai", p.Name, creds)
	}
	if p.Type == routing.TypeOllama {
		base = ollamaURL(cfg.OllamaHost)
	} else if p.Type == routing.TypeOpenAI && p.Credentials == "" {
		base = cfg.OpenAIBaseURL
	}
	if p.BaseURL != "" {
		base = p.BaseURL
	}
	keys, err = credentials.Load(list, file)
	if err != nil {
		return nil, "", "", fmt.Errorf("%s_API_KEY_FILE: %w", envName, err)
	}
	if p.APIKeyFile != "" {
		extra, err := credentials.Load("", p.APIKeyFile)
		if err != nil {
			return nil, "", "", fmt.Errorf("routing: providers.%s.api_key_file: %w", p.Name, err)
		}
		keys = credentials.Merge(keys, extra)
	}
	switch {
	case base == "":
		missing = "no base URL: set OPENAI_BASE_URL or base_url in the routing file"
	case (p.Type == routing.TypeDeepSeek || p.Type == routing.TypeQwen) && keys.Len() == 0:
		missing = fmt.Sprintf("not configured: set %s_API_KEY or %s_API_KEY_FILE", envName, envName)
	}
	return keys, base, missing, nil
}

// ollamaURL accepts OLLAMA_HOST the way the ollama CLI does: a bare
// host:port gets http://.
func ollamaURL(host string) string {
	host = strings.TrimRight(strings.TrimSpace(host), "/")
	if host == "" {
		return "http://localhost:11434"
	}
	if !strings.Contains(host, "://") {
		host = "http://" + host
	}
	return host
}
