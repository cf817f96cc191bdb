package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"sigs.k8s.io/yaml"

	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/cli"
	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/up"
	"github.com/agentmesh/agentmesh/libs/config"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// apiKey is the gateway key of the test mesh: the CLI's calls go through
// the gateway's authentication as a real install's would.
const apiKey = "cli-test-key-0123456789"

// Keys of a second tenant and of an operator (no tenant).
const (
	tenantBKey  = "cli-test-tenant-b-0123456789"
	operatorKey = "cli-test-operator-0123456789"
)

// testMesh is one `agentmesh up` on the provider simulator, shared by the
// tests of this package, started by the first test that needs it.
var testMesh struct {
	once   sync.Once
	gw     string
	addrs  map[string]string
	err    error
	cancel context.CancelFunc
	done   chan error
}

var (
	gatewayURL = regexp.MustCompile(`gateway\s+(http://localhost:\d+)`)
	grpcAddr   = regexp.MustCompile(`(\w+)\s+grpc://(\S+)`)
)

func TestMain(m *testing.M) {
	code := m.Run()
	if testMesh.cancel != nil {
		testMesh.cancel()
		select {
		case err := <-testMesh.done:
			if err != nil {
				fmt.Fprintln(os.Stderr, "agentmesh up:", err)
			}
		case <-time.After(30 * time.Second):
			fmt.Fprintln(os.Stderr, "agentmesh up did not stop within 30s")
		}
		os.RemoveAll(testMesh.addrs["dir"])
	}
	os.Exit(code)
}

// mesh returns the gateway URL of the shared mesh.
func mesh(t *testing.T) string {
	t.Helper()
	testMesh.once.Do(func() {
		dir, err := os.MkdirTemp("", "agentmesh-cli-test-")
		if err != nil {
			testMesh.err = err
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		testMesh.cancel, testMesh.done = cancel, make(chan error, 1)
		out := &testkit.Buffer{}
		env := config.Map(map[string]string{
			"AGENTMESH_DATA_DIR":       dir,
			"AGENTMESH_GRPC_BASE_PORT": "0",
			"HTTP_ADDR":                "127.0.0.1:0",
			"LOG_LEVEL":                "warn",
			"OLLAMA_HOST":              "http://127.0.0.1:1",
			"MODELGATEWAY_PROVIDER":    "sim",
			"GATEWAY_API_KEYS":         apiKey + "=default@cli-test," + tenantBKey + "=tenant-b@b," + operatorKey + "=*@ops",
		})
		go func() { testMesh.done <- up.Run(ctx, env, out) }()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(60 * time.Second)
		for !gatewayURL.MatchString(out.String()) {
			select {
			case err := <-testMesh.done:
				testMesh.err = fmt.Errorf("agentmesh up ended: %v\n%s", err, out)
				testMesh.cancel = nil
				return
			case <-deadline:
				testMesh.err = fmt.Errorf("agentmesh up printed no banner in 60s:\n%s", out)
				return
			case <-tick.C:
			}
		}
		testMesh.gw = gatewayURL.FindStringSubmatch(out.String())[1]
		testMesh.addrs = map[string]string{"dir": dir}
		for _, m := range grpcAddr.FindAllStringSubmatch(out.String(), -1) {
			testMesh.addrs[m[1]] = m[2]
		}
	})
	if testMesh.err != nil {
		t.Fatal(testMesh.err)
	}
	return testMesh.gw
}

// result is one CLI run.
type result struct {
	out, err string
	code     int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.code, r.out, r.err)
}

// gatewayConfig is the environment of a user who set AGENTMESH_URL and
// AGENTMESH_API_KEY, with a contexts file of the test's own.
func gatewayConfig(t *testing.T) cli.Config {
	return cli.Config{URL: mesh(t), APIKey: apiKey, ConfigFile: filepath.Join(t.TempDir(), "config.yaml")}
}

// run runs the CLI once with stdin in.
func run(t *testing.T, cfg cli.Config, in string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := cli.NewRoot(&cfg, cli.Streams{In: strings.NewReader(in), Out: &out, Err: &errOut})
	code := cli.Execute(ctx, root, args)
	return result{out: out.String(), err: errOut.String(), code: code}
}

// must runs the CLI and fails the test unless it exits 0.
func must(t *testing.T, cfg cli.Config, in string, args ...string) result {
	t.Helper()
	r := run(t, cfg, in, args...)
	if r.code != 0 {
		t.Fatalf("agentmesh %s: %s", strings.Join(args, " "), r)
	}
	return r
}

// jsonLines parses every line of s as a JSON object.
func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestChatStreamsTheAnswer: a chat turn through the gateway's SSE prints
// the simulated answer on stdout and the turn's summary on stderr; -o json
// prints each streamed event as a JSON object, the last the Completed one.
func TestChatStreamsTheAnswer(t *testing.T) {
	cfg := gatewayConfig(t)
	r := must(t, cfg, "", "chat", "hello from the CLI")
	if !strings.HasPrefix(r.out, "[simulated]") || !strings.Contains(r.out, "hello from the CLI") || !strings.Contains(r.err, "tokens") {
		t.Fatalf("chat:\n%s", r)
	}
	conv := regexp.MustCompile(`\[conversation (\S+) ·`).FindStringSubmatch(r.err)
	if conv == nil {
		t.Fatalf("no conversation id in:\n%s", r)
	}

	// The same conversation, continued as an interactive session on stdin.
	// /help is answered here, not sent.
	r = must(t, cfg, "first line\n\n/help\nsecond line\n/exit\n", "chat", "--conversation", conv[1])
	if strings.Count(r.out, "[simulated]") != 2 || !strings.Contains(r.out, "second line") || strings.Contains(r.out, "/help") ||
		!strings.Contains(r.err, "Each line is a message") {
		t.Fatalf("session:\n%s", r)
	}

	r = must(t, cfg, "", "chat", "hello again", "-o", "json")
	events := jsonLines(t, r.out)
	var text strings.Builder
	for _, e := range events {
		if c, ok := e["responseChunk"].(map[string]any); ok {
			text.WriteString(c["content"].(string))
		}
	}
	if _, ok := events[len(events)-1]["completed"]; !ok || !strings.HasPrefix(text.String(), "[simulated]") {
		t.Fatalf("chat -o json: answer %q, events:\n%s", text.String(), r.out)
	}
}

