package up

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/cli"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// Keys of two projects of one tenant, for the MCP tests.
const (
	mcpAlphaKey = "mcp-alpha-key-0123456789"
	mcpBetaKey  = "mcp-beta-key-0123456789"
	mcpOpsKey   = "mcp-operator-key-0123456789"
)

// keyTransport sends an API key with every request, as an MCP client
// configured with a header does.
type keyTransport struct{ key string }

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if k.key != "" {
		r.Header.Set("Authorization", "Bearer "+k.key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// mcpClient connects the SDK's client to the gateway's /mcp with key.
func mcpClient(ctx context.Context, gw, key string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "agentmesh-test", Version: "v1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw + "/mcp", HTTPClient: &http.Client{Transport: keyTransport{key}}, MaxRetries: -1}, nil)
}

// callTool calls name and returns its structured result, or the error
// text of a failed call.
func callTool(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) (map[string]any, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		var msg []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				msg = append(msg, tc.Text)
			}
		}
		return nil, strings.Join(msg, "\n")
	}
	b, _ := json.Marshal(res.StructuredContent)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: structured content %s: %v", name, b, err)
	}
	return out, ""
}

// hitIDs returns the document ids of a search_documents result.
func hitIDs(out map[string]any) []string {
	var ids []string
	hits, _ := out["hits"].([]any)
	for _, h := range hits {
		if m, ok := h.(map[string]any); ok {
			ids = append(ids, m["document_id"].(string))
		}
	}
	return ids
}

