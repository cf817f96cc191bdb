package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat/chattest"
)

// fixture configures the test binary as the stdio MCP server name in mode
// (see mcpfixture_test.go), with env added to its environment.
func fixture(name, mode string, env map[string]any) map[string]any {
	e := map[string]any{fixtureEnv: mode}
	for k, v := range env {
		e[k] = v
	}
	return map[string]any{"name": name, "command": os.Args[0], "env": e}
}

// startWithMCP runs the orchestrator with servers as ORCHESTRATOR_MCP_SERVERS
// in front of model, the indexer down, and extra settings.
func startWithMCP(t *testing.T, model *chattest.Model, servers map[string]any, extra map[string]string) *grpc.ClientConn {
	t.Helper()
	cfg, err := json.Marshal(servers)
	if err != nil {
		t.Fatal(err)
	}
	uri, db := testkit.MongoURI(t)
	env := map[string]string{
		"MONGO_URI": uri, "MONGO_DATABASE": db, "NATS_URL": testkit.NewNATS(t).URL(),
		"MODELGATEWAY_ADDR": model.Conn.Target(), "INDEXER_ADDR": chattest.UnreachableAddr(t),
		"ORCHESTRATOR_MODEL": chattest.ModelName, "ORCHESTRATOR_MAX_ITERATIONS": "4",
		"ORCHESTRATOR_MCP_SERVERS": string(cfg),
	}
	for k, v := range extra {
		env[k] = v
	}
	conn, err := runOrchestrator(t, env)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return conn
}

// turn sends content to a new conversation of tenant and returns the
// turn's events.
func turn(t *testing.T, conn *grpc.ClientConn, tenant, content string) (string, []*orchestratorv1.StreamMessageResponse) {
	t.Helper()
	client := orchestratorv1.NewConversationServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	scope := &commonv1.Scope{TenantId: tenant}
	c, err := client.CreateConversation(ctx, &orchestratorv1.CreateConversationRequest{Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	st, err := client.StreamMessage(ctx, &orchestratorv1.StreamMessageRequest{Scope: scope, ConversationId: c.GetConversation().GetId(), Content: content})
	if err != nil {
		t.Fatal(err)
	}
	var events []*orchestratorv1.StreamMessageResponse
	for {
		ev, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return c.GetConversation().GetId(), events
		}
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		events = append(events, ev)
	}
}

// results returns the turn's tool results by tool name, and its Completed.
func results(events []*orchestratorv1.StreamMessageResponse) (map[string]*orchestratorv1.ToolCallResult, *orchestratorv1.Completed) {
	out := map[string]*orchestratorv1.ToolCallResult{}
	var done *orchestratorv1.Completed
	for _, ev := range events {
		if r := ev.GetToolCallResult(); r != nil {
			out[r.GetToolName()] = r
		}
		if c := ev.GetCompleted(); c != nil {
			done = c
		}
	}
	return out, done
}

func listTools(t *testing.T, conn *grpc.ClientConn, tenant string) *orchestratorv1.ListToolsResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := orchestratorv1.NewToolServiceClient(conn).ListTools(ctx, &orchestratorv1.ListToolsRequest{Scope: &commonv1.Scope{TenantId: tenant}})
	if err != nil {
		t.Fatalf("ListTools(%s): %v", tenant, err)
	}
	return resp
}

func toolNames(resp *orchestratorv1.ListToolsResponse) []string {
	var names []string
	for _, d := range resp.GetTools() {
		names = append(names, d.GetName())
	}
	return names
}

