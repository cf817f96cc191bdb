package up

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/cli"
	"github.com/agentmesh/agentmesh/libs/config"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

var (
	gatewayURL = regexp.MustCompile(`gateway\s+(http://localhost:\d+)`)
	grpcAddr   = regexp.MustCompile(`(\w+)\s+grpc://(\S+)`)
)

// lastAddrs holds the gRPC addresses the last started mesh printed, by service.
var lastAddrs map[string]string

// startMesh runs the whole mesh in-process on random ports with its data in
// dir and returns the gateway URL, the modelgateway address and a stop func
// that waits for a clean shutdown.
func startMesh(t *testing.T, dir string) (gw, model string, stop func()) {
	t.Helper()
	return startMeshWith(t, dir, nil)
}

// startMeshWith is startMesh with extra environment variables.
func startMeshWith(t *testing.T, dir string, extra map[string]string) (gw, model string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &testkit.Buffer{}
	done := make(chan error, 1)
	env := config.Map(map[string]string{
		"AGENTMESH_DATA_DIR":       dir,
		"AGENTMESH_GRPC_BASE_PORT": "0",
		"HTTP_ADDR":                "127.0.0.1:0",
		"LOG_LEVEL":                "warn",
		"OLLAMA_HOST":              "http://127.0.0.1:1",
	})
	if extra != nil {
		env = config.Overlay(config.Map(extra), env)
	}
	go func() { done <- Run(ctx, env, out) }()
	testkit.Eventually(t, 30*time.Second, func() bool { return gatewayURL.MatchString(out.String()) }, "mesh did not print its banner:\n%s", out)
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agentmesh up returned %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("agentmesh up did not shut down within 30s")
		}
	}
	t.Cleanup(stop)
	lastAddrs = map[string]string{}
	for _, m := range grpcAddr.FindAllStringSubmatch(out.String(), -1) {
		lastAddrs[m[1]] = m[2]
	}
	return gatewayURL.FindStringSubmatch(out.String())[1], lastAddrs["modelgateway"], stop
}

// TestUpServesEveryService starts the mesh the way `make run` does and checks
// that the gateway reports every service serving, then that a restart on the
// same data directory comes back.
func TestUpServesEveryService(t *testing.T) {
	dir := t.TempDir()
	gw, model, stop := startMesh(t, dir)

	var health struct {
		Status   string                     `json:"status"`
		Services map[string]json.RawMessage `json:"services"`
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		resp, err := http.Get(gw + "/healthz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && json.Unmarshal(body, &health) == nil && health.Status == "SERVING"
	}, "healthz never reported SERVING")
	for _, svc := range []string{"modelgateway", "orchestrator", "vision", "indexer", "classifier", "sqlagent"} {
		if _, ok := health.Services[svc]; !ok {
			t.Errorf("healthz does not list %s: %v", svc, health.Services)
		}
	}

	// Each service answers gRPC health directly, too.
	cc, err := grpcx.Dial(model)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	r, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("modelgateway health = %v, %v", r, err)
	}

	resp, err := http.Get(gw + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/openapi.json = %d", resp.StatusCode)
	}

	stop()
	gw2, _, _ := startMesh(t, dir)
	testkit.Eventually(t, 30*time.Second, func() bool {
		resp, err := http.Get(gw2 + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "mesh did not come back on the same data directory")
}

// TestUpDemoFlows drives the mesh on the built-in simulator the way the
// README does: a streamed chat turn over SSE, an analysis and its tree
// through the CLI, and a conversation import through the CLI.
func TestUpDemoFlows(t *testing.T) {
	gw, _, _ := startMeshWith(t, t.TempDir(), map[string]string{"MODELGATEWAY_PROVIDER": "sim"})
	waitServing(t, gw)

	// A chat turn, streamed as SSE.
	resp, err := http.Post(gw+"/v1/conversations", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		Conversation struct{ ID string } `json:"conversation"`
	}
	json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if created.Conversation.ID == "" {
		t.Fatalf("create conversation: status %d", resp.StatusCode)
	}
	resp, err = http.Post(gw+"/v1/conversations/"+created.Conversation.ID+"/messages:stream", "application/json", strings.NewReader(`{"content":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("stream content type %q", ct)
	}
	// Join the answer from its ResponseChunk events, as a browser would.
	var answer strings.Builder
	var event string
	for _, line := range strings.Split(string(body), "\n") {
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "ResponseChunk":
			var chunk struct{ Content string }
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &chunk); err != nil {
				t.Fatalf("bad ResponseChunk data %q: %v", line, err)
			}
			answer.WriteString(chunk.Content)
		}
	}
	if !strings.HasPrefix(answer.String(), "[simulated]") || !strings.Contains(string(body), "event: Completed") {
		t.Fatalf("answer %q from chat stream:\n%s", answer.String(), body)
	}

	// The CLI against the running mesh, through the gateway.
	cfg := &cli.Config{URL: gw, ConfigFile: filepath.Join(t.TempDir(), "contexts.yaml")}
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "conv.jsonl")
	lines := `{"id":"c-1","channel":"chat","customer":"u1","messages":[{"role":"customer","text":"My order is late"},{"role":"agent","text":"It ships today"}]}` + "\n" + `{"id":"","messages":[]}` + "\n"
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := cli.Execute(ctx, cli.NewRoot(cfg, cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errOut}), []string{"classify", "import", file})
	t.Logf("import output: %s", out.String())
	if code != cli.ExitRefused || !strings.Contains(errOut.String(), "1 line(s) rejected") || !strings.Contains(out.String(), "line 2") {
		t.Fatalf("classify import: exit %d\n%s%s", code, out.String(), errOut.String())
	}

	resp, err = http.Post(gw+"/v1/analyses", "application/json", strings.NewReader(`{"query":"Analyse BHP","responseType":"generic_analysis"}`))
	if err != nil {
		t.Fatal(err)
	}
	var submitted struct {
		Job struct{ ID string } `json:"job"`
	}
	json.NewDecoder(resp.Body).Decode(&submitted)
	resp.Body.Close()
	if submitted.Job.ID == "" {
		t.Fatalf("submit analysis: status %d", resp.StatusCode)
	}
	out.Reset()
	if code := cli.Execute(ctx, cli.NewRoot(cfg, cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errOut}), []string{"jobs", "tree", submitted.Job.ID}); code != 0 {
		t.Fatalf("jobs tree: exit %d: %s", code, errOut.String())
	}
	if !strings.HasPrefix(out.String(), `▼ Analysis: "Analyse BHP"`) {
		t.Fatalf("jobs tree:\n%s", out.String())
	}
}

func waitServing(t *testing.T, gw string) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, func() bool {
		resp, err := http.Get(gw + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "healthz never reported SERVING")
}