// TestMCPServer drives the mesh as MCP clients do, with the SDK's client:
// over the gateway's streamable HTTP endpoint with API keys of two projects
// (and without one), and over `agentmesh mcp` on stdio. It lists the tools,
// searches a document, reads its extracts, submits an analysis and reads
// its job, and runs a read-only SQL job through its approval step.
func TestMCPServer(t *testing.T) {
	gw, _, _ := startMeshWith(t, t.TempDir(), map[string]string{
		"MODELGATEWAY_PROVIDER": "sim",
		"GATEWAY_API_KEYS":      mcpAlphaKey + "=acme:alpha@alpha-user," + mcpBetaKey + "=acme:beta@beta-user," + mcpOpsKey + "=*@ops",
	})
	waitServing(t, gw)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Refused before MCP: no key, a wrong key.
	for _, key := range []string{"", "not-a-key"} {
		if s, err := mcpClient(ctx, gw, key); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
			if s != nil {
				s.Close()
			}
			t.Errorf("connect with key %q: %v, want Unauthorized (401)", key, err)
		}
	}

	alpha, err := mcpClient(ctx, gw, mcpAlphaKey)
	if err != nil {
		t.Fatalf("connect with alpha's key: %v", err)
	}
	defer alpha.Close()
	beta, err := mcpClient(ctx, gw, mcpBetaKey)
	if err != nil {
		t.Fatalf("connect with beta's key: %v", err)
	}
	defer beta.Close()

	// What is not a JSON-RPC request is answered with JSON-RPC's error
	// object and the request's id (the SDK answered plain text).
	for _, tc := range []struct {
		body string
		code float64
		id   any
	}{
		{"this is not json", -32700, nil},
		{`{"id":9,"method":"tools/list"}`, -32600, float64(9)},
		{`[1,2]`, -32600, nil},
		{`{"jsonrpc":"2.0","id":3,"method":"foo/bar"}`, -32601, float64(3)},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw+"/mcp", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := (&http.Client{Transport: keyTransport{mcpAlphaKey}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			JSONRPC string `json:"jsonrpc"`
			ID      any    `json:"id"`
			Error   struct {
				Code    float64 `json:"code"`
				Message string  `json:"message"`
			} `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusBadRequest || got.JSONRPC != "2.0" || got.Error.Code != tc.code || got.ID != tc.id || got.Error.Message == "" {
			t.Errorf("POST /mcp %s: %d %+v (%v); want 400 and JSON-RPC error %v with id %v", tc.body, resp.StatusCode, got, err, tc.code, tc.id)
		}
	}

	// An operator key names its tenant in each REST request; a tool call
	// has nowhere to name one, and says so.
	ops, err := mcpClient(ctx, gw, mcpOpsKey)
	if err != nil {
		t.Fatalf("connect with the operator key: %v", err)
	}
	defer ops.Close()
	if _, msg := callTool(t, ops, "search_documents", map[string]any{"query": "zebra"}); !strings.Contains(msg, "operator key") {
		t.Errorf("search_documents with the operator key: %q, want an error saying an operator key acts in no one tenant", msg)
	}

	var names []string
	for tool, err := range alpha.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("list tools: %v", err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	want := []string{"get_document_extracts", "get_job", "search_documents", "sql_list_connections", "sql_prepare_query", "sql_run_confirmed", "submit_analysis"}
	if !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}

	// A document in alpha, stored through the REST API with alpha's key.
	req, _ := http.NewRequest("POST", gw+"/v1/documents", strings.NewReader(`{"sourceType":"SOURCE_TYPE_WIKI","title":"Zebra runbook","rawContent":"The zebra runbook says: restart the ingest worker when the queue stalls."}`))
	req.Header.Set("X-API-Key", mcpAlphaKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ Document struct{ ID string } }
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if json.Unmarshal(body, &created); resp.StatusCode != http.StatusOK || created.Document.ID == "" {
		t.Fatalf("ingest: %d %s", resp.StatusCode, body)
	}
	doc := created.Document.ID
	testkit.Eventually(t, 30*time.Second, func() bool {
		out, _ := callTool(t, alpha, "search_documents", map[string]any{"query": "zebra runbook ingest worker"})
		return slices.Contains(hitIDs(out), doc)
	}, "alpha's search to find the document")
	if out, errText := callTool(t, alpha, "get_document_extracts", map[string]any{"document_id": doc}); errText != "" || out["extracts"] == nil {
		t.Errorf("alpha's extracts of its document: %v %s", out, errText)
	}
	// beta, a project of the same tenant, neither finds nor reads it.
	if out, errText := callTool(t, beta, "search_documents", map[string]any{"query": "zebra runbook ingest worker"}); errText != "" || slices.Contains(hitIDs(out), doc) {
		t.Errorf("beta's search: %v %s, want no alpha document", out, errText)
	}
	if _, errText := callTool(t, beta, "get_document_extracts", map[string]any{"document_id": doc}); !strings.Contains(errText, "NotFound") {
		t.Errorf("beta reading alpha's document: %q, want NotFound", errText)
	}
	if _, errText := callTool(t, alpha, "search_documents", map[string]any{}); !strings.Contains(errText, "query") {
		t.Errorf("search without a query: %q, want an error naming query", errText)
	}

	// An analysis, then its job.
	sub, errText := callTool(t, alpha, "submit_analysis", map[string]any{"query": "Analyse BHP"})
	if errText != "" || sub["job_id"] == "" {
		t.Fatalf("submit_analysis: %v %s", sub, errText)
	}
	job, errText := callTool(t, alpha, "get_job", map[string]any{"job_id": sub["job_id"]})
	if j, _ := job["job"].(map[string]any); errText != "" || j["id"] != sub["job_id"] || j["title"] != "Analyse BHP" {
		t.Errorf("get_job: %v %s", job, errText)
	}
	if _, errText := callTool(t, beta, "get_job", map[string]any{"job_id": sub["job_id"]}); !strings.Contains(errText, "NotFound") {
		t.Errorf("beta reading alpha's job: %q, want NotFound", errText)
	}

	// SQL: nothing runs before the approval call, which must name the SQL.
	conns, errText := callTool(t, alpha, "sql_list_connections", nil)
	if errText != "" || !strings.Contains(mustJSON(conns), `"name":"sample"`) {
		t.Fatalf("sql_list_connections: %v %s", conns, errText)
	}
	count := func() float64 {
		t.Helper()
		p, errText := callTool(t, alpha, "sql_prepare_query", map[string]any{"connection": "sample", "sql": "SELECT COUNT(*) AS n FROM customers"})
		if errText != "" {
			t.Fatalf("prepare count: %s", errText)
		}
		r, errText := callTool(t, alpha, "sql_run_confirmed", map[string]any{"session_id": p["session_id"], "sql": p["sql_to_confirm"]})
		if errText != "" {
			t.Fatalf("run count: %s", errText)
		}
		return r["rows"].([]any)[0].([]any)[0].(float64)
	}
	before := count()
	for _, write := range []string{"DELETE FROM customers", "UPDATE customers SET name = 'x'", "SELECT 1; DELETE FROM customers", "WITH d AS (DELETE FROM customers RETURNING *) SELECT * FROM d"} {
		if p, errText := callTool(t, alpha, "sql_prepare_query", map[string]any{"connection": "sample", "sql": write}); !strings.Contains(errText, "no SQL to run") {
			t.Errorf("prepare %q: %v %q, want it refused", write, p, errText)
		}
	}
	if _, errText := callTool(t, alpha, "sql_prepare_query", map[string]any{"connection": "sample", "sql": "SELECT '" + strings.Repeat("x", 70000) + "'"}); !strings.Contains(errText, "sql is 70009 bytes; at most 65536") {
		t.Errorf("prepare of 70 KB of SQL: %q, want it refused naming sql", errText)
	}
	prep, errText := callTool(t, alpha, "sql_prepare_query", map[string]any{"connection": "sample", "sql": "SELECT name FROM customers ORDER BY customer_id LIMIT 2"})
	if errText != "" || prep["sql_to_confirm"] == "" {
		t.Fatalf("prepare: %v %s", prep, errText)
	}
	if _, errText := callTool(t, alpha, "sql_run_confirmed", map[string]any{"session_id": prep["session_id"], "sql": "SELECT name, email FROM customers"}); !strings.Contains(errText, "differs") {
		t.Errorf("confirming other SQL: %q, want it refused", errText)
	}
	if _, errText := callTool(t, beta, "sql_run_confirmed", map[string]any{"session_id": prep["session_id"], "sql": prep["sql_to_confirm"]}); !strings.Contains(errText, "NotFound") {
		t.Errorf("beta confirming alpha's session: %q, want NotFound", errText)
	}
	rows, errText := callTool(t, alpha, "sql_run_confirmed", map[string]any{"session_id": prep["session_id"], "sql": prep["sql_to_confirm"]})
	if errText != "" || rows["row_count"] != float64(2) || mustJSON(rows["columns"]) != `["name"]` {
		t.Errorf("run confirmed: %v %s", rows, errText)
	}
	if _, errText := callTool(t, alpha, "sql_run_confirmed", map[string]any{"session_id": prep["session_id"], "sql": prep["sql_to_confirm"]}); !strings.Contains(errText, "no SQL waiting") {
		t.Errorf("confirming twice: %q, want nothing waiting", errText)
	}
	if after := count(); after != before {
		t.Errorf("customers: %v before the refused writes, %v after", before, after)
	}

	// `agentmesh mcp` on stdio, with the CLI's tenant and project.
	stdio := func(project string) *mcp.ClientSession {
		t.Helper()
		toServer, fromClient := io.Pipe()
		toClient, fromServer := io.Pipe()
		cfg := &cli.Config{OrchestratorAddr: lastAddrs["orchestrator"], IndexerAddr: lastAddrs["indexer"], SQLAgentAddr: lastAddrs["sqlagent"], Tenant: "acme", Project: project}
		done := make(chan error, 1)
		go func() { done <- cli.MCP(ctx, cfg, nil, toServer, fromServer) }()
		s, err := mcp.NewClient(&mcp.Implementation{Name: "agentmesh-test", Version: "v1"}, nil).Connect(ctx, &mcp.IOTransport{Reader: toClient, Writer: fromClient}, nil)
		if err != nil {
			t.Fatalf("connect to agentmesh mcp: %v", err)
		}
		t.Cleanup(func() {
			s.Close()
			if err := <-done; err != nil {
				t.Errorf("agentmesh mcp returned %v after the client closed", err)
			}
		})
		return s
	}
	if out, errText := callTool(t, stdio("alpha"), "search_documents", map[string]any{"query": "zebra runbook ingest worker"}); errText != "" || !slices.Contains(hitIDs(out), doc) {
		t.Errorf("stdio search as alpha: %v %s", out, errText)
	}
	if out, errText := callTool(t, stdio("beta"), "search_documents", map[string]any{"query": "zebra runbook ingest worker"}); errText != "" || slices.Contains(hitIDs(out), doc) {
		t.Errorf("stdio search as beta: %v %s, want no alpha document", out, errText)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
