package httpgateway_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
)

// The console is served without a key (it holds no data) under a policy
// that lets it load only its own files and call only this origin, and every
// API route its script calls exists in the OpenAPI document.
func TestConsole(t *testing.T) {
	t.Parallel()
	m := startMesh(t, httpgateway.Config{APIKeys: "k1=acme"}, fakes{})
	resp, body := do(t, "GET", m.url+"/console/", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(string(body), `<script src="console.js"`) {
		t.Fatalf("GET /console/: %d %q\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r, err := client.Get(m.url + "/console")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusMovedPermanently || r.Header.Get("Location") != "/console/" {
		t.Errorf("GET /console: %d to %q", r.StatusCode, r.Header.Get("Location"))
	}
	// Every script the page loads is served as JavaScript.
	var script []byte
	srcs := regexp.MustCompile(`<script src="([^"]+)"`).FindAllStringSubmatch(string(body), -1)
	for _, src := range srcs {
		resp, js := do(t, "GET", m.url+"/console/"+src[1], "", nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "javascript") {
			t.Fatalf("%s: %d %q", src[1], resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		script = append(append(script, js...), '\n')
	}
	if len(srcs) < 4 {
		t.Fatalf("the page loads %d scripts; want format.js, console.js, sql.js and intake.js at least", len(srcs))
	}
	if resp, _ := do(t, "GET", m.url+"/v1/models", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the API itself answered %d without a key", resp.StatusCode)
	}

	_, body = do(t, "GET", m.url+"/openapi.json", "", nil)
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	// Routes as the scripts write them: a path start ("/v1/jobs/") or a
	// segment after an id ("/messages:stream", ":watch"). Each must begin
	// or end a documented path, with its {params}, or be one the gateway
	// serves itself, outside the OpenAPI document (the multipart upload).
	param := regexp.MustCompile(`\{[^}]+\}`)
	var paths []string
	for p := range doc.Paths {
		paths = append(paths, param.ReplaceAllString(p, "ID"))
	}
	literal := regexp.MustCompile(`"((?:/v1/|/agents/)[^"]*|/[a-z]+(?::[a-zA-Z]+)?|:[a-zA-Z]+)"`)
	found := 0
	for _, m := range literal.FindAllStringSubmatch(string(script), -1) {
		lit := m[1]
		if lit == "/healthz" || lit == "/v1/documents:upload" {
			continue
		}
		ok := false
		for _, p := range paths {
			if strings.HasPrefix(p, lit) || strings.HasSuffix(p, lit) {
				ok = true
				break
			}
		}
		if !ok {
			t.Errorf("the console calls %q, which no documented route has", lit)
		}
		found++
	}
	if found < 10 {
		t.Errorf("found only %d route literals in the console's scripts", found)
	}
}
