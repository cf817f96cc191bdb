package mcptools

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestConfigRejected: a configuration that cannot work stops the start
// with a message naming the variable and the place; one that only refers to
// a secret that is missing does not (that is the server's failure, later).
func TestConfigRejected(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, json, want string
	}{
		{"not JSON", `{"acme": [`, "ORCHESTRATOR_MCP_SERVERS"},
		{"list at the top", `[{"name": "crm", "command": "x"}]`, "want {"},
		{"bad tenant", `{"a.b": [{"name": "crm", "command": "x"}]}`, `tenant "a.b"`},
		{"no name", `{"acme": [{"command": "x"}]}`, "server 1"},
		{"name with __", `{"acme": [{"name": "a__b", "command": "x"}]}`, `without "__"`},
		{"name too long", `{"acme": [{"name": "` + strings.Repeat("a", 25) + `", "command": "x"}]}`, "1-24"},
		{"upper-case name", `{"acme": [{"name": "CRM", "command": "x"}]}`, "a-z"},
		{"two names alike", `{"acme": [{"name": "crm", "command": "x"}, {"name": "crm", "url": "http://h/mcp"}]}`, `two servers are named "crm"`},
		{"command and url", `{"acme": [{"name": "crm", "command": "x", "url": "http://h/mcp"}]}`, "exactly one"},
		{"neither", `{"acme": [{"name": "crm"}]}`, "exactly one"},
		{"not http", `{"acme": [{"name": "crm", "url": "file:///etc/passwd"}]}`, "not an http(s) URL"},
		{"no host", `{"acme": [{"name": "crm", "url": "http:///mcp"}]}`, "not an http(s) URL"},
		{"headers on a command", `{"acme": [{"name": "crm", "command": "x", "headers": {"A": "b"}}]}`, `"headers" are for a "url" server`},
		{"env on a url", `{"acme": [{"name": "crm", "url": "http://h/mcp", "env": {"A": "b"}}]}`, `"args", "env" and "dir"`},
		{"bad header name", `{"acme": [{"name": "crm", "url": "http://h/mcp", "headers": {"Bad Name": "b"}}]}`, "not an HTTP field name"},
		{"env name with =", `{"acme": [{"name": "crm", "command": "x", "env": {"A=B": "b"}}]}`, "not a variable name"},
		{"reference to both", `{"acme": [{"name": "crm", "command": "x", "env": {"A": {"env": "X", "file": "/y"}}}]}`, "exactly one"},
		{"reference to nothing", `{"acme": [{"name": "crm", "command": "x", "env": {"A": {}}}]}`, "exactly one"},
		{"unknown reference", `{"acme": [{"name": "crm", "command": "x", "env": {"A": {"vault": "x"}}}]}`, "unknown field"},
		{"misspelt field", `{"acme": [{"name": "crm", "comand": "x"}]}`, "unknown field"},
		{"trailing data", `{"acme": []} {}`, "trailing data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Config{Servers: tc.json}, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "ORCHESTRATOR_MCP_SERVERS") {
				t.Errorf("New(%s) = %v, want an error naming ORCHESTRATOR_MCP_SERVERS and saying %q", tc.json, err, tc.want)
			}
		})
	}
	file := filepath.Join(t.TempDir(), "servers.json")
	if err := os.WriteFile(file, []byte(`{"acme": [{"name": "crm", "command": "/x", "env": {"T": {"env": "NEVER_SET"}}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{ServersFile: file}, Options{})
	if err != nil || !m.Configured() {
		t.Fatalf("New from ORCHESTRATOR_MCP_SERVERS_FILE with a missing secret = %v, want it accepted", err)
	}
	m.Close()
	if _, err := New(Config{Servers: `{}`, ServersFile: file}, Options{}); err == nil || !strings.Contains(err.Error(), "both set") {
		t.Errorf("both variables set: %v", err)
	}
}

// TestValueResolve: literals are themselves; references read the variable
// or the file (without its trailing line break) when the session opens.
func TestValueResolve(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("s3cret\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TOKEN": "from-env", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, tc := range []struct{ json, want, err string }{
		{`"plain"`, "plain", ""},
		{`{"env": "TOKEN"}`, "from-env", ""},
		{`{"env": "EMPTY"}`, "", ""},
		{`{"env": "MISSING"}`, "", "MISSING is not set"},
		{`{"file": "` + file + `"}`, "s3cret", ""},
		{`{"file": "` + file + `.missing"}`, "", "no such file"},
	} {
		var v Value
		if err := json.Unmarshal([]byte(tc.json), &v); err != nil {
			t.Fatalf("%s: %v", tc.json, err)
		}
		got, err := v.resolve(lookup)
		if got != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s resolves to %q, %v; want %q, %q", tc.json, got, err, tc.want, tc.err)
		}
	}
}

// TestNamespacedNames: tool names become valid function names under the
// server's prefix; those too long are skipped and reported, as is a second
// tool whose name reads like the first's.
func TestNamespacedNames(t *testing.T) {
	t.Parallel()
	s := &server{spec: serverSpec{Name: "crm"}}
	s.setToolsLocked([]*mcp.Tool{
		{Name: "lookup", InputSchema: map[string]any{"type": "object"}},
		{Name: "customer.notes", InputSchema: map[string]any{"type": "object"}},
		{Name: "customer/notes", InputSchema: map[string]any{"type": "object"}},
		{Name: "ünïcode tool", InputSchema: map[string]any{"type": "object"}},
		{Name: strings.Repeat("x", 60), InputSchema: map[string]any{"type": "object"}},
	})
	var names []string
	for _, tl := range s.tools {
		names = append(names, tl.Name+"="+s.remote[tl.Name])
	}
	if got := strings.Join(names, " "); got != "mcp__crm__lookup=lookup mcp__crm__customer_notes=customer.notes mcp__crm___n_code_tool=ünïcode tool" {
		t.Errorf("names: %s", got)
	}
	if len(s.skipped) != 2 || !strings.Contains(s.skipped[0], "customer/notes") || !strings.Contains(s.skipped[1], "longer than 64") {
		t.Errorf("skipped: %q", s.skipped)
	}
}

// TestResultConversion: what the model reads of a result, and what a tool
// job records as data.
func TestResultConversion(t *testing.T) {
	t.Parallel()
	text := func(s ...string) []mcp.Content {
		var out []mcp.Content
		for _, x := range s {
			out = append(out, &mcp.TextContent{Text: x})
		}
		return out
	}
	for _, tc := range []struct {
		name           string
		res            *mcp.CallToolResult
		wantText, data string
	}{
		{"structured", &mcp.CallToolResult{Content: text(`{"a": 1}`), StructuredContent: map[string]any{"a": 1}}, `{"a": 1}`, `{"a":1}`},
		{"structured only", &mcp.CallToolResult{StructuredContent: []any{1, 2}}, `[1,2]`, `[1,2]`},
		{"JSON text", &mcp.CallToolResult{Content: text("[ {\"x\": true} ]")}, "[ {\"x\": true} ]", `[{"x":true}]`},
		{"plain text", &mcp.CallToolResult{Content: text("two", "parts")}, "two\n\nparts", `"two\n\nparts"`},
		{"a number is text", &mcp.CallToolResult{Content: text("42")}, "42", `"42"`},
		{"image", &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{MIMEType: "image/png", Data: []byte("abc")}}}, "[image image/png, 3 bytes]", `"[image image/png, 3 bytes]"`},
		{"resource link", &mcp.CallToolResult{Content: []mcp.Content{&mcp.ResourceLink{Name: "r", URI: "file:///r"}}}, "[resource r file:///r]", `"[resource r file:///r]"`},
		{"nothing", &mcp.CallToolResult{}, "", ``},
	} {
		if got := resultText(tc.res); got != tc.wantText {
			t.Errorf("%s: text %q, want %q", tc.name, got, tc.wantText)
		}
		data, err := resultData(tc.res)
		if err != nil || string(data) != tc.data {
			t.Errorf("%s: data %s, %v, want %s", tc.name, data, err, tc.data)
		}
	}
}
