package httpgateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"

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
	return g.authenticate(g.readBody(jsonRPCErrors(h)))
}

// jsonRPCErrors answers a POST whose body is not a JSON-RPC 2.0 message
// with JSON-RPC's error object (-32700 parse error, -32600 invalid
// request), and turns the SDK's own plain-text refusals of a message (a
// method it does not serve: "JSON RPC not handled") into one with the
// request's id; a client reads the error it sent for, not an HTTP page.
// The status stays 400.
func jsonRPCErrors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body) // read whole already (readBody)
		if err != nil {
			next.ServeHTTP(w, r)
			return
		}
		if code, id, msg := mcpserver.CheckMessage(bytes.TrimSpace(body)); code != 0 {
			writeJSONRPCError(w, mcpserver.ErrorResponse(code, id, msg))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rw := &plainRefusal{ResponseWriter: w}
		next.ServeHTTP(rw, r)
		if rw.refused {
			text := strings.TrimSpace(rw.text.String())
			writeJSONRPCError(w, mcpserver.ErrorResponse(mcpserver.ErrorCodeOf(text), mcpserver.RequestID(body), text))
		}
	})
}

func writeJSONRPCError(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("X-Content-Type-Options")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(append(b, '\n'))
}

// plainRefusal holds back a 400 the SDK answers in plain text, for
// jsonRPCErrors to answer instead; anything else passes through.
type plainRefusal struct {
	http.ResponseWriter
	refused bool
	text    bytes.Buffer
}

func (p *plainRefusal) WriteHeader(code int) {
	if code == http.StatusBadRequest && strings.HasPrefix(p.Header().Get("Content-Type"), "text/plain") {
		p.refused = true
		p.Header().Del("Content-Type")
		p.Header().Del("Content-Length")
		return
	}
	p.ResponseWriter.WriteHeader(code)
}

func (p *plainRefusal) Write(b []byte) (int, error) {
	if p.refused {
		return p.text.Write(b)
	}
	return p.ResponseWriter.Write(b)
}

// Flush passes on the SDK's flushes of an event stream.
func (p *plainRefusal) Flush() {
	if f, ok := p.ResponseWriter.(http.Flusher); ok && !p.refused {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (p *plainRefusal) Unwrap() http.ResponseWriter { return p.ResponseWriter }

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