// TestJobsOfAnAnalysis: an analysis submitted, watched to its end with a
// progress line, then read back with get, tree and list in every format.
func TestJobsOfAnAnalysis(t *testing.T) {
	cfg := gatewayConfig(t)
	r := must(t, cfg, "", "jobs", "submit", "Analyse BHP", "--response-type", "generic_analysis", "-o", "json")
	var submitted struct{ Job struct{ ID string } }
	if err := json.Unmarshal([]byte(r.out), &submitted); err != nil || submitted.Job.ID == "" {
		t.Fatalf("submit -o json: %v\n%s", err, r)
	}
	id := submitted.Job.ID

	r = must(t, cfg, "", "jobs", "watch", id)
	if !strings.Contains(r.out, "complete") || !strings.Contains(r.out, `▼ Analysis: "Analyse BHP" [complete]`) || !strings.Contains(r.err, "jobs done") {
		t.Fatalf("watch:\n%s", r)
	}
	// A finished job's watch replays its events and ends at once.
	r = must(t, cfg, "", "jobs", "watch", id, "-o", "json")
	last := jsonLines(t, r.out)
	if ev, _ := last[len(last)-1]["event"].(map[string]any); ev == nil {
		t.Fatalf("watch -o json: %s", r)
	}
	// -o yaml: a YAML document an event (it printed JSON lines).
	r = must(t, cfg, "", "jobs", "watch", id, "-o", "yaml")
	if docs := strings.Split(r.out, "---\n"); len(docs) != len(last)+1 || !strings.Contains(docs[len(docs)-1], "event:\n") || strings.Contains(r.out, "{\"") {
		t.Fatalf("watch -o yaml: %d documents for %d events:\n%s", len(docs)-1, len(last), r.out)
	}

	r = must(t, cfg, "", "jobs", "get", id, "-o", "json")
	var got struct {
		Job struct {
			ID, Status string
			Children   []struct{ Type, Status string }
		}
	}
	if err := json.Unmarshal([]byte(r.out), &got); err != nil {
		t.Fatalf("get -o json: %v\n%s", err, r)
	}
	if got.Job.ID != id || got.Job.Status != "JOB_STATUS_COMPLETE" || len(got.Job.Children) < 3 {
		t.Fatalf("get -o json: %+v", got)
	}

	// A finished analysis can be neither cancelled nor retried: refused.
	for _, verb := range []string{"cancel", "retry"} {
		if r := run(t, cfg, "", "jobs", verb, id); r.code != cli.ExitRefused || !strings.Contains(r.err, id) {
			t.Errorf("jobs %s of a complete analysis: %s", verb, r)
		}
	}

	// The same read over direct gRPC (--grpc) gives the same job.
	direct := cli.Config{OrchestratorAddr: testMesh.addrs["orchestrator"], ConfigFile: cfg.ConfigFile}
	r = must(t, direct, "", "--grpc", "jobs", "get", id, "-o", "json")
	var viaGRPC struct{ Job struct{ ID, Status string } }
	if err := json.Unmarshal([]byte(r.out), &viaGRPC); err != nil || viaGRPC.Job.ID != id || viaGRPC.Job.Status != got.Job.Status {
		t.Fatalf("--grpc jobs get: %v\n%s", err, r)
	}

	r = must(t, cfg, "", "jobs", "tree", id)
	if !strings.HasPrefix(r.out, `▼ Analysis: "Analyse BHP"`) || !strings.Contains(r.out, "Synthesis") {
		t.Fatalf("tree:\n%s", r)
	}

	r = must(t, cfg, "", "jobs", "list", "--type", "analysis_request", "-o", "yaml")
	var listed struct {
		Jobs []struct{ ID, Type string }
	}
	if err := yaml.Unmarshal([]byte(r.out), &listed); err != nil {
		t.Fatalf("list -o yaml: %v\n%s", err, r)
	}
	found := false
	for _, j := range listed.Jobs {
		found = found || j.ID == id
		if j.Type != "JOB_TYPE_ANALYSIS_REQUEST" {
			t.Errorf("list --type analysis_request listed a %s", j.Type)
		}
	}
	if !found {
		t.Fatalf("list -o yaml lacks %s:\n%s", id, r.out)
	}
	r = must(t, cfg, "", "jobs", "list")
	if !strings.HasPrefix(r.out, "ID ") || !strings.Contains(r.out, id) {
		t.Fatalf("list:\n%s", r)
	}
}

// TestTablesShowControlCharactersAsEscapes: a title or text holding
// control or bidirectional formatting characters (stored through the REST
// API, which takes any text) is shown in a table with them as escapes, so
// that an uploader cannot write escape sequences to an operator's
// terminal; -o json keeps the text exactly.
func TestTablesShowControlCharactersAsEscapes(t *testing.T) {
	cfg := gatewayConfig(t)
	body := `{"title":"a\u0001b\u001b[31mRED\rX\u202egnp.txt","rawContent":"line one\r\nline\ttwo \u001b[2J","sourceType":"SOURCE_TYPE_WIKI"}`
	req, _ := http.NewRequest(http.MethodPost, cfg.URL+"/v1/documents", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ Document struct{ ID string } }
	err = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || created.Document.ID == "" {
		t.Fatalf("POST /v1/documents: %d %v", resp.StatusCode, err)
	}
	r := must(t, cfg, "", "docs", "get", created.Document.ID, "--content")
	if strings.ContainsAny(r.out, "\x01\x1b\r\u202e") || !strings.Contains(r.out, `a\x01b\x1b[31mRED\x0dX\u202egnp.txt`) ||
		!strings.Contains(r.out, "line one\nline") || !strings.Contains(r.out, `\x1b[2J`) {
		t.Fatalf("docs get --content:\n%q", r.out)
	}
	r = must(t, cfg, "", "docs", "list")
	if strings.ContainsAny(r.out, "\x01\x1b\r\u202e") || !strings.Contains(r.out, `a\x01b\x1b[31mRED`) {
		t.Fatalf("docs list:\n%q", r.out)
	}
	r = must(t, cfg, "", "docs", "get", created.Document.ID, "-o", "json")
	if !strings.Contains(r.out, `a\u0001b\u001b[31mRED\rX`+"\u202e"+`gnp.txt`) {
		t.Fatalf("docs get -o json:\n%s", r.out)
	}
}

