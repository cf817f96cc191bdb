// Package jobservice assembles analysis jobs for the orchestrator: the
// Mongo job store and its outbox relay, the tool registry (market data,
// indexer documents), the output schema registry, the engine with its work
// queue consumers, and the JobService gRPC server. orchestrator.Run and the
// tests start exactly this.
package jobservice

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"google.golang.org/grpc"

	"github.com/agentmesh/agentmesh/libs/events"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/documents"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/grpcapi"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobstore"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/marketdata"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/schemas"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/tools"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/mcptools"
)

// Config is the analysis part of the orchestrator's configuration. Embed it
// with an empty env prefix.
type Config struct {
	// ToolParallelism is how many tool jobs one process runs at once.
	ToolParallelism int `env:"ANALYSIS_TOOL_PARALLELISM" default:"4" help:"tool jobs executed at once per orchestrator process"`
	// ModelParallelism is how many planning (and, separately, synthesis)
	// calls one process makes at once.
	ModelParallelism int `env:"ANALYSIS_MODEL_PARALLELISM" default:"4" help:"planning calls, and synthesis calls, made at once per process"`
	// ToolTimeout bounds one tool execution.
	ToolTimeout time.Duration `env:"ANALYSIS_TOOL_TIMEOUT" default:"30s" help:"default timeout of one tool execution"`
	// ToolTimeouts overrides the timeout per tool: "name=duration,...".
	ToolTimeouts []string `env:"ANALYSIS_TOOL_TIMEOUTS" help:"per-tool timeouts, e.g. get_financials=10s,search_documents=5s"`
	// ModelTimeout bounds a planning or synthesis call.
	ModelTimeout time.Duration `env:"ANALYSIS_MODEL_TIMEOUT" default:"2m" help:"timeout of a planning or synthesis job"`
	// ClaimTTL is how long a worker's claim on a running job outlives its
	// last renewal.
	ClaimTTL time.Duration `env:"ANALYSIS_CLAIM_TTL" default:"6s" help:"claim of the worker running a planning, tool or synthesis job, renewed every third of it whatever the job's timeout: a job whose worker died runs again about this long after the last renewal"`
	// SweepInterval is how often unfinished jobs are checked.
	SweepInterval time.Duration `env:"ANALYSIS_SWEEP_INTERVAL" default:"15s" help:"how often pending jobs and unfinished analyses are checked for recovery (lapsed claims are checked every third of ANALYSIS_CLAIM_TTL)"`
	// StaleAfter is how long a pending job may sit untouched before it is
	// queued again.
	StaleAfter time.Duration `env:"ANALYSIS_STALE_AFTER" default:"1m" help:"age after which an untouched pending job is queued again"`
	// AckWait is the work queue redelivery timeout.
	AckWait time.Duration `env:"ANALYSIS_WORK_ACK_WAIT" default:"6s" help:"work item redelivery timeout: how soon the item of a worker that died before claiming its job is delivered again (workers extend it while running)"`
	// PlannerModel and SynthesisModel are logical model names.
	PlannerModel   string `env:"ANALYSIS_PLANNER_MODEL" default:"planner" help:"logical model of planning calls"`
	SynthesisModel string `env:"ANALYSIS_SYNTHESIS_MODEL" default:"chat" help:"logical model of synthesis calls"`
	// MarketDataURL enables get_stock_price and get_financials.
	MarketDataURL string `env:"MARKET_DATA_URL" help:"market-data HTTP endpoint; enables get_stock_price and get_financials"`
	// MarketDataAPIKey is sent as a bearer token.
	MarketDataAPIKey string `env:"MARKET_DATA_API_KEY" secret:"true" help:"bearer token for MARKET_DATA_URL"`
	// DocumentTools enables search_documents and get_document_extracts.
	DocumentTools bool `env:"ANALYSIS_DOCUMENT_TOOLS" default:"true" help:"offer the indexer's search_documents and get_document_extracts tools"`
	// LiveTrees is analysis.Config.LiveTrees; negative or 0 turns it off.
	LiveTrees time.Duration `env:"ANALYSIS_LIVE_EVENTS" default:"10s" help:"how long after an analysis is created a watch of it is served from the job events this process keeps in memory, asking JetStream nothing (one consumer per process instead of one per watch); 0 = every watch replays from the stream"`
}

// engineConfig validates c and converts it.
func (c Config) engineConfig() (analysis.Config, error) {
	timeouts := map[string]time.Duration{}
	for _, kv := range c.ToolTimeouts {
		name, dur, ok := strings.Cut(kv, "=")
		d, err := time.ParseDuration(strings.TrimSpace(dur))
		if !ok || err != nil || d <= 0 || strings.TrimSpace(name) == "" {
			return analysis.Config{}, fmt.Errorf("ANALYSIS_TOOL_TIMEOUTS: %q is not name=duration", kv)
		}
		timeouts[strings.TrimSpace(name)] = d
	}
	if c.ToolParallelism < 1 {
		return analysis.Config{}, fmt.Errorf("ANALYSIS_TOOL_PARALLELISM must be at least 1, not %d", c.ToolParallelism)
	}
	if c.ClaimTTL != 0 && c.ClaimTTL < time.Second {
		// Renewed every third of it: shorter leaves no room for a
		// renewal's round trip.
		return analysis.Config{}, fmt.Errorf("ANALYSIS_CLAIM_TTL must be at least 1s, not %s", c.ClaimTTL)
	}
	liveTrees := c.LiveTrees
	if liveTrees <= 0 {
		liveTrees = -1 // off; the engine reads 0 as its default
	}
	return analysis.Config{
		ToolParallelism: c.ToolParallelism, ModelParallelism: c.ModelParallelism,
		ToolTimeout: c.ToolTimeout, ToolTimeouts: timeouts, ModelTimeout: c.ModelTimeout,
		ClaimTTL: c.ClaimTTL, SweepInterval: c.SweepInterval, StaleAfter: c.StaleAfter,
		AckWait: c.AckWait, PlannerModel: c.PlannerModel, SynthesisModel: c.SynthesisModel,
		LiveTrees: liveTrees,
	}, nil
}

