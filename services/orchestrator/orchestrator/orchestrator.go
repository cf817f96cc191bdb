// Package orchestrator is the orchestrator: the agentic chat loop (ConversationService, ToolService) and analysis jobs (JobService).
//
// Run starts it; the service binary and `agentmesh up` both call Run.
package orchestrator

import (
	"context"
	"os"
	"time"

	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobservice"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/handoff"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/mcptools"
)

// Name is the service name used in logs, metrics and health.
const Name = "orchestrator"

// Config is the service's configuration, read from the environment.
type Config struct {
	service.Common `env:""`
	// Mongo is the document store.
	Mongo mongox.Config `env:""`
	// NATSURL is the NATS server with JetStream.
	NATSURL string `env:"NATS_URL" required:"true" help:"NATS server URL (JetStream enabled)"`
	// NATSStreamReplicas is how many copies of each JetStream stream the
	// service asks for (never fewer than the stream has).
	NATSStreamReplicas int `env:"NATS_STREAM_REPLICAS" default:"1" help:"copies of each JetStream stream (3 on a three-node NATS cluster); a stream is never scaled down"`
	// ModelGatewayAddr is the model gateway gRPC address.
	ModelGatewayAddr string `env:"MODELGATEWAY_ADDR" default:"localhost:9091" help:"model gateway gRPC address"`
	// IndexerAddr is the indexer gRPC address.
	IndexerAddr string `env:"INDEXER_ADDR" default:"localhost:9094" help:"indexer gRPC address"`
	// Chat configures the chat loop.
	Chat ChatConfig `env:""`
	// Analysis configures analysis jobs (JobService).
	Analysis jobservice.Config `env:""`
	// LiftedAnalyses starts an analysis for each document intake lifts up.
	LiftedAnalyses bool `env:"ORCHESTRATOR_LIFTED_ANALYSES" default:"true" help:"start an analysis job for each document the indexer's intake routes LIFT_UP (the document names the job); off, lifted documents wait for someone to act"`
	// MCP configures each tenant's MCP servers, whose tools the chat loop
	// and analyses offer.
	MCP mcptools.Config `env:""`
}

// Run serves the service on rt.Listener until ctx is done, then shuts down
// gracefully.
func Run(ctx context.Context, cfg *Config, rt service.Runtime) error {
	srv := grpcx.NewServer(rt.Server, rt.Logger)
	db, closeMongo, err := service.ConnectMongo(ctx, cfg.Mongo, srv.Health())
	if err != nil {
		return err
	}
	defer closeMongo()
	_ = db
	bus, err := service.ConnectNATS(ctx, cfg.NATSURL, "orchestrator", cfg.NATSStreamReplicas, rt.Logger, srv.Health())
	if err != nil {
		return err
	}
	defer bus.Close()
	modelGateway, err := service.DialPeer(cfg.ModelGatewayAddr)
	if err != nil {
		return err
	}
	defer modelGateway.Close()
	indexer, err := service.DialPeer(cfg.IndexerAddr)
	if err != nil {
		return err
	}
	defer indexer.Close()
	// Secret references of MCP servers ({"env": ...}) name variables of
	// this process, as set by its deployment.
	mcp, err := mcptools.New(cfg.MCP, mcptools.Options{LookupEnv: os.LookupEnv, Logger: rt.Logger})
	if err != nil {
		return err
	}
	defer mcp.Close() // after the services stop (defers run last-in first-out)
	if mcp.Configured() {
		tenants, servers := mcp.Tenants()
		rt.Logger.Info("MCP servers configured", "tenants", tenants, "servers", servers)
	}
	chatSvc, err := newChatServices(ctx, cfg.Chat, db, bus, modelGateway, indexer, mcp, rt.Logger)
	if err != nil {
		return err
	}
	if chatSvc.close != nil {
		// After the server stops serving turns, before Mongo closes
		// (defers run last-in first-out).
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := chatSvc.close(cctx); err != nil {
				rt.Logger.Warn("conversation update times not written", "error", err)
			}
		}()
	}
	orchestratorv1.RegisterConversationServiceServer(srv.GRPC(), chatSvc.conversations)
	orchestratorv1.RegisterToolServiceServer(srv.GRPC(), chatSvc.tools)
	jobs, err := jobservice.Start(ctx, cfg.Analysis, jobservice.Deps{
		DB: db, Bus: bus, ModelGateway: modelGateway, Indexer: indexer, Logger: rt.Logger, MCP: mcp,
	})
	if err != nil {
		return err
	}
	defer jobs.Stop() // before the bus and Mongo close (defers run last-in first-out)
	jobs.Register(srv.GRPC())
	// Documents intake lifts up become analyses (package handoff).
	if cfg.LiftedAnalyses {
		lifted, err := handoff.Start(ctx, bus, handoff.New(jobs.Engine(), rt.Logger))
		if err != nil {
			return err
		}
		defer lifted.Stop() // before the jobs stop
	}
	if rt.Ready != nil {
		rt.Ready()
	}
	return srv.Serve(ctx, rt.Listener)
}
