package httpgateway_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	"github.com/agentmesh/agentmesh/libs/config"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

// runGateway starts Run against the mesh's backends and returns its URL and
// a channel with Run's result.
func runGateway(t *testing.T, ctx context.Context, m *mesh, cfg httpgateway.Config) (string, <-chan error) {
	t.Helper()
	cfg.ModelGatewayAddr, cfg.OrchestratorAddr, cfg.VisionAddr = m.addrs["modelgateway"], m.addrs["orchestrator"], m.addrs["vision"]
	cfg.IndexerAddr, cfg.ClassifierAddr, cfg.SQLAgentAddr = m.addrs["indexer"], m.addrs["classifier"], m.addrs["sqlagent"]
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- httpgateway.Run(ctx, &cfg, httpgateway.Runtime{Logger: discard(), Listener: lis, Ready: func() { close(ready) }})
	}()
	waitFor(t, ready, "Run to be ready")
	return "http://" + lis.Addr().String(), done
}

func TestRunDrainsInFlightRequestsOnShutdown(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	m := startBackends(t, fakes{conversations: &conversationFake{
		create: func(context.Context, *orchestratorv1.CreateConversationRequest) (*orchestratorv1.CreateConversationResponse, error) {
			close(entered)
			<-release
			return &orchestratorv1.CreateConversationResponse{Conversation: &orchestratorv1.Conversation{Id: "c1"}}, nil
		},
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, done := runGateway(t, ctx, m, httpgateway.Config{ShutdownTimeout: waitLimit})

	if resp, body := do(t, "GET", url+"/livez", "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("/livez: %d %s", resp.StatusCode, body)
	}
	result := make(chan int, 1)
	go func() {
		resp, err := http.Post(url+"/v1/conversations", "application/json", strings.NewReader("{}"))
		if err != nil {
			result <- 0
			return
		}
		resp.Body.Close()
		result <- resp.StatusCode
	}()
	waitFor(t, entered, "the request to reach the service")

	cancel()
	// New connections are refused while the in-flight request continues.
	addr := strings.TrimPrefix(url, "http://")
	deadline := time.Now().Add(waitLimit)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the gateway still accepts connections after shutdown began")
		}
		<-tick.C
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) with a request in flight", err)
	default:
	}

	close(release)
	if code := waitFor(t, result, "the in-flight request"); code != http.StatusOK {
		t.Fatalf("in-flight request: status %d, want 200", code)
	}
	if err := waitFor(t, done, "Run to return"); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestRunCancelsStreamsAfterTheGracePeriod(t *testing.T) {
	t.Parallel()
	requests := make(chan *orchestratorv1.WatchJobRequest, 1)
	cancelled := make(chan struct{})
	m := startBackends(t, fakes{jobs: jobWatcher(requests, cancelled, nil)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, done := runGateway(t, ctx, m, httpgateway.Config{ShutdownTimeout: 100 * time.Millisecond})

	resp := send(t, context.Background(), "GET", url+"/v1/jobs/j1:watch", "", nil)
	defer resp.Body.Close()
	events := readEvents(resp.Body)
	if ev, _ := nextEvent(t, events); ev.name != "job.running" {
		t.Fatalf("first event = %+v", ev)
	}
	cancel()
	if err := waitFor(t, done, "Run to return"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	waitFor(t, cancelled, "the upstream stream to be cancelled")
}

func TestConfigDefaultsAndDeployment(t *testing.T) {
	t.Parallel()
	var cfg httpgateway.Config
	if err := config.Load("", &cfg, config.Map(nil)); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"HTTP_ADDR": ":8080", "MODELGATEWAY_ADDR": "localhost:9091", "ORCHESTRATOR_ADDR": "localhost:9092",
		"VISION_ADDR": "localhost:9093", "INDEXER_ADDR": "localhost:9094", "CLASSIFIER_ADDR": "localhost:9095",
		"SQLAGENT_ADDR": "localhost:9096", "GATEWAY_SSE_KEEPALIVE": "15s", "GATEWAY_API_KEYS": "",
	}
	got := config.Redacted("", &cfg)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if err := config.Load("", &cfg, config.Map(map[string]string{"GATEWAY_API_KEYS": "k=t"})); err != nil {
		t.Fatal(err)
	}
	if r := config.Redacted("", &cfg); r["GATEWAY_API_KEYS"] != "***" {
		t.Errorf("GATEWAY_API_KEYS is not masked: %q", r["GATEWAY_API_KEYS"])
	}
}