// TestDocsIngestSearchDelete: a file ingested through the gateway is found
// by a search for its words, read back, and gone once deleted.
func TestDocsIngestSearchDelete(t *testing.T) {
	cfg := gatewayConfig(t)
	file := filepath.Join(t.TempDir(), "outage.txt")
	text := "The billing service went down because the quokka cache filled its disk.\n"
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	r := must(t, cfg, "", "docs", "ingest", file, "--type", "wiki", "-o", "json")
	var ingested struct {
		Files []struct{ DocumentID, Status string }
	}
	if err := json.Unmarshal([]byte(r.out), &ingested); err != nil || len(ingested.Files) != 1 || ingested.Files[0].DocumentID == "" {
		t.Fatalf("ingest -o json: %v\n%s", err, r)
	}
	r = must(t, cfg, "", "docs", "get", ingested.Files[0].DocumentID, "-o", "json")
	var got struct {
		Document struct{ ID, Title, SourceType string }
	}
	if err := json.Unmarshal([]byte(r.out), &got); err != nil {
		t.Fatalf("get -o json: %v\n%s", err, r)
	}
	doc := got.Document
	if doc.Title != "outage.txt" || doc.SourceType != "SOURCE_TYPE_WIKI" {
		t.Fatalf("ingested %+v", doc)
	}

	r = must(t, cfg, "", "docs", "search", "quokka cache", "-o", "json")
	var found struct{ Hits []struct{ DocumentID string } }
	if err := json.Unmarshal([]byte(r.out), &found); err != nil || len(found.Hits) == 0 || found.Hits[0].DocumentID != doc.ID {
		t.Fatalf("search: %v\n%s", err, r)
	}
	r = must(t, cfg, "", "docs", "search", "quokka cache")
	if !strings.Contains(r.out, doc.ID) || !strings.Contains(r.out, "quokka") {
		t.Fatalf("search table:\n%s", r)
	}
	// A chat turn lists the passages its initial search put in the model's
	// context.
	r = must(t, cfg, "", "chat", "why did the quokka cache fill its disk")
	if !regexp.MustCompile(`(?m)^  \[\d\] outage\.txt · The billing service went down`).MatchString(r.err) {
		t.Fatalf("chat does not list the retrieved passage:\n%s", r)
	}
	r = must(t, cfg, "", "docs", "get", doc.ID, "--content")
	if !strings.Contains(r.out, "quokka cache filled its disk") {
		t.Fatalf("get --content:\n%s", r)
	}
	must(t, cfg, "", "docs", "delete", doc.ID)
	if r := run(t, cfg, "", "docs", "get", doc.ID); r.code != cli.ExitNotFound {
		t.Fatalf("get after delete: %s", r)
	}
}

