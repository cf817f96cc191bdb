package mcptools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	analysistools "github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/tools"
	chattools "github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

// registries caches one registry per tenant with MCP servers, built from
// the builtin one and the tenant's tools, and rebuilt when a server's tool
// list changes. Safe for concurrent use.
type registries[R any] struct {
	m       *Manager
	builtin R
	build   func(tenant string, tools []Tool) R

	mu    sync.Mutex
	cache map[string]registryEntry[R] // guarded by mu: by tenant
}

type registryEntry[R any] struct {
	gen string
	reg R
}

// get returns tenant's registry; builtin itself for a tenant without MCP
// servers. ctx bounds the wait for a first connection.
func (r *registries[R]) get(ctx context.Context, tenant string) R {
	if len(r.m.tenants[tenant]) == 0 {
		return r.builtin
	}
	tools, gen := r.m.Tools(ctx, tenant)
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.cache[tenant]; ok && e.gen == gen {
		return e.reg
	}
	reg := r.build(tenant, tools)
	r.cache[tenant] = registryEntry[R]{gen: gen, reg: reg}
	return reg
}

// ChatToolbox gives the chat loop each tenant's registry: the built-in tools
// plus the tenant's MCP tools, executed under the built-in registry's
// options (timeout, result size). Safe for concurrent use.
type ChatToolbox struct {
	m    *Manager
	regs *registries[*chattools.Registry]
}

// ChatToolbox returns the chat loop's toolbox over builtin.
func (m *Manager) ChatToolbox(builtin *chattools.Registry) *ChatToolbox {
	build := func(tenant string, tools []Tool) *chattools.Registry {
		reg := builtin
		for _, t := range tools {
			// One at a time, so that a tool whose schema does not
			// compile is left out alone.
			next, err := reg.With(chatTool{m: m, tenant: tenant, t: t})
			if err != nil {
				m.note(tenant, t.Name, err.Error())
				continue
			}
			reg = next
		}
		return reg
	}
	return &ChatToolbox{m: m, regs: &registries[*chattools.Registry]{m: m, builtin: builtin, build: build, cache: map[string]registryEntry[*chattools.Registry]{}}}
}

// Registry returns tenant's registry; the builtin one for a tenant without
// MCP servers. ctx bounds the wait for a first connection.
func (b *ChatToolbox) Registry(ctx context.Context, tenant string) *chattools.Registry {
	return b.regs.get(ctx, tenant)
}

// Status returns the state of tenant's MCP servers.
func (b *ChatToolbox) Status(tenant string) []ServerStatus { return b.m.Status(tenant) }

// chatTool is an MCP tool as the chat registry runs it.
type chatTool struct {
	m      *Manager
	tenant string
	t      Tool
}

var _ chattools.Tool = chatTool{}

func (c chatTool) Name() string        { return c.t.Name }
func (c chatTool) Description() string { return description(c.t) }
func (c chatTool) Schema() string      { return string(c.t.Schema) }

// MCPServer names the server providing the tool (ListTools reports it).
func (c chatTool) MCPServer() string { return c.t.Server }

// Execute calls the tool. Its idempotency key is the conversation and the
// model's call id, which a turn never reuses.
func (c chatTool) Execute(ctx context.Context, call chattools.Call) (string, error) {
	if call.Scope.GetTenantId() != c.tenant {
		return "", fmt.Errorf("%s belongs to another tenant", c.t.Name)
	}
	var key string
	if call.ConversationID != "" && call.ID != "" {
		key = "chat/" + call.ConversationID + "/" + call.ID
	}
	res, err := c.m.Call(ctx, c.tenant, c.t.Name, call.Arguments, key)
	if err != nil {
		return "", err
	}
	if res.IsError {
		return "", errors.New(resultText(res))
	}
	return resultText(res), nil
}

