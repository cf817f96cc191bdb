package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"google.golang.org/grpc"

	"github.com/agentmesh/agentmesh/libs/events"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/memstore"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/mongostore"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/grpcapi"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/mcptools"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/retrieval"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/strategy"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

// ChatConfig configures the agentic chat loop (ConversationService and
// ToolService).
type ChatConfig struct {
	// Store selects conversation storage.
	Store string `env:"CONVERSATION_STORE" default:"mongo" help:"conversation storage: mongo (shared by every replica) or memory (this process only, lost on restart)"`
	// Strategy is the default model strategy of new conversations.
	Strategy string `env:"ORCHESTRATOR_STRATEGY" default:"deepseek_single" help:"default chat strategy: deepseek_single, qwen_single_thinking, qwen_single_instruct or ollama_single"`
	// Model is the logical model the loop calls.
	Model string `env:"ORCHESTRATOR_MODEL" default:"chat" help:"logical model (a model gateway route) the chat loop calls"`
	// StrategyModels overrides Model per strategy.
	StrategyModels []string `env:"ORCHESTRATOR_STRATEGY_MODELS" help:"logical model per strategy, as strategy=model pairs, comma-separated (e.g. qwen_single_thinking=chat-qwen,ollama_single=chat-local); unlisted strategies call ORCHESTRATOR_MODEL"`
	// StreamingMode is how turns stream.
	StreamingMode string `env:"ORCHESTRATOR_STREAMING_MODE" default:"PROGRESSIVE" help:"PROGRESSIVE (token deltas as they arrive) or FINAL_ONLY (whole reasoning and answer once complete)"`
	// MaxIterations bounds tool-using model calls per message.
	MaxIterations int `env:"ORCHESTRATOR_MAX_ITERATIONS" default:"10" help:"model calls that may use tools per message; at the limit the loop answers with what it has"`
	// MaxToolCalls bounds the tool calls of one model call.
	MaxToolCalls int `env:"ORCHESTRATOR_MAX_TOOL_CALLS" default:"16" help:"tool calls one model call of the chat loop may ask for (1 to 256): the first ones run, the rest are dropped and a tool_calls_cut status update says so"`
	// HistoryWindow is the rolling window of stored messages.
	HistoryWindow int `env:"ORCHESTRATOR_HISTORY_WINDOW" default:"20" help:"stored messages of a conversation the model sees before the new one"`
	// ToolParallelism bounds concurrent tool calls of one iteration.
	ToolParallelism int `env:"ORCHESTRATOR_TOOL_PARALLELISM" default:"4" help:"tool calls of one iteration that run at once"`
	// ToolTimeout bounds one tool call.
	ToolTimeout time.Duration `env:"ORCHESTRATOR_TOOL_TIMEOUT" default:"60s" help:"time limit of one tool call; the model reads the timeout as the tool's error"`
	// RetrievalLimit is the size of the initial search.
	RetrievalLimit int `env:"ORCHESTRATOR_RETRIEVAL_LIMIT" default:"5" help:"passages of the initial knowledge-base search added to every message"`
	// RetrievalTimeout bounds one search.
	RetrievalTimeout time.Duration `env:"ORCHESTRATOR_RETRIEVAL_TIMEOUT" default:"5s" help:"time limit of one knowledge-base search; past it the turn goes on without retrieved context"`
	// SystemPrompt opens every model request.
	SystemPrompt string `env:"ORCHESTRATOR_SYSTEM_PROMPT" help:"system prompt opening every chat request; empty sends none"`
	// LeaseTTL is the turn lease's lifetime without renewal.
	LeaseTTL time.Duration `env:"ORCHESTRATOR_TURN_LEASE_TTL" default:"6s" help:"how long a replica's claim on a conversation outlives the replica if it crashes mid-turn; the turn renews it every third of it, however long its model calls"`
	// ResumeGrace is how long a streamed turn whose client went away keeps
	// running for a WatchTurn to pick it up.
	ResumeGrace time.Duration `env:"ORCHESTRATOR_TURN_RESUME_GRACE" default:"30s" help:"how long a streamed chat turn whose client went away (a gateway replica died, a network cut) keeps running unwatched, for the client to resume it with GET .../turns/{turn}:watch and Last-Event-ID; at least 6s. A turn a watch follows keeps running"`
}

