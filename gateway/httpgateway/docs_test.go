package httpgateway_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	"github.com/agentmesh/agentmesh/gateway/openapi"
)

// The API reference at /docs/ is served without a key, under the
// console's policy, and its page loads only its own files: no other
// origin is named anywhere in it, so it works with no network.
func TestAPIDocsPage(t *testing.T) {
	t.Parallel()
	m := startMesh(t, httpgateway.Config{APIKeys: "k1=acme"}, fakes{})
	resp, body := do(t, "GET", m.url+"/docs/", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /docs/: %d %q\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r, err := client.Get(m.url + "/docs")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusMovedPermanently || r.Header.Get("Location") != "/docs/" {
		t.Errorf("GET /docs: %d to %q", r.StatusCode, r.Header.Get("Location"))
	}

	// Every asset the page names is a local file served from /docs/, or a
	// route of this gateway.
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(string(body), -1)
	if len(refs) < 2 {
		t.Fatalf("the page names %d assets:\n%s", len(refs), body)
	}
	for _, ref := range refs {
		u := ref[1]
		switch {
		case strings.Contains(u, "//") || strings.Contains(u, ":"):
			t.Errorf("the page names another origin: %q", u)
		case strings.HasPrefix(u, "/"):
			if u != "/openapi.json" && u != "/console/" {
				t.Errorf("the page names %q, not a file of its own", u)
			}
		default:
			resp, _ := do(t, "GET", m.url+"/docs/"+u, "", nil)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s: HTTP %d", u, resp.StatusCode)
			}
		}
	}
	resp, js := do(t, "GET", m.url+"/docs/docs.js", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "javascript") || !bytes.Contains(js, []byte(`fetch("/openapi.json"`)) {
		t.Fatalf("docs.js: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// No asset reaches the network: no URL with a scheme or host in any
	// of them (the page's script fetches only /openapi.json).
	absolute := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	err = filepath.WalkDir("apidocs", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if loc := absolute.Find(b); loc != nil {
			t.Errorf("%s names another origin: %q", path, loc)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// docsRunner renders the OpenAPI document on stdin with apidocs/docs.js in
// node and prints the result.
const docsRunner = `
const fs = require("fs"), vm = require("vm");
const ctx = {};
vm.runInNewContext(fs.readFileSync(process.argv[1], "utf8"), ctx);
process.stdout.write(JSON.stringify(ctx.renderDocs(JSON.parse(fs.readFileSync(0, "utf8")))));
`

// renderDocs runs docs.js's renderer in node over doc.
func renderDocs(t *testing.T, node string, doc []byte) (nav, main string) {
	t.Helper()
	cmd := exec.Command(node, "-e", docsRunner, filepath.Join("apidocs", "docs.js"))
	cmd.Stdin = bytes.NewReader(doc)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	var r struct{ Nav, Main string }
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("renderer output: %v", err)
	}
	return r.Nav, r.Main
}

// The reference page, rendered in node from the gateway's own OpenAPI
// document, has one entry per route of the document (method and path, in
// the navigation and the body), with its parameters and its request and
// response fields; text from the document is escaped.
func TestAPIDocsRenderEveryRoute(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node not found, and CI is set: .ci/run installs nodejs")
		}
		t.Skip("node not found: install nodejs (Debian package) to check the API reference page")
	}
	nav, main := renderDocs(t, node, openapi.Spec)

	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(openapi.Spec, &doc); err != nil {
		t.Fatal(err)
	}
	routes := 0
	for path, ops := range doc.Paths {
		for method, op := range ops {
			routes++
			route := `data-route="` + strings.ToUpper(method) + " " + htmlEscape(path) + `"`
			if n := strings.Count(main, route); n != 1 {
				t.Errorf("%s %s: %d articles, want 1", method, path, n)
			}
			if !strings.Contains(nav, route) || !strings.Contains(nav, `href="#op-`+op.OperationID+`"`) || !strings.Contains(main, `id="op-`+op.OperationID+`"`) {
				t.Errorf("%s %s: not linked from the navigation", method, path)
			}
		}
	}
	if articles := strings.Count(main, `<article class="op"`); articles != routes || routes < 40 {
		t.Errorf("%d articles for %d routes", articles, routes)
	}

	// One route in detail: its query parameters, and its response's
	// fields with the nested message's fields.
	usage := article(t, main, "ModelService_GetUsage")
	for _, want := range []string{"<code>resolution</code></td><td>query", "USAGE_RESOLUTION_HOUR", "<code>tenantId</code>",
		"Response 200", "v1GetUsageResponse", "<code>points</code>", "array of v1UsagePoint", "<code>promptTokens</code>"} {
		if !strings.Contains(usage, want) {
			t.Errorf("GET /v1/usage lacks %q:\n%s", want, usage)
		}
	}
	// A request body, with its required fields.
	chat := article(t, main, "ModelService_Chat")
	for _, want := range []string{"Request body", "v1ChatRequest", "<code>messages</code>", "array of v1Message", "v1Message fields", "Response 200", "v1ChatResponse"} {
		if !strings.Contains(chat, want) {
			t.Errorf("POST /v1/models:chat lacks %q", want)
		}
	}

	// Text from the document is text, not markup.
	hostile := `{"paths": {"/v1/x/{id}": {"get": {"operationId": "S_X", "tags": ["S"], "summary": "<img src=x onerror=alert(1)>",
	  "parameters": [{"name": "id\"><script>", "in": "path", "required": true, "type": "string"}],
	  "responses": {"200": {"schema": {"$ref": "#/definitions/Loop"}}}}}},
	  "definitions": {"Loop": {"type": "object", "properties": {"next": {"$ref": "#/definitions/Loop"}, "<b>": {"type": "string"}}}}}`
	_, out := renderDocs(t, node, []byte(hostile))
	if strings.Contains(out, "<img") || strings.Contains(out, "<script") || strings.Contains(out, "<b>") || !strings.Contains(out, "&lt;img src=x") {
		t.Errorf("document text rendered as markup:\n%s", out)
	}
	if strings.Count(out, "Loop fields") > 1 {
		t.Errorf("a recursive schema was expanded more than once:\n%s", out)
	}
}

// article is the HTML of the operation operationID.
func article(t *testing.T, main, operationID string) string {
	t.Helper()
	i := strings.Index(main, `id="op-`+operationID+`"`)
	if i < 0 {
		t.Fatalf("no article for %s", operationID)
	}
	end := strings.Index(main[i:], "</article>")
	return main[i : i+end]
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;").Replace(s)
}