// TestDocsIngestFiles: real files of every kind the upload takes go in
// one command, each its own document; the summary names each file's
// content type, routing, chunks and status, and a file the gateway refuses
// (bytes that are not the image its name promises) fails the command with
// exit 1 without stopping the others.
func TestDocsIngestFiles(t *testing.T) {
	cfg := gatewayConfig(t)
	files := []string{"incident.eml", "ledger.log", "panel.png", "runbook.txt"}
	if pdfTools(t) {
		files = append(files, "capacity.pdf")
	}
	var args []string
	for _, f := range files {
		args = append(args, filepath.Join("testdata", "ingest", f))
	}
	fake := filepath.Join(t.TempDir(), "photo.png")
	if err := os.WriteFile(fake, []byte("not an image at all\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	r := run(t, cfg, "", append(append([]string{"docs", "ingest"}, args...), fake, "-o", "json")...)
	if r.code != cli.ExitFailure || !strings.Contains(r.err, fmt.Sprintf("1 of %d files failed", len(files)+1)) {
		t.Fatalf("want exit 1 naming one failed file: %s", r)
	}
	var summary struct {
		Files []struct {
			File, DocumentID, ContentType, Routing, Status string
			Chunks                                         int
			Errors                                         []string
		}
	}
	if err := json.Unmarshal([]byte(r.out), &summary); err != nil || len(summary.Files) != len(files)+1 {
		t.Fatalf("summary -o json: %v\n%s", err, r)
	}
	// A one-line text is typed by the model (on the simulator, its first
	// enum value), so only the rules-decided types are checked.
	wantType := map[string]string{"incident.eml": "email", "ledger.log": "log", "panel.png": "", "capacity.pdf": ""}
	for i, f := range summary.Files[:len(files)] {
		if filepath.Base(f.File) != files[i] || f.Status != "done" || f.DocumentID == "" || f.Routing == "" || f.Chunks == 0 || len(f.Errors) > 0 {
			t.Errorf("file %s: %+v, want done with a document, routing and chunks\n%s", files[i], f, r.err)
		}
		if w := wantType[files[i]]; w != "" && f.ContentType != w {
			t.Errorf("file %s: content type %q, want %q", files[i], f.ContentType, w)
		}
	}
	bad := summary.Files[len(files)]
	if bad.Status != "failed" || bad.DocumentID != "" || len(bad.Errors) != 1 || !strings.Contains(bad.Errors[0], "photo.png") || !strings.Contains(bad.Errors[0], "InvalidArgument") {
		t.Errorf("refused file: %+v", bad)
	}
	// Progress on stderr: each file sent, then the pipelines followed.
	for _, s := range []string{"sending " + args[0], fmt.Sprintf("%d/%d files sent", len(files)+1, len(files)+1), fmt.Sprintf("%d/%d pipelines finished", len(files), len(files))} {
		if !strings.Contains(r.err, s) {
			t.Errorf("progress lacks %q:\n%s", s, r.err)
		}
	}

	// The table: a row per file with its document; the same files again
	// are unchanged documents, all done, exit 0.
	r = must(t, cfg, "", append([]string{"docs", "ingest"}, args...)...)
	for i, f := range files {
		row := regexp.MustCompile(`(?m)^\S*` + regexp.QuoteMeta(f) + `\s+` + regexp.QuoteMeta(summary.Files[i].DocumentID) + `\s+\S+\s+\S+\s+[1-9]\d*\s+done\s+-$`)
		if !row.MatchString(r.out) {
			t.Errorf("table lacks a done row for %s:\n%s", f, r)
		}
	}
	if !strings.HasPrefix(r.out, "FILE ") {
		t.Errorf("table has no header:\n%s", r.out)
	}

	// A missing file ingests nothing: usage, before any upload; so does an
	// image over --grpc, which carries text only.
	if r := run(t, cfg, "", "docs", "ingest", args[0], "no-such-file.txt"); r.code != cli.ExitUsage || strings.Contains(r.err, "sending") {
		t.Errorf("missing file: %s", r)
	}
	direct := cli.Config{Transport: "grpc", IndexerAddr: testMesh.addrs["indexer"], ConfigFile: cfg.ConfigFile}
	if r := run(t, direct, "", "docs", "ingest", args[0], args[2]); r.code != cli.ExitUsage || strings.Contains(r.err, "sending") || !strings.Contains(r.err, "image/png") {
		t.Errorf("an image over --grpc: %s", r)
	}
}

// usagePoint is a point of `agentmesh usage -o json`.
type usagePoint struct {
	LogicalModel, Provider, TenantID      string
	Calls, PromptTokens, CompletionTokens string // int64 travels as a JSON string
}

// usage reads the usage as cfg's key sees it.
func usage(t *testing.T, cfg cli.Config, args ...string) []usagePoint {
	t.Helper()
	r := must(t, cfg, "", append([]string{"usage", "-o", "json"}, args...)...)
	var res struct{ Points []usagePoint }
	if err := json.Unmarshal([]byte(r.out), &res); err != nil {
		t.Fatalf("usage -o json: %v\n%s", err, r)
	}
	return res.Points
}

// tenantsOf maps each tenant of points to the logical models it used.
func tenantsOf(points []usagePoint) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, p := range points {
		if out[p.TenantID] == nil {
			out[p.TenantID] = map[string]bool{}
		}
		out[p.TenantID][p.LogicalModel] = true
	}
	return out
}

// TestUsagePerTenant: the model calls of two tenants' work — a chat turn
// answered while the request waits, and a document's intake run later from
// the work queue — are counted under each tenant; a tenant's key reads only
// its own usage and is refused another's (403, exit 5), an operator key
// reads both; the token metric carries the tenant.
func TestUsagePerTenant(t *testing.T) {
	cfgA := gatewayConfig(t)
	cfgB, cfgOps := cfgA, cfgA
	cfgB.APIKey, cfgOps.APIKey = tenantBKey, operatorKey

	must(t, cfgA, "", "chat", "hello from tenant a")
	must(t, cfgB, "", "chat", "hello from tenant b")
	must(t, cfgB, "", "docs", "ingest", filepath.Join("testdata", "ingest", "ledger.log"), filepath.Join("testdata", "ingest", "panel.png"))

	// The log is lifted to an analysis, whose planner runs from the
	// orchestrator's work queue; the image goes through vision, which
	// calls the model for the indexer: poll until both have.
	var b map[string]map[string]bool
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for b = tenantsOf(usage(t, cfgB)); !b["tenant-b"]["planner"] || !b["tenant-b"]["vision"]; b = tenantsOf(usage(t, cfgB)) {
		select {
		case <-deadline:
			t.Fatalf("tenant b's usage: %v, want only tenant-b, with chat, vision and the lifted analysis's planner; all: %v", b, tenantsOf(usage(t, cfgOps)))
		case <-tick.C:
		}
	}
	if len(b) != 1 || !b["tenant-b"]["chat"] {
		t.Fatalf("tenant b's usage: %v, want only tenant-b, with chat, vision and planner", b)
	}
	a := tenantsOf(usage(t, cfgA))
	if len(a) != 1 || !a["default"]["chat"] {
		t.Fatalf("tenant a's usage: %v, want only default, with chat", a)
	}
	all := tenantsOf(usage(t, cfgOps, "--resolution", "hour"))
	if !all["default"]["chat"] || !all["tenant-b"]["chat"] {
		t.Fatalf("the operator's usage: %v, want both tenants", all)
	}
	t.Logf("usage by tenant: %v", all)
	if only := tenantsOf(usage(t, cfgOps, "--of", "tenant-b")); len(only) != 1 || only["tenant-b"] == nil {
		t.Fatalf("the operator's usage of tenant-b: %v", only)
	}

	// Another tenant's usage is not the caller's to read: 403 (and exit 5
	// from the CLI, see TestExitCodes).
	if code, body := get(t, "/v1/usage?tenantId=tenant-b", apiKey); code != http.StatusForbidden {
		t.Fatalf("GET /v1/usage?tenantId=tenant-b with tenant a's key: HTTP %d, want 403: %s", code, body)
	}

	// The REST shape the console's usage panel reads.
	// "*" is how keys name an operator, not a tenant: every tenant's usage
	// is asked by naming none.
	if code, body := get(t, "/v1/usage?tenantId=*", operatorKey); code != http.StatusBadRequest || !strings.Contains(string(body), `"tenantId: `) {
		t.Fatalf("GET /v1/usage?tenantId=* with the operator key: HTTP %d, want 400 naming tenantId, as the request wrote it: %s", code, body)
	}
	code, raw := get(t, "/v1/usage?resolution=USAGE_RESOLUTION_HOUR", operatorKey)
	var shape struct {
		Resolution, StartTime, EndTime, BucketWidth string
		TenantLimit                                 int
		Points                                      []map[string]any
	}
	if err := json.Unmarshal(raw, &shape); err != nil || shape.Resolution != "USAGE_RESOLUTION_HOUR" || shape.BucketWidth != "3600s" || shape.TenantLimit != 100 || shape.StartTime == "" || len(shape.Points) == 0 {
		t.Fatalf("GET /v1/usage: HTTP %d %v: %s", code, err, raw)
	}
	for _, k := range []string{"startTime", "logicalModel", "provider", "tenantId", "calls", "promptTokens", "completionTokens"} {
		if _, ok := shape.Points[0][k]; !ok {
			t.Errorf("GET /v1/usage: a point lacks %q: %s", k, raw)
		}
	}

	// The token metric counts per tenant too.
	_, body := get(t, "/metrics", operatorKey)
	for _, tenant := range []string{"default", "tenant-b"} {
		if !regexp.MustCompile(`(?m)^agentmesh_modelgateway_tokens_total\{[^}]*logical_model="chat"[^}]*tenant="` + tenant + `"`).Match(body) {
			t.Errorf("/metrics has no chat tokens of tenant %s", tenant)
		}
	}
	// So do the lifted analysis's jobs (its planner ran: it started).
	if !regexp.MustCompile(`(?m)^agentmesh_orchestrator_job_transitions_total\{[^}]*to="running"[^}]*type="planning_call"[^}]*\} [1-9]`).Match(body) {
		t.Errorf("/metrics has no planning job that started:\n%s", regexp.MustCompile(`(?m)^agentmesh_orchestrator_job.*$`).FindAll(body, -1))
	}
}

// get reads path of the test mesh's gateway with key.
func get(t *testing.T, path, key string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", mesh(t)+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// pdfTools reports whether poppler-utils is there for the indexer's PDF
// reading; in CI (.ci/run installs it) its absence fails the test.
func pdfTools(t *testing.T) bool {
	t.Helper()
	for _, tool := range []string{"pdftotext", "pdftoppm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not found, and CI is set: .ci/run installs poppler-utils", tool)
			}
			t.Logf("%s not found: the PDF is left out (install poppler-utils)", tool)
			return false
		}
	}
	return true
}

