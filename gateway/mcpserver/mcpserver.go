// Package mcpserver serves the mesh to MCP (Model Context Protocol) clients,
// with the official Go SDK: document search and extracts (indexer),
// analyses (orchestrator JobService) and read-only SQL jobs (SQL agent).
// The gateway serves it over streamable HTTP at /mcp, scoped by the
// caller's API key; `agentmesh mcp` serves it over stdio with the CLI's
// tenant.
//
// Every tool acts in the caller's scope only: its gRPC requests carry the
// scope both in the request and as the gateway's authenticated metadata, so
// a service refuses one that names another tenant or another project of a
// project-bound key.
//
// SQL follows the SQL agent's rule that nothing runs before it is
// confirmed: sql_prepare_query returns the SQL the agent would run (checked
// read-only) and runs nothing; sql_run_confirmed runs it only when given
// that exact SQL back, as a separate call the client's user approves. Only
// read jobs are exposed: writing results to a table or e-mailing them are
// not tools here.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// Backends are the services the tools call.
type Backends struct {
	Orchestrator, Indexer, SQLAgent grpc.ClientConnInterface
}

// Scope is who calls: the tenant and project the tools act in, and the
// caller's name (empty if unknown).
type Scope struct {
	Tenant, Project, Caller string
}

// ScopeFunc resolves the scope of a tool call from its context (the HTTP
// request's, for the gateway). An error refuses the call with its message.
type ScopeFunc func(ctx context.Context) (Scope, error)

// Version is the server version MCP clients see.
const Version = "v1"

// New returns the MCP server with the mesh's tools over b. scope is asked
// for every call.
func New(b Backends, scope ScopeFunc) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "agentmesh", Title: "agentmesh", Version: Version}, &mcp.ServerOptions{
		Instructions: "agentmesh: search the organisation's documents and their structured extracts, run analyses " +
			"(submit_analysis, then get_job until it is complete), and answer questions from databases with " +
			"read-only SQL (sql_prepare_query shows the SQL; sql_run_confirmed runs it once the user approved it).",
	})
	t := &tools{
		scope:  scope,
		search: indexerv1.NewSearchServiceClient(b.Indexer), docs: indexerv1.NewDocumentServiceClient(b.Indexer),
		jobs: orchestratorv1.NewJobServiceClient(b.Orchestrator), sql: sqlagentv1.NewSqlAgentServiceClient(b.SQLAgent),
	}
	t.addDocumentTools(s)
	t.addJobTools(s)
	t.addSQLTools(s)
	return s
}

// tools holds the clients the tool handlers use.
type tools struct {
	scope  ScopeFunc
	search indexerv1.SearchServiceClient
	docs   indexerv1.DocumentServiceClient
	jobs   orchestratorv1.JobServiceClient
	sql    sqlagentv1.SqlAgentServiceClient
}

// callScope resolves the call's scope and returns the context its gRPC calls
// carry (the scope as the gateway's authenticated metadata) and the scope
// for the request body.
func (t *tools) callScope(ctx context.Context) (context.Context, *commonv1.Scope, error) {
	sc, err := t.scope(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := grpcx.ValidScopeID(sc.Tenant); err != nil {
		return nil, nil, fmt.Errorf("tenant %w", err)
	}
	md := metadata.Pairs(grpcx.TenantMetadataKey, sc.Tenant)
	if sc.Project != "" {
		md.Set(grpcx.ProjectMetadataKey, sc.Project)
	}
	if sc.Caller != "" {
		md.Set(grpcx.CallerMetadataKey, sc.Caller)
	}
	return metadata.NewOutgoingContext(ctx, md), &commonv1.Scope{TenantId: sc.Tenant, ProjectId: sc.Project}, nil
}

// serviceError turns a service's status into a tool error the model can act
// on: the code and the message, which names the field at fault.
func serviceError(service string, err error) error {
	if st, ok := status.FromError(err); ok {
		return fmt.Errorf("%s: %s: %s", service, st.Code(), st.Message())
	}
	return fmt.Errorf("%s: %w", service, err)
}

// ptr returns a pointer to v (annotations take *bool).
func ptr[T any](v T) *T { return &v }

// required refuses an empty string argument, naming it.
func required(name, v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New(name + " is required")
	}
	return nil
}