// AnalysisToolbox gives analyses each tenant's registry: the built-in tools
// plus the tenant's MCP tools, which tool jobs run like any other (timeouts,
// parallelism, idempotency keys). Safe for concurrent use.
type AnalysisToolbox struct {
	m    *Manager
	regs *registries[*analysistools.Registry]
}

// AnalysisToolbox returns the analyses' toolbox over builtin, which must be
// complete (every tool registered) before the first call.
func (m *Manager) AnalysisToolbox(builtin *analysistools.Registry) *AnalysisToolbox {
	build := func(tenant string, tools []Tool) *analysistools.Registry {
		reg := builtin.Clone()
		for _, t := range tools {
			if err := reg.Define(analysistools.Definition{Name: t.Name, Description: description(t), Parameters: t.Schema}); err != nil {
				m.note(tenant, t.Name, err.Error())
				continue
			}
			_ = reg.Handle(t.Name, analysisExecutor(m, tenant, t.Name))
		}
		return reg
	}
	return &AnalysisToolbox{m: m, regs: &registries[*analysistools.Registry]{m: m, builtin: builtin, build: build, cache: map[string]registryEntry[*analysistools.Registry]{}}}
}

// Registry returns tenant's registry; the builtin one for a tenant without
// MCP servers.
func (b *AnalysisToolbox) Registry(ctx context.Context, tenant string) *analysistools.Registry {
	return b.regs.get(ctx, tenant)
}

// Unavailable explains why tool is not in tenant's registry when it is an
// MCP tool, for a tool job planned while its server was up.
func (b *AnalysisToolbox) Unavailable(tenant, tool string) string {
	s := b.m.serverOf(tenant, tool)
	if s == nil {
		return ""
	}
	st := s.status()
	if st.Error == "" {
		return fmt.Sprintf("MCP server %s does not list it now", st.Name)
	}
	return fmt.Sprintf("MCP server %s: %s", st.Name, st.Error)
}

func analysisExecutor(m *Manager, tenant, name string) analysistools.Executor {
	return analysistools.ExecutorFunc(func(ctx context.Context, call analysistools.Call) (analysistools.Result, error) {
		if call.Scope.GetTenantId() != tenant {
			return analysistools.Result{}, fmt.Errorf("%s belongs to another tenant", name)
		}
		res, err := m.Call(ctx, tenant, name, call.Args, call.Key)
		if err != nil {
			return analysistools.Result{}, err
		}
		if res.IsError {
			return analysistools.Result{}, errors.New(resultText(res))
		}
		data, err := resultData(res)
		return analysistools.Result{Data: data}, err
	})
}

// description is the tool's description, or one saying where it comes from:
// a planner needs something to choose by, and analyses require one.
func description(t Tool) string {
	if strings.TrimSpace(t.Description) != "" {
		return t.Description
	}
	return fmt.Sprintf("Tool %s of the MCP server %s.", t.Remote, t.Server)
}

// resultText renders a result for the model: its text content, one part a
// paragraph; other content described in brackets; the structured content as
// JSON when there is no text.
func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s %s]", c.Name, c.URI))
		case *mcp.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				parts = append(parts, c.Resource.Text)
			} else if c.Resource != nil {
				parts = append(parts, fmt.Sprintf("[resource %s, %d bytes]", c.Resource.URI, len(c.Resource.Blob)))
			}
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			return string(b)
		}
	}
	return strings.Join(parts, "\n\n")
}

// resultData is a result as a tool job's JSON data: the structured content
// when there is one, else the text, kept as JSON when it is a JSON object or
// array and as a JSON string otherwise. No content is no data (a data gap).
func resultData(res *mcp.CallToolResult) (json.RawMessage, error) {
	if res.StructuredContent != nil {
		return json.Marshal(res.StructuredContent)
	}
	text := strings.TrimSpace(resultText(res))
	if text == "" {
		return nil, nil
	}
	if (text[0] == '{' || text[0] == '[') && json.Valid([]byte(text)) {
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(text)); err == nil {
			return b.Bytes(), nil
		}
	}
	return json.Marshal(text)
}
