package orchestrator_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// fixtureEnv makes the test binary an MCP server instead of running tests:
// the orchestrator under test starts it as a stdio server, a real process
// speaking the protocol through the SDK, as any MCP server would.
const fixtureEnv = "AGENTMESH_TEST_MCP_SERVER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fixtureEnv); mode != "" {
		os.Exit(serveFixture(mode))
	}
	os.Exit(m.Run())
}

// serveFixture runs the stdio MCP server of mode:
//   - crm: the tools of crmServer;
//   - crash: writes to stderr and exits 3 before any handshake;
//   - hang: reads its input and never answers.
func serveFixture(mode string) int {
	switch mode {
	case "crm":
		if err := crmServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "crm:", err)
			return 1
		}
		return 0
	case "crash":
		// More than the 2 KiB tail kept, so that it starts inside a
		// character, and a line in Latin-1: what is reported is UTF-8.
		fmt.Fprintln(os.Stderr, strings.Repeat("é", 1500))
		fmt.Fprintln(os.Stderr, "crm: Lizenz f\xfcr acme abgelaufen")
		fmt.Fprintln(os.Stderr, "crm: licence expired on 2026-01-01")
		return 3
	case "hang":
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown fixture mode", mode)
	return 2
}

// customerOut is lookup_customer's structured result.
type customerOut struct {
	CustomerID  string `json:"customer_id"`
	Name        string `json:"name"`
	Plan        string `json:"plan"`
	OpenTickets int    `json:"open_tickets"`
	// TokenSeen is the CRM_TOKEN the server was started with, so a test
	// sees the secret reached it (a test token, not a real secret).
	TokenSeen string `json:"token_seen"`
	// IdempotencyKey is the key the orchestrator sent in _meta.
	IdempotencyKey string `json:"idempotency_key"`
}

type customerIn struct {
	CustomerID string `json:"customer_id" jsonschema:"customer id, e.g. C-42"`
}

// crmServer is a small CRM: lookup_customer (structured), customer.notes
// (text; its name is not a valid function name as it stands), wait (runs
// until cancelled) and refuse (a tool error).
func crmServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "crm-fixture", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "lookup_customer", Description: "Look up a customer's account in the CRM."},
		func(_ context.Context, req *mcp.CallToolRequest, in customerIn) (*mcp.CallToolResult, customerOut, error) {
			if in.CustomerID != "C-42" {
				return nil, customerOut{}, fmt.Errorf("no customer %q", in.CustomerID)
			}
			key, _ := req.Params.Meta["agentmesh/idempotency_key"].(string)
			return nil, customerOut{CustomerID: "C-42", Name: "Acme Pty Ltd", Plan: "gold", OpenTickets: 3,
				TokenSeen: os.Getenv("CRM_TOKEN"), IdempotencyKey: key}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "customer.notes", Description: "Read the account manager's notes on a customer."},
		func(context.Context, *mcp.CallToolRequest, customerIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Prefers e-mail; renewal due in March."}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "wait", Description: "Wait for the CRM's nightly export (takes hours)."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	mcp.AddTool(s, &mcp.Tool{Name: "refuse", Description: "Export every customer."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the CRM refused: export quota exceeded"}}}, nil, nil
		})
	return s
}

// startWiki serves a streamable HTTP MCP server with one tool,
// search_wiki, that answers only requests carrying Authorization: Bearer
// token (others get 401, as a real server behind auth does).
func startWiki(t *testing.T, token string) string {
	t.Helper()
	url, _ := startWikiServer(t, token)
	return url
}

// startWikiServer is startWiki, returning the server too, so a test can
// change its tools while clients are connected.
func startWikiServer(t *testing.T, token string) (string, *mcp.Server) {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "wiki-fixture", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "search_wiki", Description: "Search the team wiki."},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			Query string `json:"query"`
		}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Runbook: restart the ingest worker (" + in.Query + ")"}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp", s
}