// TestSQLRunsOnlyAfterTypedConfirmation: in an SQL session on the sample
// database a query runs only once "yes" is typed after it was shown; "no",
// or a one-word answer that could read as a yes, leave it unrun.
func TestSQLRunsOnlyAfterTypedConfirmation(t *testing.T) {
	cfg := gatewayConfig(t)
	const query = "SELECT 40 + 2 AS answer"
	ran := regexp.MustCompile(`(?m)^answer\s*\n42\s*$`)

	// Chosen, then not confirmed; "ok" is refused as an answer; the input
	// ends while the SQL waits: nothing ran, and the exit says the session
	// waits (7), as classify's does.
	r := run(t, cfg, "2\n"+query+"\n1\nno\nok\n", "sql", "--connection", "sample")
	if r.code != cli.ExitInterrupted || !strings.Contains(r.out, query) || !strings.Contains(r.err, "Not confirmed: nothing ran") || !strings.Contains(r.err, "Choose an option") ||
		!strings.Contains(r.err, "waits for confirmation; nothing ran") || ran.MatchString(r.out) {
		t.Fatalf("unconfirmed session:\n%s", r)
	}

	// Confirmed by typing yes after choosing "Run it", then named (the
	// default name, option 1).
	// /help is answered here and changes nothing.
	r = must(t, cfg, "/help\n2\n"+query+"\n1\nyes\n1\n/exit\n", "sql", "--connection", "sample")
	if !ran.MatchString(r.out) || !strings.Contains(r.err, `Type "yes" to go ahead`) || !strings.Contains(r.err, "Nothing runs until you confirm it") {
		t.Fatalf("confirmed session:\n%s", r)
	}

	// -o json: each reply one JSON object, the last holding the result.
	r = must(t, cfg, "user_sql\n"+query+"\nconfirm\nyes\nforty-two\n", "sql", "--connection", "sample", "-o", "json")
	replies := jsonLines(t, r.out)
	res, _ := replies[len(replies)-1]["result"].(map[string]any)
	if cols, _ := res["columns"].([]any); len(cols) != 1 || cols[0] != "answer" {
		t.Fatalf("sql -o json: %s", r)
	}

	// The two reads that ran are kept, newest first, a page at a time,
	// each with its SQL exactly as approved.
	r = must(t, cfg, "", "sql", "jobs")
	if lines := strings.Split(strings.TrimSpace(r.out), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") ||
		!strings.Contains(lines[1], "forty-two") || !strings.Contains(lines[1], "read_sql") || !strings.Contains(lines[1], "shown") ||
		!strings.Contains(lines[2], "query on sample") {
		t.Fatalf("sql jobs:\n%s", r)
	}
	r = must(t, cfg, "", "sql", "jobs", "--limit", "1")
	more := regexp.MustCompile(`\(more: --page-token (\S+)\)`).FindStringSubmatch(r.out)
	if !strings.Contains(r.out, "forty-two") || more == nil {
		t.Fatalf("sql jobs --limit 1:\n%s", r)
	}
	r = must(t, cfg, "", "sql", "jobs", "--limit", "1", "--page-token", more[1], "-o", "json")
	var page struct {
		Jobs []struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		} `json:"jobs"`
		Next string `json:"nextPageToken"`
	}
	if err := json.Unmarshal([]byte(r.out), &page); err != nil || len(page.Jobs) != 1 || page.Jobs[0].Name != "query on sample" || page.Next != "" {
		t.Fatalf("second page: %v\n%s", err, r)
	}
	r = must(t, cfg, "", "sql", "job", page.Jobs[0].ID)
	if !strings.Contains(r.out, "SQL:\n  "+query+"\n") || !regexp.MustCompile(`ROWS:\s+1\n`).MatchString(r.out) ||
		!regexp.MustCompile(`CONNECTION:\s+sample\n`).MatchString(r.out) {
		t.Fatalf("sql job:\n%s", r)
	}
	if r := run(t, cfg, "", "sql", "job", "no-such/1"); r.code != cli.ExitNotFound {
		t.Fatalf("sql job of no job: exit %d\n%s", r.code, r)
	}
}

// TestSQLConfirmationAfterAnotherClientChangedTheSQL: between the SQL the
// CLI showed and the "yes" typed for it, another client of the same key
// replaces the session's SQL: nothing runs, the CLI says why and shows
// the session as it is now (the other SQL, waiting for approval).
func TestSQLConfirmationAfterAnotherClientChangedTheSQL(t *testing.T) {
	cfg := gatewayConfig(t)
	const query, swapped = "SELECT 40 + 2 AS answer", "SELECT 'swapped' AS other"
	var errOut testkit.Buffer // read while the CLI writes it
	in := &scriptedInput{lines: []string{"2", query, "1", "yes", "/exit"}, before: map[int]func(){
		// Read when the CLI has shown the SQL and asked for "yes".
		3: func() {
			m := regexp.MustCompile(`SQL session (\S+)`).FindStringSubmatch(errOut.String())
			if m == nil {
				t.Errorf("no session id in %q", errOut.String())
				return
			}
			req, _ := http.NewRequest(http.MethodPost, cfg.URL+"/v1/sql/sessions/"+m[1]+":input", strings.NewReader(`{"text":"`+swapped+`"}`))
			req.Header.Set("Authorization", "Bearer "+apiKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("the other client's input: %v %v", resp, err)
				return
			}
			resp.Body.Close()
		},
	}}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := cli.Execute(ctx, cli.NewRoot(&cfg, cli.Streams{In: in, Out: &out, Err: &errOut}), []string{"sql", "--connection", "sample"})
	r := result{out: out.String(), err: errOut.String(), code: code}
	if code != 0 || !strings.Contains(r.err, "the session changed since version") || regexp.MustCompile(`(?m)^answer\s*\n42`).MatchString(r.out) ||
		!strings.Contains(r.out, "The session as it is now:\n\n"+swapped+"\n") {
		t.Fatalf("confirmation after the swap:\n%s", r)
	}
}

