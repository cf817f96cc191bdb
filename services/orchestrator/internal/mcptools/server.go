package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// State is where the connection to a server is.
type State int

// States of a server connection.
const (
	// Disconnected: no session; the next use connects.
	Disconnected State = iota + 1
	// Connecting: an attempt runs.
	Connecting
	// Ready: a session is open and its tools are listed.
	Ready
	// Failed: the last attempt failed; retried after Config.RetryAfter,
	// or at once by a call of one of its tools.
	Failed
)

// terminateAfter is how long a stdio server has to exit once its stdin is
// closed, and again after SIGTERM, before it is killed.
const terminateAfter = 2 * time.Second

// stderrTail is how much of a stdio server's last stderr output a failure
// reports.
const stderrTail = 2 << 10

// Tool is one tool of an MCP server, named for the mesh.
type Tool struct {
	// Name is mcp__<server>__<tool>, with the characters a provider does
	// not accept in a function name replaced by '_'.
	Name string
	// Server is the configured server name; Remote the tool's own name.
	Server, Remote string
	// Description is the server's description of the tool.
	Description string
	// Schema is the tool's input schema (JSON).
	Schema json.RawMessage
}

// server is the connection to one configured MCP server of one tenant. Its
// methods are safe for concurrent use.
type server struct {
	tenant string
	spec   serverSpec
	m      *Manager

	mu          sync.Mutex
	session     *mcp.ClientSession // guarded by mu: nil when not connected
	state       State              // guarded by mu
	tools       []Tool             // guarded by mu: the last list, kept while disconnected
	remote      map[string]string  // guarded by mu: Tool.Name → Tool.Remote
	skipped     []string           // guarded by mu: tools not offered, with why
	lastErr     string             // guarded by mu
	errTime     time.Time          // guarded by mu
	connectTime time.Time          // guarded by mu
	attempt     chan struct{}      // guarded by mu: closed when the running attempt ends; nil if none
	tried       bool               // guarded by mu: an attempt has ended, well or not
	retryAt     time.Time          // guarded by mu: after a failure, when to try again unasked
	stale       bool               // guarded by mu: the server said its tool list changed
	generation  uint64             // guarded by mu: counts changes of tools
}

func newServer(m *Manager, tenant string, spec serverSpec) *server {
	return &server{m: m, tenant: tenant, spec: spec, state: Disconnected}
}

// available starts an attempt if the server needs one and may have one now,
// and returns a channel to wait on when the caller should wait for it: only
// before the server's first attempt ended, so that the first turn of a
// tenant sees its tools, while a server known to be failing delays nobody.
func (s *server) available() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == Ready && !s.stale {
		return nil
	}
	if s.attempt == nil && (!s.tried || s.stale || s.m.now().After(s.retryAt)) {
		s.startLocked()
	}
	if !s.tried {
		return s.attempt
	}
	return nil
}

// startLocked starts a connection attempt (or, with a live session whose
// tools changed, a new listing). s.mu is held.
func (s *server) startLocked() {
	done := make(chan struct{})
	s.attempt = done
	if s.state != Ready {
		s.state = Connecting
	}
	session := s.session
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(s.m.ctx, s.m.cfg.ConnectTimeout)
		defer cancel()
		s.connect(ctx, session)
	}()
}

// connect opens a session (or reuses live) and lists its tools, recording
// the outcome.
func (s *server) connect(ctx context.Context, live *mcp.ClientSession) {
	session := live
	var err error
	if session == nil {
		session, err = s.open(ctx)
	}
	var tools []*mcp.Tool
	if err == nil {
		tools, err = listTools(ctx, session)
		if err != nil && live == nil {
			_ = session.Close()
		}
	}
	if err != nil && ctx.Err() != nil && s.m.ctx.Err() == nil {
		err = fmt.Errorf("no answer within %v (ORCHESTRATOR_MCP_CONNECT_TIMEOUT): %w", s.m.cfg.ConnectTimeout, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempt, s.tried, s.stale = nil, true, false
	if err != nil {
		if live != nil && s.session == live {
			s.session = nil // a session that cannot list its tools is of no use
			_ = live.Close()
		}
		s.state, s.lastErr, s.errTime = Failed, err.Error(), s.m.now()
		s.retryAt = s.errTime.Add(s.m.cfg.RetryAfter)
		s.m.log.Warn("MCP server unavailable", "tenant", s.tenant, "server", s.spec.Name, "error", err)
		return
	}
	switch {
	case live == nil:
		s.session, s.connectTime = session, s.m.now()
		go s.watch(session)
	case s.session != live:
		// The session ended while its tools were listed again: the list
		// is kept, the next use reconnects.
		s.setToolsLocked(tools)
		s.state = Disconnected
		return
	}
	s.state = Ready
	s.setToolsLocked(tools)
	s.m.log.Info("MCP server ready", "tenant", s.tenant, "server", s.spec.Name, "tools", len(s.tools))
}

// watch marks the server disconnected when session ends (a stdio server
// that exited, a closed HTTP session), so the next use opens a new one.
func (s *server) watch(session *mcp.ClientSession) {
	err := session.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.session != session {
		return
	}
	s.session = nil
	if s.state == Ready {
		s.state = Disconnected
	}
	if s.m.ctx.Err() == nil {
		msg := "the session ended"
		if err != nil {
			msg += ": " + err.Error()
		}
		s.lastErr, s.errTime = msg, s.m.now()
	}
}

// open starts or reaches the server and completes the MCP handshake.
func (s *server) open(ctx context.Context) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "agentmesh-orchestrator", Version: "v1"}, &mcp.ClientOptions{
		Logger: s.m.log.With("tenant", s.tenant, "mcp_server", s.spec.Name),
		// A server that says its tools changed gets them listed again
		// before the next turn offers them.
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			s.mu.Lock()
			s.stale = true
			s.mu.Unlock()
		},
	})
	if s.spec.Command != "" {
		return s.openCommand(ctx, client)
	}
	headers, err := resolveAll(s.spec.Headers, "header", s.m.lookupEnv)
	if err != nil {
		return nil, err
	}
	transport := &mcp.StreamableClientTransport{
		Endpoint:   s.spec.URL,
		HTTPClient: &http.Client{Transport: headerTransport{base: http.DefaultTransport, headers: headers}},
		MaxRetries: 1,
	}
	session, err := client.Connect(ctx, transport, nil)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", s.spec.URL, err)
	}
	return session, nil
}