// TestMCPToolsInChatTurn: the stdio MCP server configured for acme (a real
// process, started with a secret read from a file) is listed by ListTools
// under namespaced names and the model's call of one of its tools returns
// the server's result, which the model reads in its next request. globex,
// with no servers, neither sees nor can call acme's tools.
func TestMCPToolsInChatTurn(t *testing.T) {
	t.Parallel()
	token := filepath.Join(t.TempDir(), "crm-token")
	if err := os.WriteFile(token, []byte("t0ken-for-tests\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	model := chattest.StartModel(t, providersim.Options{Flavor: providersim.DeepSeek})
	model.Sim.When(providersim.Match{LastRole: "user", LastUserContains: "acme", Tools: []string{"mcp__crm__lookup_customer"}}).
		ToolCallWithID("call-7", "mcp__crm__lookup_customer", map[string]any{"customer_id": "C-42"})
	// globex's model asks for acme's tool, which it was never offered.
	model.Sim.When(providersim.Match{LastRole: "user", LastUserContains: "globex"}).
		ToolCall("mcp__crm__lookup_customer", map[string]any{"customer_id": "C-42"})
	model.Sim.When(providersim.Match{LastRole: "tool"}).Text("Acme Pty Ltd is on the gold plan.")
	conn := startWithMCP(t, model, map[string]any{
		"acme": []any{fixture("crm", "crm", map[string]any{"CRM_TOKEN": map[string]string{"file": token}})},
	}, nil)

	acme := listTools(t, conn, "acme")
	want := []string{"mcp__crm__customer_notes", "mcp__crm__lookup_customer", "mcp__crm__refuse", "mcp__crm__wait", "rag_search"}
	if got := toolNames(acme); !slices.Equal(got, want) {
		t.Errorf("acme's tools = %v, want %v", got, want)
	}
	for _, d := range acme.GetTools() {
		if server := d.GetMcpServer(); (server == "crm") != strings.HasPrefix(d.GetName(), "mcp__crm__") {
			t.Errorf("tool %s reports MCP server %q", d.GetName(), server)
		}
	}
	if s := acme.GetMcpServers(); len(s) != 1 || s[0].GetState() != orchestratorv1.McpServerState_MCP_SERVER_STATE_READY || s[0].GetToolCount() != 4 || s[0].GetTransport() != "stdio" {
		t.Errorf("acme's MCP servers = %v, want crm ready with 4 tools", s)
	}
	globex := listTools(t, conn, "globex")
	if got := toolNames(globex); !slices.Equal(got, []string{"rag_search"}) || len(globex.GetMcpServers()) != 0 {
		t.Errorf("globex lists %v and servers %v, want rag_search only", got, globex.GetMcpServers())
	}

	convID, events := turn(t, conn, "acme", "What plan is acme's customer C-42 on?")
	res, done := results(events)
	got := res["mcp__crm__lookup_customer"]
	if got == nil || got.GetIsError() {
		t.Fatalf("lookup_customer result %v, want the CRM's answer", got)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(got.GetResult()), &out); err != nil {
		t.Fatalf("result %q is not the structured JSON: %v", got.GetResult(), err)
	}
	if out["name"] != "Acme Pty Ltd" || out["token_seen"] != "t0ken-for-tests" || out["idempotency_key"] != "chat/"+convID+"/call-7" {
		t.Errorf("the server answered %v: want Acme, the token from the file, and key chat/%s/call-7", out, convID)
	}
	if done.GetIterations() != 2 {
		t.Errorf("completed %v, want 2 iterations", done)
	}
	reqs := model.Sim.ChatRequests()
	second := reqs[len(reqs)-1]
	if last := second.Messages[len(second.Messages)-1]; last.Role != "tool" || !strings.Contains(last.Content, "Acme Pty Ltd") {
		t.Errorf("the model's next request ends with %+v, want the tool result", last)
	}

	_, events = turn(t, conn, "globex", "What plan is globex's customer C-42 on?")
	res, done = results(events)
	if r := res["mcp__crm__lookup_customer"]; r == nil || !r.GetIsError() || !strings.Contains(r.GetResult(), "unknown tool") {
		t.Errorf("globex calling acme's tool got %v, want an unknown tool error", r)
	}
	if done.GetIterations() != 2 {
		t.Errorf("globex's turn completed %v, want 2 iterations", done)
	}
	for _, r := range model.Sim.ChatRequests() {
		if strings.Contains(r.Messages[len(r.Messages)-1].Content, "globex") && slices.ContainsFunc(r.Tools, func(n string) bool { return strings.HasPrefix(n, "mcp__") }) {
			t.Errorf("globex's model request offered %v", r.Tools)
		}
	}
}

// TestMCPServerFailuresAreReported: servers that do not start, exit at once
// or never answer the handshake are reported by ListTools with the reason,
// and the turn goes on with the tools there are; a call that outlives the
// tool timeout and a tool's own error reach the model as tool errors.
func TestMCPServerFailuresAreReported(t *testing.T) {
	t.Parallel()
	model := chattest.StartModel(t, providersim.Options{Flavor: providersim.DeepSeek})
	model.Sim.When(providersim.Match{LastRole: "user", Tools: []string{"mcp__crm__wait", "mcp__crm__refuse"}}).
		ToolCall("mcp__crm__wait", map[string]any{}).
		ToolCall("mcp__crm__refuse", map[string]any{})
	model.Sim.When(providersim.Match{LastRole: "tool"}).Text("The CRM could not help.")
	conn := startWithMCP(t, model, map[string]any{
		"acme": []any{
			map[string]any{"name": "missing", "command": filepath.Join(t.TempDir(), "no-such-server")},
			fixture("crash", "crash", nil),
			fixture("hang", "hang", nil),
			fixture("crm", "crm", nil),
			map[string]any{"name": "nosecret", "url": "http://127.0.0.1:1/mcp", "headers": map[string]any{"Authorization": map[string]string{"env": "AGENTMESH_TEST_NEVER_SET"}}},
		},
	}, map[string]string{"ORCHESTRATOR_MCP_CONNECT_TIMEOUT": "1s", "ORCHESTRATOR_TOOL_TIMEOUT": "1s"})

	start := time.Now()
	resp := listTools(t, conn, "acme")
	if waited := time.Since(start); waited > 8*time.Second {
		t.Errorf("ListTools waited %v for the failing servers, want about the 1s connect timeout", waited)
	}
	wantErr := map[string]string{
		"missing":  "no such file",
		"crash":    "licence expired",
		"hang":     "ORCHESTRATOR_MCP_CONNECT_TIMEOUT",
		"nosecret": "AGENTMESH_TEST_NEVER_SET is not set",
	}
	for _, s := range resp.GetMcpServers() {
		switch want, failing := wantErr[s.GetName()]; {
		case failing && (s.GetState() != orchestratorv1.McpServerState_MCP_SERVER_STATE_FAILED || !strings.Contains(s.GetError(), want) || s.GetErrorTime() == nil):
			t.Errorf("server %s: %s %q, want FAILED saying %q", s.GetName(), s.GetState(), s.GetError(), want)
		case !failing && s.GetState() != orchestratorv1.McpServerState_MCP_SERVER_STATE_READY:
			t.Errorf("server %s: %s %q, want READY", s.GetName(), s.GetState(), s.GetError())
		}
	}
	if len(resp.GetMcpServers()) != 5 {
		t.Errorf("%d servers reported, want 5: %v", len(resp.GetMcpServers()), resp.GetMcpServers())
	}

	_, events := turn(t, conn, "acme", "Export the CRM")
	res, done := results(events)
	if r := res["mcp__crm__wait"]; r == nil || !r.GetIsError() || !strings.Contains(r.GetResult(), "timed out after 1s") {
		t.Errorf("wait result %v, want the tool timeout", r)
	}
	if r := res["mcp__crm__refuse"]; r == nil || !r.GetIsError() || !strings.Contains(r.GetResult(), "export quota exceeded") {
		t.Errorf("refuse result %v, want the server's error", r)
	}
	if done.GetIterations() != 2 {
		t.Errorf("completed %v, want the turn to go on after the failures", done)
	}
	// The server is still up after a cancelled call.
	after := listTools(t, conn, "acme")
	for _, s := range after.GetMcpServers() {
		if s.GetName() == "crm" && s.GetState() != orchestratorv1.McpServerState_MCP_SERVER_STATE_READY {
			t.Errorf("crm after the timed-out call: %s %q", s.GetState(), s.GetError())
		}
	}
}

// TestMCPToolInAnalysis: the planner is offered acme's MCP tool, plans it,
// and it runs as a visible tool job whose idempotency key reaches the
// server; the synthesis answers from its data.
func TestMCPToolInAnalysis(t *testing.T) {
	t.Parallel()
	model := chattest.StartModel(t, providersim.Options{Flavor: providersim.DeepSeek})
	model.Sim.When(providersim.Match{WithTools: true, LastRole: "user", LastUserContains: "C-42", Tools: []string{"mcp__crm__lookup_customer"}}).
		ToolCall("mcp__crm__lookup_customer", map[string]any{"customer_id": "C-42"})
	model.Sim.When(providersim.Match{JSON: true}).JSON(map[string]any{
		"summary":      "C-42 is Acme Pty Ltd on the gold plan with 3 open tickets.",
		"findings":     []any{map[string]any{"statement": "Acme Pty Ltd is on the gold plan", "source": "mcp__crm__lookup_customer"}},
		"data_sources": []any{}, "data_gaps": []any{},
	})
	conn := startWithMCP(t, model, map[string]any{"acme": []any{fixture("crm", "crm", nil)}},
		map[string]string{"ANALYSIS_PLANNER_MODEL": chattest.ModelName, "ANALYSIS_SYNTHESIS_MODEL": chattest.ModelName, "ANALYSIS_DOCUMENT_TOOLS": "false"})
	jobs := orchestratorv1.NewJobServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	scope := &commonv1.Scope{TenantId: "acme"}
	sub, err := jobs.SubmitAnalysis(ctx, &orchestratorv1.SubmitAnalysisRequest{Scope: scope, Query: "Summarise customer C-42's account"})
	if err != nil {
		t.Fatalf("SubmitAnalysis: %v", err)
	}
	var job *orchestratorv1.Job
	testkit.Eventually(t, 45*time.Second, func() bool {
		r, err := jobs.GetJob(ctx, &orchestratorv1.GetJobRequest{Scope: scope, JobId: sub.GetJob().GetId()})
		job = r.GetJob()
		return err == nil && (job.GetStatus() == orchestratorv1.JobStatus_JOB_STATUS_COMPLETE || job.GetStatus() == orchestratorv1.JobStatus_JOB_STATUS_FAILED)
	}, "the analysis to finish")
	if job.GetStatus() != orchestratorv1.JobStatus_JOB_STATUS_COMPLETE {
		t.Fatalf("analysis %s: %s", job.GetStatus(), job.GetError())
	}
	var tool *orchestratorv1.Job
	for _, c := range job.GetChildren() {
		if c.GetType() == orchestratorv1.JobType_JOB_TYPE_TOOL_EXECUTION {
			tool = c
		}
	}
	if tool == nil || tool.GetToolName() != "mcp__crm__lookup_customer" || tool.GetStatus() != orchestratorv1.JobStatus_JOB_STATUS_COMPLETE || tool.GetIdempotencyKey() == "" {
		t.Fatalf("tool job %v, want mcp__crm__lookup_customer complete with a key", tool)
	}
	data := tool.GetOutput().GetFields()["data"].GetStructValue().AsMap()
	if data["name"] != "Acme Pty Ltd" || data["idempotency_key"] != tool.GetIdempotencyKey() {
		t.Errorf("tool job data %v, want Acme and the job's idempotency key %s", data, tool.GetIdempotencyKey())
	}
	sources := job.GetOutput().GetFields()["data_sources"].GetListValue().AsSlice()
	if !slices.Contains(sources, any("mcp__crm__lookup_customer")) {
		t.Errorf("data_sources %v, want the MCP tool", sources)
	}
	plan := model.Sim.ChatRequests()[0]
	if !slices.Contains(plan.Tools, "mcp__crm__lookup_customer") {
		t.Errorf("planner offered %v, want the MCP tool", plan.Tools)
	}
}

// TestMCPStreamableHTTPServers: a streamable HTTP server is reached with
// the Authorization header read from each tenant's secret file; the tenant
// whose secret is wrong gets the server's refusal reported, and its tools
// are not offered.
func TestMCPStreamableHTTPServers(t *testing.T) {
	t.Parallel()
	url := startWiki(t, "wiki-s3cret")
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	if err := os.WriteFile(good, []byte("Bearer wiki-s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("Bearer stale\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	server := func(secret string) []any {
		return []any{map[string]any{"name": "wiki", "url": url, "headers": map[string]any{"Authorization": map[string]string{"file": secret}}}}
	}
	model := chattest.StartModel(t, providersim.Options{Flavor: providersim.DeepSeek})
	model.Sim.When(providersim.Match{LastRole: "user", Tools: []string{"mcp__wiki__search_wiki"}}).
		ToolCall("mcp__wiki__search_wiki", map[string]any{"query": "ingest"})
	model.Sim.When(providersim.Match{LastRole: "tool"}).Text("Restart the ingest worker.")
	conn := startWithMCP(t, model, map[string]any{"acme": server(good), "globex": server(bad)},
		map[string]string{"ORCHESTRATOR_MCP_CONNECT_TIMEOUT": "5s"})

	if s := listTools(t, conn, "acme").GetMcpServers(); len(s) != 1 || s[0].GetState() != orchestratorv1.McpServerState_MCP_SERVER_STATE_READY || s[0].GetTransport() != "http" {
		t.Errorf("acme's wiki: %v, want READY over http", s)
	}
	globex := listTools(t, conn, "globex")
	if s := globex.GetMcpServers(); len(s) != 1 || s[0].GetState() != orchestratorv1.McpServerState_MCP_SERVER_STATE_FAILED || !strings.Contains(s[0].GetError(), "Unauthorized") {
		t.Errorf("globex's wiki: %v, want FAILED, Unauthorized", s)
	}
	if slices.Contains(toolNames(globex), "mcp__wiki__search_wiki") {
		t.Errorf("globex is offered the wiki tool it cannot reach")
	}
	_, events := turn(t, conn, "acme", "How do I fix the ingest?")
	res, _ := results(events)
	if r := res["mcp__wiki__search_wiki"]; r == nil || r.GetIsError() || !strings.Contains(r.GetResult(), "Runbook: restart the ingest worker (ingest)") {
		t.Errorf("search_wiki result %v", r)
	}
}

// TestMCPToolListChangesAreFollowed: a server that adds or removes tools
// while the orchestrator holds a session with it (the SDK sends
// notifications/tools/list_changed) has its new list offered from the next
// ListTools on, without a reconnect, and a removed tool is no longer
// offered.
func TestMCPToolListChangesAreFollowed(t *testing.T) {
	t.Parallel()
	url, wiki := startWikiServer(t, "wiki-s3cret")
	secret := filepath.Join(t.TempDir(), "authorization")
	if err := os.WriteFile(secret, []byte("Bearer wiki-s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	model := chattest.StartModel(t, providersim.Options{Flavor: providersim.DeepSeek})
	conn := startWithMCP(t, model, map[string]any{"acme": []any{map[string]any{"name": "wiki", "url": url,
		"headers": map[string]any{"Authorization": map[string]string{"file": secret}}}}},
		map[string]string{"ORCHESTRATOR_MCP_CONNECT_TIMEOUT": "5s"})

	first := listTools(t, conn, "acme")
	if names := toolNames(first); !slices.Contains(names, "mcp__wiki__search_wiki") || slices.Contains(names, "mcp__wiki__open_page") {
		t.Fatalf("before the change: %v", names)
	}
	connected := first.GetMcpServers()[0].GetConnectTime().AsTime()

	mcp.AddTool(wiki, &mcp.Tool{Name: "open_page", Description: "Open a wiki page by its path."},
		func(context.Context, *mcp.CallToolRequest, struct {
			Path string `json:"path"`
		}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "page"}}}, nil, nil
		})
	waitTools := func(what string, ok func([]string) bool) *orchestratorv1.ListToolsResponse {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp := listTools(t, conn, "acme")
			if ok(toolNames(resp)) {
				return resp
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: ListTools still offers %v", what, toolNames(resp))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	added := waitTools("a tool added", func(n []string) bool { return slices.Contains(n, "mcp__wiki__open_page") })
	if got := added.GetMcpServers()[0].GetConnectTime().AsTime(); !got.Equal(connected) {
		t.Errorf("the session was opened again (%v, first %v): the change should be followed in it", got, connected)
	}
	wiki.RemoveTools("search_wiki")
	waitTools("a tool removed", func(n []string) bool {
		return !slices.Contains(n, "mcp__wiki__search_wiki") && slices.Contains(n, "mcp__wiki__open_page")
	})
}

// TestMCPHugeJSONAnswerIsRefused: a streamable HTTP server that answers in
// JSON (not SSE) had its whole answer read into memory by the SDK, however
// large (it caps SSE events and stdio lines at 16 MiB, not JSON bodies):
// one tenant's server answering 40 MiB made the orchestrator every tenant
// shares hold it all. Past 16 MiB the answer is now cut off, and the call
// is a tool error the model reads; the next call reconnects.
func TestMCPHugeJSONAnswerIsRefused(t *testing.T) {
	t.Parallel()
	s := mcp.NewServer(&mcp.Implementation{Name: "dump-fixture", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "dump", Description: "Dump the whole archive."},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			MiB int `json:"mib"`
		}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", in.MiB<<20)}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{JSONResponse: true})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	model := chattest.StartModel(t, providersim.Options{Flavor: providersim.DeepSeek})
	model.Sim.When(providersim.Match{LastRole: "user", LastUserContains: "huge"}).ToolCall("mcp__dump__dump", map[string]any{"mib": 40})
	model.Sim.When(providersim.Match{LastRole: "user", LastUserContains: "small"}).ToolCall("mcp__dump__dump", map[string]any{"mib": 1})
	model.Sim.When(providersim.Match{LastRole: "tool"}).Text("Done.")
	conn := startWithMCP(t, model, map[string]any{"acme": []any{map[string]any{"name": "dump", "url": srv.URL}}},
		map[string]string{"ORCHESTRATOR_MCP_CONNECT_TIMEOUT": "5s"})

	_, events := turn(t, conn, "acme", "Dump the huge archive")
	res, _ := results(events)
	if r := res["mcp__dump__dump"]; r == nil || !r.GetIsError() || !strings.Contains(r.GetResult(), "larger than 16 MiB") {
		t.Errorf("a 40 MiB answer: %.300v", r)
	}
	_, events = turn(t, conn, "acme", "Dump the small archive")
	res, _ = results(events)
	if r := res["mcp__dump__dump"]; r == nil || r.GetIsError() {
		t.Errorf("a 1 MiB answer after it: %.300v", r)
	}
}
