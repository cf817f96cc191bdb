package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/agentmesh/agentmesh/gateway/mcpserver"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// MCP serves the mesh's MCP tools (package mcpserver) to one MCP client
// over in and out, calling the services directly at cfg's gRPC addresses
// and acting for cfg.Tenant and cfg.Project, until the client closes in or
// ctx ends. Nothing else may be written to out: it carries the protocol.
// `agentmesh mcp` goes through the gateway unless --grpc; this is its
// --grpc path, kept callable for tests that hold only the addresses.
func MCP(ctx context.Context, cfg *Config, args []string, in io.ReadCloser, out io.WriteCloser) error {
	if len(args) != 0 {
		return usagef("agentmesh mcp takes no arguments")
	}
	orch, err := grpcx.Dial(cfg.OrchestratorAddr)
	if err != nil {
		return fmt.Errorf("ORCHESTRATOR_ADDR: %w", err)
	}
	defer orch.Close()
	idx, err := grpcx.Dial(cfg.IndexerAddr)
	if err != nil {
		return fmt.Errorf("INDEXER_ADDR: %w", err)
	}
	defer idx.Close()
	sql, err := grpcx.Dial(cfg.SQLAgentAddr)
	if err != nil {
		return fmt.Errorf("SQLAGENT_ADDR: %w", err)
	}
	defer sql.Close()
	b := mcpserver.Backends{Orchestrator: orch, Indexer: idx, SQLAgent: sql}
	return serveMCP(ctx, b, mcpserver.Scope{Tenant: first(cfg.Tenant, "default"), Project: cfg.Project}, in, out)
}