// baseEnv is what a stdio server inherits of the orchestrator's
// environment: the variables the MCP SDKs' default environment passes (the
// TypeScript SDK's getDefaultEnvironment), so a server finds its runtime,
// and never the orchestrator's own settings or secrets.
var baseEnv = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}

// openCommand starts a stdio server and completes the handshake. A command
// that fails to start or exits during the handshake is reported with the
// end of what it wrote to stderr.
func (s *server) openCommand(ctx context.Context, client *mcp.Client) (*mcp.ClientSession, error) {
	env, err := resolveAll(s.spec.Env, "env", s.m.lookupEnv)
	if err != nil {
		return nil, err
	}
	// Not exec.CommandContext: the process outlives the attempt's context
	// and ends when its session is closed.
	cmd := exec.Command(s.spec.Command, s.spec.Args...)
	cmd.Dir = s.spec.Dir
	cmd.Env = []string{} // not nil, which would pass the whole environment
	for _, name := range baseEnv {
		if v, ok := s.m.lookupEnv(name); ok {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stderr := &tailBuffer{limit: stderrTail}
	cmd.Stderr = stderr
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: terminateAfter}, nil)
	if err != nil {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
		if tail := strings.TrimSpace(stderr.String()); tail != "" {
			err = fmt.Errorf("%w; stderr: %s", err, tail)
		}
		return nil, fmt.Errorf("start %s: %w", s.spec.Command, err)
	}
	return session, nil
}

// listTools lists every page of the server's tools.
func listTools(ctx context.Context, session *mcp.ClientSession) ([]*mcp.Tool, error) {
	var out []*mcp.Tool
	for t, err := range session.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		out = append(out, t)
	}
	return out, nil
}

// setToolsLocked names the listed tools for the mesh, skipping those that
// cannot be offered. s.mu is held.
func (s *server) setToolsLocked(listed []*mcp.Tool) {
	tools, remote, skipped := make([]Tool, 0, len(listed)), map[string]string{}, []string(nil)
	for _, t := range listed {
		name := namespaced(s.spec.Name, t.Name)
		schema, err := json.Marshal(t.InputSchema)
		switch {
		case len(name) > maxToolName:
			skipped = append(skipped, fmt.Sprintf("%s: the name is longer than %d characters once prefixed as %s", t.Name, maxToolName, name))
			continue
		case remote[name] != "":
			skipped = append(skipped, fmt.Sprintf("%s: its name reads %s like that of %s", t.Name, name, remote[name]))
			continue
		case err != nil:
			skipped = append(skipped, fmt.Sprintf("%s: input schema: %v", t.Name, err))
			continue
		}
		remote[name] = t.Name
		tools = append(tools, Tool{Name: name, Server: s.spec.Name, Remote: t.Name, Description: t.Description, Schema: schema})
	}
	s.tools, s.remote, s.skipped = tools, remote, skipped
	s.generation++
}

// skip records a tool the registries could not take (its schema does not
// compile); it is reported with the server's status.
func (s *server) skip(name, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	note := name + ": " + reason
	for _, n := range s.skipped {
		if n == note {
			return
		}
	}
	s.skipped = append(s.skipped, note)
}

// maxToolName is the longest function name providers accept.
const maxToolName = 64

