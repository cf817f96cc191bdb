// Package mcptools gives each tenant the tools of its own MCP (Model Context
// Protocol) servers, through the official Go SDK: the chat loop offers them
// beside the built-in tools and executes them as tool calls, analysis
// planning offers them and tool jobs execute them, and ListTools lists them
// with each server's state.
//
// # Configuration
//
// ORCHESTRATOR_MCP_SERVERS (or the file ORCHESTRATOR_MCP_SERVERS_FILE) maps
// each tenant to its servers:
//
//	{"acme": [
//	  {"name": "crm", "command": "/opt/mcp/crm", "args": ["--read-only"],
//	   "env": {"CRM_TOKEN": {"env": "ACME_CRM_TOKEN"}}},
//	  {"name": "wiki", "url": "https://mcp.example.com/mcp",
//	   "headers": {"Authorization": {"file": "/var/run/secrets/acme-wiki/authorization"}}}
//	]}
//
// A value is a string, or a reference to a secret: {"env": "VAR"} (a
// variable of the orchestrator's environment, e.g. from a Kubernetes
// secretKeyRef) or {"file": "/path"} (e.g. a mounted secret). References are
// resolved each time a session opens. A stdio server inherits only HOME,
// LOGNAME, PATH, SHELL, TERM and USER, plus its "env".
//
// # Names and isolation
//
// A tool is offered as mcp__<server>__<tool>: built-in tools have no such
// prefix and server names cannot contain "__", so names never collide.
// Sessions belong to one (tenant, server) pair: a tenant's registries hold
// only its own servers' tools, so tenant A never sees, lists or calls tenant
// B's.
//
// # Failures
//
// Nothing here stops the orchestrator: a server that does not start, does not
// answer within ORCHESTRATOR_MCP_CONNECT_TIMEOUT or loses its session is
// reported (ListTools, the log) and its tools are offered from the last list
// if there was one; calling one of them connects again, and a failure or a
// timeout is the tool's error, which the model reads. Sessions open on first
// use (a tenant's first turn, analysis or ListTools waits for that first
// attempt, up to the connect timeout) and reopen lazily after they end.
package mcptools

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options are the Manager's collaborators.
type Options struct {
	// LookupEnv resolves {"env": ...} references; nil resolves none.
	LookupEnv func(string) (string, bool)
	// Logger may be nil.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Manager holds the MCP servers of every tenant. It is safe for concurrent
// use; Close ends every session.
type Manager struct {
	cfg       Config
	lookupEnv func(string) (string, bool)
	log       *slog.Logger
	now       func() time.Time
	ctx       context.Context // ends with Close: attempts stop, processes end
	cancel    context.CancelFunc
	tenants   map[string][]*server // immutable after New; each sorted by name
}

// New parses the configuration. It fails only on a configuration that
// cannot be read (naming the variable, tenant and server); servers are not
// contacted until a tenant uses them.
func New(cfg Config, opts Options) (*Manager, error) {
	specs, err := parseServers(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = 30 * time.Second
	}
	m := &Manager{cfg: cfg, lookupEnv: opts.LookupEnv, log: opts.Logger, now: opts.Now, tenants: map[string][]*server{}}
	if m.lookupEnv == nil {
		m.lookupEnv = func(string) (string, bool) { return "", false }
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.now == nil {
		m.now = time.Now
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	for tenant, list := range specs {
		for _, spec := range list {
			m.tenants[tenant] = append(m.tenants[tenant], newServer(m, tenant, spec))
		}
		sort.Slice(m.tenants[tenant], func(i, j int) bool { return m.tenants[tenant][i].spec.Name < m.tenants[tenant][j].spec.Name })
	}
	return m, nil
}

// Configured reports whether any tenant has an MCP server.
func (m *Manager) Configured() bool { return len(m.tenants) > 0 }

// Tenants returns how many tenants have servers, and how many servers.
func (m *Manager) Tenants() (tenants, servers int) {
	for _, list := range m.tenants {
		servers += len(list)
	}
	return len(m.tenants), servers
}

// Tools returns the tools of tenant's servers and a generation that changes
// whenever one of those lists changes. It starts the connections that are
// due and waits, within ctx, for those never tried before.
func (m *Manager) Tools(ctx context.Context, tenant string) ([]Tool, string) {
	servers := m.tenants[tenant]
	var waits []<-chan struct{}
	for _, s := range servers {
		if wait := s.available(); wait != nil {
			waits = append(waits, wait)
		}
	}
	for _, wait := range waits {
		select {
		case <-wait:
		case <-ctx.Done():
		}
	}
	var (
		out []Tool
		gen strings.Builder
	)
	for _, s := range servers {
		tools, g := s.snapshot()
		out = append(out, tools...)
		fmt.Fprintf(&gen, "%s:%d;", s.spec.Name, g)
	}
	return out, gen.String()
}

// Status returns the state of tenant's servers, sorted by name.
func (m *Manager) Status(tenant string) []ServerStatus {
	out := make([]ServerStatus, 0, len(m.tenants[tenant]))
	for _, s := range m.tenants[tenant] {
		out = append(out, s.status())
	}
	return out
}

// Call runs the tool of tenant named name (mcp__<server>__<tool>) with args
// (a JSON object). key, if not empty, travels in the request's _meta as
// "agentmesh/idempotency_key", so a server can recognise a call repeated
// after a crash. An error means the call did not complete (server
// unavailable, session lost, ctx ended); a result with IsError is the
// tool's own failure.
func (m *Manager) Call(ctx context.Context, tenant, name string, args json.RawMessage, key string) (*mcp.CallToolResult, error) {
	s := m.serverOf(tenant, name)
	if s == nil {
		return nil, fmt.Errorf("no MCP server of this tenant provides %s", name)
	}
	var meta mcp.Meta
	if key != "" {
		meta = mcp.Meta{"agentmesh/idempotency_key": key}
	}
	return s.call(ctx, name, args, meta)
}

// serverOf returns tenant's server whose prefix name carries, or nil.
func (m *Manager) serverOf(tenant, name string) *server {
	for _, s := range m.tenants[tenant] {
		if strings.HasPrefix(name, "mcp__"+s.spec.Name+"__") {
			return s
		}
	}
	return nil
}

// note records that tool name of tenant could not be offered.
func (m *Manager) note(tenant, name, reason string) {
	if s := m.serverOf(tenant, name); s != nil {
		s.skip(name, reason)
	}
	m.log.Warn("MCP tool not offered", "tenant", tenant, "tool", name, "reason", reason)
}

// Close ends every session (stopping stdio servers) and every attempt.
func (m *Manager) Close() {
	m.cancel()
	var wg sync.WaitGroup
	for _, list := range m.tenants {
		for _, s := range list {
			wg.Go(s.close)
		}
	}
	wg.Wait()
}