// Deps are what the analysis jobs run on.
type Deps struct {
	// DB holds the analysis_jobs collection. Required.
	DB *mongo.Database
	// Bus is NATS JetStream with the mesh's streams. Required.
	Bus *events.Bus
	// ModelGateway is a connection to ModelService. Required.
	ModelGateway grpc.ClientConnInterface
	// Indexer is a connection to the indexer; nil leaves out the document
	// tools.
	Indexer grpc.ClientConnInterface
	// Logger may be nil.
	Logger *slog.Logger
	// ExtraTools, if set, registers more tools (definition + executor).
	ExtraTools func(*tools.Registry) error
	// MCP, if set, adds each tenant's MCP tools to its analyses.
	MCP *mcptools.Manager
	// Hooks are for tests.
	Hooks analysis.Hooks
}

// Outbox relay tuning. With many analyses in flight, relaying one job
// document after the other let events queue. Removing relayed entries is
// housekeeping: waiting lets one write remove the entries of several state
// changes, and a job archived by then has its entries dropped with it; a
// single writer then writes no removal at all (events.Relay.SetGone). Under
// load an analysis takes a second or two on the embedded store, so 5 s
// spares most of them: one removal per job had been a third of the
// updates, every write waiting its turn on the embedded store.
const (
	relayConcurrency  = 16
	relayRemovalDelay = 5 * time.Second
)

// Service is running analysis machinery.
type Service struct {
	engine *analysis.Engine
	server *grpcapi.Server
	relay  *events.Relay
	store  *jobstore.Store
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// Start builds everything, recovers unfinished work and starts the workers
// and the outbox relay. Stop them with Stop.
func Start(ctx context.Context, cfg Config, d Deps) (*Service, error) {
	if d.DB == nil || d.Bus == nil || d.ModelGateway == nil {
		return nil, fmt.Errorf("jobservice: DB, Bus and ModelGateway are required")
	}
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ecfg, err := cfg.engineConfig()
	if err != nil {
		return nil, err
	}
	store, err := jobstore.New(ctx, d.DB)
	if err != nil {
		return nil, err
	}
	reg := tools.NewRegistry()
	if cfg.MarketDataURL != "" {
		md, err := marketdata.New(cfg.MarketDataURL, cfg.MarketDataAPIKey, nil)
		if err != nil {
			return nil, err
		}
		if err := md.Register(reg); err != nil {
			return nil, err
		}
	} else {
		log.Info("MARKET_DATA_URL not set: get_stock_price and get_financials are not offered")
	}
	if d.Indexer != nil && cfg.DocumentTools {
		if err := documents.Register(reg, indexerv1.NewSearchServiceClient(d.Indexer), indexerv1.NewDocumentServiceClient(d.Indexer)); err != nil {
			return nil, err
		}
	}
	if d.ExtraTools != nil {
		if err := d.ExtraTools(reg); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	relay := events.NewRelay(d.Bus, store.Collection(), log)
	relay.SetDocumentLock(store.RelayLock)
	relay.SetGone(store.Gone)
	relay.SetRemover(store.RemoveRelayed)
	relay.SetConcurrency(relayConcurrency)
	relay.SetRemovalDelay(relayRemovalDelay)
	if store.SoleWriter() {
		relay.SetSingleWriter() // the store names every write to it
		relay.SetPublished(store.Published)
	}
	store.SetRelay(relay)
	var toolbox analysis.Toolbox
	if d.MCP != nil && d.MCP.Configured() {
		toolbox = d.MCP.AnalysisToolbox(reg)
	}
	engine, err := analysis.New(ecfg, analysis.Deps{
		Store: store, Bus: d.Bus, Model: modelv1.NewModelServiceClient(d.ModelGateway),
		Tools: reg, Schemas: schemas.NewRegistry(), Logger: log, Hooks: d.Hooks, Toolbox: toolbox,
	})
	if err != nil {
		cancel()
		return nil, err
	}
	s := &Service{engine: engine, server: grpcapi.New(engine), relay: relay, store: store, cancel: cancel}
	s.wg.Go(func() { _ = relay.Run(ctx) })
	if err := engine.Start(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	log.Info("analysis jobs started", slog.Any("tools", reg.Names()),
		slog.Int("tool_parallelism", ecfg.ToolParallelism))
	return s, nil
}

// Register registers JobService on s.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	orchestratorv1.RegisterJobServiceServer(r, s.server)
}

// Engine returns the engine, for tests and tools.
func (s *Service) Engine() *analysis.Engine { return s.engine }

// Stop stops the workers, flushes the outbox and stops the relay. It is
// safe to call more than once.
func (s *Service) Stop() {
	s.once.Do(func() {
		s.engine.Stop()
		s.store.Flush() // the claims held back, before the relay's last sweep
		s.cancel()
		s.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = s.relay.Sweep(ctx)
	})
}