// scriptedInput gives one line per Read, calling before[i] first when the
// CLI asks for line i (the CLI reads one line ahead of the one it acts on).
type scriptedInput struct {
	lines  []string
	before map[int]func()
	i      int
}

func (s *scriptedInput) Read(p []byte) (int, error) {
	if s.i >= len(s.lines) {
		return 0, io.EOF
	}
	if f := s.before[s.i]; f != nil {
		f()
	}
	n := copy(p, s.lines[s.i]+"\n")
	s.i++
	return n, nil
}

// TestExitCodes: each class of failure has its code, and the messages say
// what to change.
func TestExitCodes(t *testing.T) {
	cfg := gatewayConfig(t)
	unreachable := cli.Config{URL: "http://127.0.0.1:1", ConfigFile: cfg.ConfigFile}
	wrongKey := cfg
	wrongKey.APIKey = "not-the-key-0123456789"
	direct := cli.Config{Transport: "grpc", OrchestratorAddr: "127.0.0.1:1", ConfigFile: cfg.ConfigFile}
	noKey := cfg
	noKey.APIKey = ""
	for _, tc := range []struct {
		name string
		cfg  cli.Config
		args []string
		code int
		says []string
	}{
		{"job not found", cfg, []string{"jobs", "get", "no-such-job"}, cli.ExitNotFound, []string{"no-such-job", "NotFound"}},
		{"watched job not found", cfg, []string{"jobs", "watch", "no-such-job"}, cli.ExitNotFound, []string{"no-such-job"}},
		{"document not found", cfg, []string{"docs", "get", "doc_0123456789abcdef01234567", "-o", "json"}, cli.ExitNotFound, nil},
		{"gateway unreachable", unreachable, []string{"jobs", "list"}, cli.ExitUnavailable, []string{"cannot reach the gateway at http://127.0.0.1:1", "AGENTMESH_URL"}},
		{"service unreachable over gRPC", direct, []string{"jobs", "list"}, cli.ExitUnavailable, []string{"cannot reach the orchestrator at 127.0.0.1:1", "ORCHESTRATOR_ADDR"}},
		{"wrong API key", wrongKey, []string{"models"}, cli.ExitDenied, []string{"invalid API key"}},
		{"no API key", noKey, []string{"models"}, cli.ExitDenied, []string{"missing API key", "--api-key, AGENTMESH_API_KEY"}},
		// classify's advice keeps the failure's class.
		{"classify: run not found", cfg, []string{"classify", "resume", "00000000-0000-0000-0000-000000000000"}, cli.ExitNotFound, []string{"classify: "}},
		{"classify: gateway unreachable", unreachable, []string{"classify", "go"}, cli.ExitUnavailable, []string{"cannot reach the gateway"}},
		{"classify: wrong API key", wrongKey, []string{"classify", "go"}, cli.ExitDenied, []string{"invalid API key"}},
		{"not allowed: another tenant's usage", cfg, []string{"usage", "--of", "tenant-b"}, cli.ExitDenied, []string{"tenant-b", "PermissionDenied"}},
		{"refused", cfg, []string{"jobs", "submit", strings.Repeat("x", 9000)}, cli.ExitRefused, []string{"query"}},
		{"unknown command", cfg, []string{"jobs", "explode"}, cli.ExitUsage, []string{`"explode"`, "agentmesh jobs --help"}},
		{"unknown flag", cfg, []string{"jobs", "list", "--colour"}, cli.ExitUsage, []string{"--colour"}},
		{"missing argument", cfg, []string{"jobs", "get"}, cli.ExitUsage, []string{"a job id"}},
		{"bad enum", cfg, []string{"jobs", "list", "--status", "sleeping"}, cli.ExitUsage, []string{"sleeping", "waiting_for_children"}},
		{"bad output", cfg, []string{"jobs", "list", "-o", "xml"}, cli.ExitUsage, []string{"xml"}},
		// Named as the flag, not as the service's pageSize (exit 6).
		{"page size out of range", cfg, []string{"jobs", "list", "--limit", "-1"}, cli.ExitUsage, []string{`"--limit"`, "from 1 to 500"}},
		{"search limit out of range", cfg, []string{"docs", "search", "x", "--limit", "1000"}, cli.ExitUsage, []string{`"--limit"`, "from 1 to 100"}},
		{"healthy", cfg, []string{"health"}, cli.ExitOK, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.cfg, "", tc.args...)
			if r.code != tc.code {
				t.Fatalf("agentmesh %s: want exit %d, got %s", strings.Join(tc.args, " "), tc.code, r)
			}
			for _, s := range tc.says {
				if !strings.Contains(r.err, s) {
					t.Errorf("stderr lacks %q:\n%s", s, r)
				}
			}
		})
	}
}

// TestOperatorKeyActsForTheNamedTenant: with an operator key (tenant *),
// the tenant named by --tenant is the one its requests act for (they
// must name one); a tenant's key naming another tenant is refused, and
// without --tenant the key decides, as before.
func TestOperatorKeyActsForTheNamedTenant(t *testing.T) {
	cfg := gatewayConfig(t)
	ops := cfg
	ops.APIKey = operatorKey
	submitted := must(t, cfg, "", "jobs", "submit", "What moved the ledger?", "-o", "json")
	var job struct{ Job struct{ ID string } }
	if err := json.Unmarshal([]byte(submitted.out), &job); err != nil || job.Job.ID == "" {
		t.Fatalf("submit: %v\n%s", err, submitted)
	}
	if r := must(t, ops, "", "--tenant", "default", "jobs", "get", job.Job.ID); !strings.Contains(r.out, job.Job.ID) {
		t.Fatalf("operator key, --tenant default:\n%s", r)
	}
	if r := run(t, ops, "", "--tenant", "tenant-b", "jobs", "get", job.Job.ID); r.code != cli.ExitNotFound {
		t.Fatalf("operator key, --tenant tenant-b: want not found, got %s", r)
	}
	if r := run(t, ops, "", "jobs", "list"); r.code != cli.ExitRefused || !strings.Contains(r.err, "scope.tenantId") {
		t.Fatalf("operator key without a tenant: %s", r)
	}
	if r := run(t, cfg, "", "--tenant", "tenant-b", "jobs", "list"); r.code == cli.ExitOK {
		t.Fatalf("a tenant's key naming another tenant: %s", r)
	}
	must(t, cfg, "", "jobs", "list")
}

