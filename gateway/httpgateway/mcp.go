package httpgateway

import (
	"context"
	"errors"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmesh/agentmesh/gateway/mcpserver"
)

// mcpPath is where MCP clients reach the mesh's tools (streamable HTTP).
const mcpPath = "/mcp"

// mcpHandler serves the mesh's MCP tools (package mcpserver) over streamable
// HTTP. It runs stateless: every POST is authenticated like any API request
// (no key, or a wrong one, is a 401 before MCP sees it), and its tools act
// in the scope of that request's key, so there is no session another key
// could take over and any gateway replica can serve any request.
func (g *gateway) mcpHandler() http.Handler {
	b := g.backends
	server := mcpserver.New(mcpserver.Backends{Orchestrator: b.Orchestrator, Indexer: b.Indexer, SQLAgent: b.SQLAgent}, mcpScope)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
		Stateless: true,
		Logger:    g.log,
		// A client that goes away cancels the services' calls it made.
		PropagateRequestCancellation: true,
	})
	// The body is read whole under GATEWAY_BODY_TIMEOUT as on the REST
	// routes: the SDK reads it without a deadline, so a client that stops
	// sending would hold its connection forever.
	return g.authenticate(g.readBody(h))
}

// mcpScope is the scope of a tool call: the principal authenticate put in
// the request context, which the SDK passes to the tool's handler.
func mcpScope(ctx context.Context) (mcpserver.Scope, error) {
	p, ok := principalFrom(ctx)
	if !ok {
		return mcpserver.Scope{}, errors.New("the request is not authenticated")
	}
	if p.Tenant == "" {
		// An operator key names the tenant in each REST request's scope;
		// an MCP tool call has no scope to name it in.
		return mcpserver.Scope{}, errors.New("an operator key (tenant *) acts in no one tenant, and MCP tool calls name none: connect with a tenant's API key")
	}
	return mcpserver.Scope{Tenant: p.Tenant, Project: p.Project, Caller: p.Caller}, nil
}