// namespaced is the mesh's name for tool of server: mcp__<server>__<tool>,
// each character a provider does not accept replaced by '_'.
func namespaced(server, tool string) string {
	var b strings.Builder
	b.WriteString("mcp__" + server + "__")
	for _, c := range tool {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// snapshot returns the server's tools and the generation they belong to.
func (s *server) snapshot() ([]Tool, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tools, s.generation
}

// call runs tool name (the mesh's name) with args. Without a session it
// connects first, whatever the back-off, within ctx: a call is the user's
// demand. A session lost during the call is dropped, so the next use
// reconnects; the call itself is not repeated, since the server may have
// acted on it.
func (s *server) call(ctx context.Context, name string, args json.RawMessage, meta mcp.Meta) (*mcp.CallToolResult, error) {
	session, remote, err := s.sessionFor(ctx, name)
	if err != nil {
		return nil, err
	}
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: remote, Arguments: args, Meta: meta})
	if err != nil {
		if errors.Is(err, mcp.ErrConnectionClosed) {
			s.mu.Lock()
			if s.session == session {
				s.session, s.state = nil, Disconnected
				s.lastErr, s.errTime = "session lost during a call of "+remote+": "+err.Error(), s.m.now()
			}
			s.mu.Unlock()
			_ = session.Close()
		}
		return nil, err
	}
	return res, nil
}

// sessionFor returns a live session and the remote name of tool name,
// connecting if needed.
func (s *server) sessionFor(ctx context.Context, name string) (*mcp.ClientSession, string, error) {
	for {
		s.mu.Lock()
		if s.session != nil && s.state == Ready {
			session, remote := s.session, s.remote[name]
			s.mu.Unlock()
			if remote == "" {
				return nil, "", fmt.Errorf("MCP server %s has no tool %s", s.spec.Name, name)
			}
			return session, remote, nil
		}
		wait := s.attempt
		if wait == nil {
			s.startLocked()
			wait = s.attempt
		}
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, "", fmt.Errorf("MCP server %s: still connecting: %w", s.spec.Name, context.Cause(ctx))
		}
		s.mu.Lock()
		failed, why := s.state == Failed, s.lastErr
		s.mu.Unlock()
		if failed {
			return nil, "", fmt.Errorf("MCP server %s is unavailable: %s", s.spec.Name, why)
		}
	}
}

// status reports the server's state.
func (s *server) status() ServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ServerStatus{
		Name: s.spec.Name, Transport: s.spec.transport(), State: s.state, Tools: len(s.tools),
		Error: s.lastErr, ErrorTime: s.errTime, ConnectTime: s.connectTime, Skipped: append([]string(nil), s.skipped...),
	}
}

// close ends the session, stopping a stdio server.
func (s *server) close() {
	s.mu.Lock()
	session := s.session
	s.session, s.state = nil, Disconnected
	s.mu.Unlock()
	if session != nil {
		_ = session.Close()
	}
}

// ServerStatus is the state of one MCP server of a tenant.
type ServerStatus struct {
	// Name is the configured name; Transport "stdio" or "http".
	Name, Transport string
	// State is where the connection is.
	State State
	// Tools is how many tools are offered.
	Tools int
	// Error is the last failure, at ErrorTime.
	Error     string
	ErrorTime time.Time
	// ConnectTime is when the current or last session opened.
	ConnectTime time.Time
	// Skipped lists tools not offered, each with the reason.
	Skipped []string
}

// headerTransport adds the configured headers to every request to a
// streamable HTTP server, and cuts off an answer in JSON past
// maxJSONAnswer.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

// maxJSONAnswer bounds an answer a streamable HTTP server sends as one
// JSON body (rather than as server-sent events): the SDK reads such a body
// whole, with no limit, where it caps an event and a stdio line at 16 MiB.
// Without it one tenant's server could make the orchestrator all tenants
// share hold any amount.
const maxJSONAnswer = mcp.DefaultMaxEventSize

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header.Set(k, v)
	}
	resp, err := t.base.RoundTrip(r)
	if err == nil && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body = &cappedBody{ReadCloser: resp.Body, left: maxJSONAnswer + 1}
	}
	return resp, err
}

// cappedBody fails every read once left bytes were read (left is one past
// the limit: an answer of exactly maxJSONAnswer bytes reaches its EOF).
type cappedBody struct {
	io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("the server's answer is larger than %d MiB", maxJSONAnswer>>20)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// tailBuffer keeps the last limit bytes written to it, less the part of a
// character the cut leaves. Safe for concurrent use (exec copies stderr
// from its own goroutine).
type tailBuffer struct {
	mu    sync.Mutex
	limit int
	buf   []byte // guarded by mu
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.limit {
		// Cut at a character: what is kept is reported as text.
		b.buf = append(b.buf[:0], utf8x.Suffix(b.buf, b.limit)...)
	}
	return len(p), nil
}

// String returns the bytes kept as UTF-8 text (it is reported in
// protobuf strings), with U+FFFD for bytes that are not UTF-8 (a server
// may write in any charset).
func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return utf8x.Valid(string(b.buf))
}