// TestContextsFileBehindALink: a contexts file that is a symbolic link
// (kept in a dotfiles repository) is written where it points, and stays
// a link.
func TestContextsFileBehindALink(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "dotfiles", "agentmesh.yaml"), filepath.Join(dir, "config.yaml")
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, []byte("contexts: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	cfg := cli.Config{ConfigFile: link}
	must(t, cfg, "", "context", "set", "b", "--url", "http://127.0.0.1:1")
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link after context set: %v %v", st, err)
	}
	if b, err := os.ReadFile(target); err != nil || !strings.Contains(string(b), "http://127.0.0.1:1") {
		t.Fatalf("the file it points to: %s %v", b, err)
	}
}

// TestContextsRoundTrip: contexts written by `context set` are listed back
// (keys masked), chosen by `context use` or --context, and used to reach
// the mesh without AGENTMESH_URL; the file is private to its owner.
func TestContextsRoundTrip(t *testing.T) {
	gw := mesh(t)
	cfg := cli.Config{ConfigFile: filepath.Join(t.TempDir(), "agentmesh", "config.yaml")}
	must(t, cfg, "", "context", "set", "dead", "--url", "http://127.0.0.1:1", "--tenant", "acme")
	must(t, cfg, "", "context", "set", "local", "--url", gw, "--api-key", apiKey)
	must(t, cfg, "", "context", "set", "dead", "--project", "alpha") // changes only the project

	r := must(t, cfg, "", "context", "list", "-o", "json")
	var list []struct {
		Current                                       bool
		Name, URL, Tenant, Project, APIKey, Transport string
	}
	if err := json.Unmarshal([]byte(r.out), &list); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, r)
	}
	if len(list) != 2 || !list[0].Current || list[0].Name != "dead" || list[0].URL != "http://127.0.0.1:1" || list[0].Tenant != "acme" || list[0].Project != "alpha" ||
		list[1].Current || list[1].URL != gw || strings.Contains(r.out, apiKey) {
		t.Fatalf("list -o json:\n%s", r.out)
	}
	st, err := os.Stat(cfg.ConfigFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("contexts file: %v %v", st.Mode(), err)
	}

	// The first context is current: unreachable, named in the error.
	r = run(t, cfg, "", "health")
	if r.code != cli.ExitUnavailable || !strings.Contains(r.err, `context "dead"`) {
		t.Fatalf("health on dead: %s", r)
	}
	if r := run(t, cfg, "", "--context", "local", "health"); r.code != cli.ExitOK {
		t.Fatalf("--context local: %s", r)
	}
	must(t, cfg, "", "context", "use", "local")
	if r := must(t, cfg, "", "models", "-o", "json"); !strings.Contains(r.out, `"chat"`) {
		t.Fatalf("models through context local:\n%s", r)
	}
	// The environment wins over the context, as with kubectl's flags.
	env := cfg
	env.URL = "http://127.0.0.1:1"
	if r := run(t, env, "", "models"); r.code != cli.ExitUnavailable || !strings.Contains(r.err, "AGENTMESH_URL") {
		t.Fatalf("AGENTMESH_URL over the context: %s", r)
	}
	if r := run(t, cfg, "", "context", "use", "nowhere"); r.code != cli.ExitNotFound {
		t.Fatalf("use nowhere: %s", r)
	}
	must(t, cfg, "", "context", "delete", "dead")
	b, _ := os.ReadFile(cfg.ConfigFile)
	if strings.Contains(string(b), "dead") || !strings.Contains(string(b), "current-context: local") {
		t.Fatalf("after delete:\n%s", b)
	}
}

// TestClassifyThroughTheGateway: conversations imported and classified
// over the gateway; a run left at a prompt names the command that resumes
// it, and that command finishes it.
func TestClassifyThroughTheGateway(t *testing.T) {
	cfg := gatewayConfig(t)
	file := filepath.Join(t.TempDir(), "conv.jsonl")
	lines := `{"id":"cli-1","channel":"chat","customer":"u1","messages":[{"role":"customer","text":"My order is late"},{"role":"agent","text":"It ships today"}]}` + "\n" + `{"id":"","messages":[]}` + "\n"
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	r := run(t, cfg, "", "classify", "import", file)
	if r.code != cli.ExitRefused || !strings.Contains(r.out, "line 2") || !strings.Contains(r.err, "1 line(s) rejected") {
		t.Fatalf("import: %s", r)
	}
	// - reads stdin, as docs ingest's does; a directory is a usage error.
	stdin := `{"id":"cli-stdin","channel":"chat","customer":"u2","messages":[{"role":"customer","text":"Where is my refund?"}]}` + "\n"
	if r := must(t, cfg, stdin, "classify", "import", "-"); !strings.Contains(r.out, "Imported 1 conversations from -") {
		t.Fatalf("import -: %s", r)
	}
	if r := run(t, cfg, "", "classify", "import", t.TempDir()); r.code != cli.ExitUsage || !strings.Contains(r.err, "is a directory") {
		t.Fatalf("import of a directory: %s", r)
	}

	r = run(t, cfg, "", "classify", "classify the chats")
	hint := regexp.MustCompile(`resume with: (agentmesh classify resume (\S+))`).FindStringSubmatch(r.err)
	if r.code != cli.ExitInterrupted || hint == nil {
		t.Fatalf("classify with no input: %s", r)
	}
	// The hinted command, as printed, resumes the run.
	r = must(t, cfg, "", append(strings.Fields(hint[1])[1:], "--yes")...)
	if !strings.Contains(r.out, "Classification completed") {
		t.Fatalf("resume --yes:\n%s", r)
	}
	r = must(t, cfg, "", "classify", "get", hint[2], "-o", "json")
	var got struct{ Run struct{ State string } }
	if err := json.Unmarshal([]byte(r.out), &got); err != nil || got.Run.State != "RUN_STATE_COMPLETED" {
		t.Fatalf("get: %v\n%s", err, r)
	}
}

