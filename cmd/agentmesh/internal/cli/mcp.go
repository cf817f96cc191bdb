package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmesh/agentmesh/gateway/mcpserver"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// MCP runs `agentmesh mcp`: the mesh's MCP tools (package mcpserver) served
// to one MCP client over in and out (stdin and stdout), acting for
// AGENTMESH_TENANT and AGENTMESH_PROJECT as every CLI command does, until the
// client closes in or ctx ends. Nothing else may be written to out: it
// carries the protocol.
func MCP(ctx context.Context, cfg *Config, args []string, in io.ReadCloser, out io.WriteCloser) error {
	if len(args) != 0 {
		return fmt.Errorf("%w: agentmesh mcp (configured by AGENTMESH_TENANT, AGENTMESH_PROJECT and the service addresses)", ErrUsage)
	}
	if err := grpcx.ValidScopeID(cfg.Tenant); err != nil {
		return fmt.Errorf("AGENTMESH_TENANT %w", err)
	}
	if cfg.Project != "" {
		if err := grpcx.ValidScopeID(cfg.Project); err != nil {
			return fmt.Errorf("AGENTMESH_PROJECT %w", err)
		}
	}
	orch, err := cfg.dial(cfg.OrchestratorAddr)
	if err != nil {
		return fmt.Errorf("ORCHESTRATOR_ADDR: %w", err)
	}
	defer orch.Close()
	idx, err := cfg.dial(cfg.IndexerAddr)
	if err != nil {
		return fmt.Errorf("INDEXER_ADDR: %w", err)
	}
	defer idx.Close()
	sql, err := cfg.dial(cfg.SQLAgentAddr)
	if err != nil {
		return fmt.Errorf("SQLAGENT_ADDR: %w", err)
	}
	defer sql.Close()
	b := mcpserver.Backends{Orchestrator: orch, Indexer: idx, SQLAgent: sql}
	scope := mcpserver.Scope{Tenant: cfg.Tenant, Project: cfg.Project}
	server := mcpserver.New(b, func(context.Context) (mcpserver.Scope, error) { return scope, nil })
	err = server.Run(ctx, &mcp.IOTransport{Reader: in, Writer: out})
	if err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) || errors.Is(err, context.Canceled) || errors.Is(err, mcp.ErrConnectionClosed)) {
		return nil // the client closed stdin, or the user interrupted
	}
	return err
}