// validate checks the values Load cannot, naming the variable at fault.
func (c ChatConfig) validate() error {
	var errs []string
	if c.Store != "mongo" && c.Store != "memory" {
		errs = append(errs, fmt.Sprintf("CONVERSATION_STORE=%q: want mongo or memory", c.Store))
	}
	if _, err := strategy.ParseMode(c.StreamingMode); err != nil {
		errs = append(errs, "ORCHESTRATOR_STREAMING_MODE: "+err.Error())
	}
	if _, err := strategy.NewSet(c.Strategy, strategy.Builtin()...); err != nil {
		errs = append(errs, "ORCHESTRATOR_STRATEGY: "+err.Error())
	}
	for _, v := range []struct {
		name string
		val  int
		min  int
	}{
		{"ORCHESTRATOR_MAX_ITERATIONS", c.MaxIterations, 1},
		{"ORCHESTRATOR_MAX_TOOL_CALLS", c.MaxToolCalls, 1},
		{"ORCHESTRATOR_HISTORY_WINDOW", c.HistoryWindow, 0},
		{"ORCHESTRATOR_TOOL_PARALLELISM", c.ToolParallelism, 1},
		{"ORCHESTRATOR_RETRIEVAL_LIMIT", c.RetrievalLimit, 1},
	} {
		if v.val < v.min {
			errs = append(errs, fmt.Sprintf("%s=%d: must be at least %d", v.name, v.val, v.min))
		}
	}
	if c.MaxToolCalls > 256 {
		errs = append(errs, fmt.Sprintf("ORCHESTRATOR_MAX_TOOL_CALLS=%d: must be at most 256 (ModelService takes no more in one message)", c.MaxToolCalls))
	}
	if c.ResumeGrace < 6*time.Second {
		errs = append(errs, fmt.Sprintf("ORCHESTRATOR_TURN_RESUME_GRACE=%v: must be at least 6s", c.ResumeGrace))
	}
	if c.LeaseTTL < 3*time.Second {
		errs = append(errs, fmt.Sprintf("ORCHESTRATOR_TURN_LEASE_TTL=%v: must be at least 3s", c.LeaseTTL))
	}
	if strings.TrimSpace(c.Model) == "" {
		errs = append(errs, "ORCHESTRATOR_MODEL: must not be empty")
	}
	if _, err := c.strategyModels(); err != nil {
		errs = append(errs, "ORCHESTRATOR_STRATEGY_MODELS: "+err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("orchestrator: invalid chat configuration: %s", strings.Join(errs, "; "))
	}
	return nil
}

// strategyModels parses StrategyModels into strategy → logical model.
func (c ChatConfig) strategyModels() (map[string]string, error) {
	known := map[string]bool{}
	for _, s := range strategy.Builtin() {
		known[s.Name()] = true
	}
	out := map[string]string{}
	for _, pair := range c.StrategyModels {
		name, model, ok := strings.Cut(pair, "=")
		name, model = strings.TrimSpace(name), strings.TrimSpace(model)
		switch {
		case !ok || name == "" || model == "":
			return nil, fmt.Errorf("%q is not strategy=model", pair)
		case !known[name]:
			return nil, fmt.Errorf("%q names no strategy", pair)
		}
		out[name] = model
	}
	return out, nil
}

// chatServices are the chat loop's gRPC services.
type chatServices struct {
	conversations *grpcapi.Conversations
	tools         *grpcapi.Tools
	// close writes what the store holds back (nil: nothing to write).
	close func(context.Context) error
}

// newChatServices builds the chat loop bottom-up: store, retrieval, tool
// registry, strategies, loop, services.
func newChatServices(ctx context.Context, cfg ChatConfig, db *mongo.Database, bus *events.Bus, modelGateway, indexer grpc.ClientConnInterface, mcp *mcptools.Manager, log *slog.Logger) (*chatServices, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var store conversation.Store
	var closeStore func(context.Context) error
	switch cfg.Store {
	case "memory":
		store = memstore.New()
	default:
		s, err := mongostore.New(ctx, db, mongostore.Options{Logger: log})
		if err != nil {
			return nil, err
		}
		store, closeStore = s, s.Close
	}
	searcher := retrieval.New(indexerv1.NewSearchServiceClient(indexer), retrieval.Options{Limit: cfg.RetrievalLimit, Timeout: cfg.RetrievalTimeout})
	registry, err := tools.NewRegistry(tools.Options{Timeout: cfg.ToolTimeout, Logger: log}, searcher.Tool())
	if err != nil {
		return nil, err
	}
	var box *mcptools.ChatToolbox
	var toolbox chat.Toolbox
	if mcp.Configured() {
		box = mcp.ChatToolbox(registry)
		toolbox = box
	}
	strategies, err := strategy.NewSet(cfg.Strategy, strategy.Builtin()...)
	if err != nil {
		return nil, err
	}
	mode, err := strategy.ParseMode(cfg.StreamingMode)
	if err != nil {
		return nil, err
	}
	window := cfg.HistoryWindow
	if window == 0 {
		window = -1 // chat.Config spells "no history" as negative
	}
	models, err := cfg.strategyModels()
	if err != nil {
		return nil, err
	}
	holder, _ := os.Hostname()
	loop, err := chat.New(chat.Config{
		Model: cfg.Model, Models: models, Mode: mode, MaxIterations: cfg.MaxIterations, MaxToolCalls: cfg.MaxToolCalls, HistoryWindow: window,
		ToolParallelism: cfg.ToolParallelism, SystemPrompt: cfg.SystemPrompt, RetrievalLimit: cfg.RetrievalLimit,
		LeaseTTL: cfg.LeaseTTL, Holder: holder, ResumeGrace: cfg.ResumeGrace,
	}, chat.Deps{
		Store: store, Model: modelv1.NewModelServiceClient(modelGateway), Tools: registry, Toolbox: toolbox,
		Strategies: strategies, Search: searcher, Logger: log, Events: bus,
	})
	if err != nil {
		return nil, err
	}
	log.Info("chat loop configured", "store", cfg.Store, "strategy", cfg.Strategy, "model", cfg.Model, "mode", mode.String())
	if closeStore != nil {
		// The deletes a crash or an unreachable event stream left
		// unfinished, until the services stop.
		stopDeletes, writeBack := loop.FinishDeletes(ctx), closeStore
		closeStore = func(ctx context.Context) error {
			stopDeletes()
			return writeBack(ctx)
		}
	}
	return &chatServices{
		conversations: grpcapi.NewConversations(store, loop, strategies),
		tools:         grpcapi.NewTools(registry, box),
		close:         closeStore,
	}, nil
}