// TestInterruptAtAPrompt: Ctrl-C while a session waits for a line ends it
// at once with the interrupted code, though the terminal sent no line.
func TestInterruptAtAPrompt(t *testing.T) {
	cfg := gatewayConfig(t)
	stdin, _ := io.Pipe() // a terminal nobody types into
	var out, errOut testkit.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- cli.Execute(ctx, cli.NewRoot(&cfg, cli.Streams{In: stdin, Out: &out, Err: &errOut}), []string{"sql", "--connection", "sample"})
	}()
	testkit.Eventually(t, 30*time.Second, func() bool { return strings.Contains(errOut.String(), "sql> ") }, "no prompt:\n%s%s", &out, &errOut)
	cancel()
	select {
	case code := <-done:
		if code != cli.ExitInterrupted {
			t.Fatalf("exit %d, want %d\n%s%s", code, cli.ExitInterrupted, out.String(), errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end on Ctrl-C")
	}
}

// TestMCPOverTheGateway: `agentmesh mcp` serves the mesh's tools on stdio
// through the gateway: a document ingested with the CLI is found by the
// search_documents tool.
func TestMCPOverTheGateway(t *testing.T) {
	cfg := gatewayConfig(t)
	file := filepath.Join(t.TempDir(), "wombat.txt")
	if err := os.WriteFile(file, []byte("Restart the wombat relay when the ledger queue stalls.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := must(t, cfg, "", "docs", "ingest", file, "-o", "json")
	var ingested struct{ Document struct{ ID string } }
	if err := json.Unmarshal([]byte(r.out), &ingested); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	toClient, fromClient, errOut, done := startMCP(ctx, cfg)
	s, err := mcp.NewClient(&mcp.Implementation{Name: "cli-test", Version: "v1"}, nil).Connect(ctx, &mcp.IOTransport{Reader: toClient, Writer: fromClient}, nil)
	if err != nil {
		t.Fatalf("connect: %v (%s)", err, errOut.String())
	}
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "search_documents", Arguments: map[string]any{"query": "wombat relay ledger"}})
	if err != nil || res.IsError {
		t.Fatalf("search_documents: %v %+v", err, res)
	}
	if b, _ := json.Marshal(res.StructuredContent); !strings.Contains(string(b), ingested.Document.ID) {
		t.Fatalf("search_documents lacks %s: %s", ingested.Document.ID, b)
	}
	s.Close()
	if code := <-done; code != 0 {
		t.Fatalf("agentmesh mcp: exit %d after the client closed: %s", code, errOut.String())
	}
}

// TestMCPStrayLinesAreAnswered: a line on the MCP server's stdin that is
// not a JSON-RPC 2.0 message (a log line, a typo) is answered with
// JSON-RPC's error (-32700, -32600) and the session goes on; the SDK's
// transport ended the server at the first one, leaving every request
// after it unanswered.
func TestMCPStrayLinesAreAnswered(t *testing.T) {
	cfg := gatewayConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	toClient, fromClient, errOut, done := startMCP(ctx, cfg)
	replies := bufio.NewScanner(toClient)
	replies.Buffer(make([]byte, 64<<10), 4<<20)
	send := func(line string) map[string]any {
		t.Helper()
		if _, err := io.WriteString(fromClient, line+"\n"); err != nil {
			t.Fatalf("write %s: %v (%s)", line, err, errOut.String())
		}
		if strings.Contains(line, `"method":"notifications/`) {
			return nil
		}
		if !replies.Scan() {
			t.Fatalf("no answer to %s: %v (%s)", line, replies.Err(), errOut.String())
		}
		var m map[string]any
		if err := json.Unmarshal(replies.Bytes(), &m); err != nil {
			t.Fatalf("answer to %s: %v: %s", line, err, replies.Bytes())
		}
		return m
	}
	code := func(m map[string]any) float64 {
		e, _ := m["error"].(map[string]any)
		c, _ := e["code"].(float64)
		return c
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for line, want := range map[string]float64{
		"this is not json":                      -32700,
		`{"id":9,"method":"tools/list"}`:        -32600,
		`[1,2]`:                                 -32600,
		`"str"`:                                 -32600,
		`{"jsonrpc":"1.0","id":3,"method":"x"}`: -32600,
	} {
		if m := send(line); code(m) != want {
			t.Errorf("%s: answered %v, want error %v", line, m, want)
		}
	}
	m := send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if r, _ := m["result"].(map[string]any); r == nil || r["tools"] == nil {
		t.Fatalf("tools/list after the stray lines: %v", m)
	}
	fromClient.Close()
	if code := <-done; code != 0 {
		t.Fatalf("agentmesh mcp: exit %d after the client closed: %s", code, errOut.String())
	}
}

// startMCP runs `agentmesh mcp` with cfg until ctx ends or its stdin
// (fromClient) closes: the client reads its stdout from toClient, done
// gets its exit code.
func startMCP(ctx context.Context, cfg cli.Config) (toClient io.ReadCloser, fromClient io.WriteCloser, errOut *testkit.Buffer, done chan int) {
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	errOut, done = &testkit.Buffer{}, make(chan int, 1)
	go func() {
		done <- cli.Execute(ctx, cli.NewRoot(&cfg, cli.Streams{In: toServer, Out: fromServer, Err: errOut}), []string{"mcp"})
		fromServer.Close()
	}()
	return toClient, fromClient, errOut, done
}

// TestTextThatIsNotUTF8IsAUsageError: an argument or a file that is not
// UTF-8 cannot be encoded in a request: a usage error (2) naming the
// field, over the gateway and over gRPC alike (over gRPC the service
// answered "internal error", exit 1).
func TestTextThatIsNotUTF8IsAUsageError(t *testing.T) {
	gw := gatewayConfig(t)
	direct := gw
	direct.Transport, direct.OrchestratorAddr, direct.IndexerAddr = "grpc", testMesh.addrs["orchestrator"], testMesh.addrs["indexer"]
	for _, cfg := range []cli.Config{gw, direct} {
		for _, args := range [][]string{
			{"jobs", "submit", "caf\xe9 prices"},
			{"docs", "search", "caf\xe9"},
			{"chat", "caf\xe9"},
		} {
			r := run(t, cfg, "", args...)
			if r.code != cli.ExitUsage || !strings.Contains(r.err, "the text is not valid UTF-8") {
				t.Errorf("%s agentmesh %s: %s", cfg.Transport, strings.Join(args, " "), r)
			}
		}
	}
}
