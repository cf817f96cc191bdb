// Package chattest starts what the chat loop's tests talk to: the real
// model gateway (modelgateway.Run, in-process, on a loopback port) in front
// of a scripted provider simulator speaking the provider's wire format over
// HTTP. Nothing of the mesh is faked; only the provider's cloud API is
// simulated, the one boundary tests cannot reach.
package chattest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgatewaytest"
)

// ModelName is the logical model the gateway routes to the simulator.
const ModelName = "chat"

// Model is a running model gateway whose logical model "chat" is served by
// a scripted simulator.
type Model struct {
	// Sim is the simulator: script it with When, inspect what the gateway
	// sent with ChatRequests.
	Sim *providersim.Server
	// Conn is a client connection to the gateway.
	Conn *grpc.ClientConn
	// Client is ModelService on Conn.
	Client modelv1.ModelServiceClient
}

// providerType is the gateway adapter speaking each simulator flavour.
var providerType = map[providersim.Flavor]string{
	providersim.DeepSeek: "deepseek",
	providersim.Qwen:     "qwen",
	providersim.Ollama:   "ollama",
	providersim.OpenAI:   "openai",
}

// StartModel starts a simulator with opts and the model gateway in front of
// it, using the adapter of opts.Flavor (DeepSeek when empty). The logical
// model "chat" asks the simulator for model "sim-model"; each of extra
// logical models asks for "sim-<name>". Both stop in t.Cleanup.
func StartModel(t testing.TB, opts providersim.Options, extra ...string) *Model {
	t.Helper()
	if opts.Flavor == "" {
		opts.Flavor = providersim.DeepSeek
	}
	sim := providersim.Start(t, opts)
	routing := fmt.Sprintf("providers:\n  up: {type: %s, base_url: %q}\nmodels:\n  %s:\n    - {provider: up, model: sim-model}\n",
		providerType[opts.Flavor], sim.URL, ModelName)
	for _, name := range extra {
		routing += fmt.Sprintf("  %s:\n    - {provider: up, model: sim-%s}\n", name, name)
	}
	addr := modelgatewaytest.Start(t, routing, map[string]string{
		"MODELGATEWAY_MAX_ATTEMPTS":   "1", // a scripted error reaches the loop at once
		"MODELGATEWAY_PROBE_INTERVAL": "1h",
		"DEEPSEEK_API_KEY":            "test-key",
		"QWEN_API_KEY":                "test-key",
		"OPENAI_API_KEY":              "test-key",
	})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &Model{Sim: sim, Conn: conn, Client: modelv1.NewModelServiceClient(conn)}
}

// UnreachableAddr returns a loopback address nobody listens on, for a
// dependency that is down.
func UnreachableAddr(t testing.TB) string {
	t.Helper()
	lis := testkit.Listen(t)
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// Event is one received turn event with its arrival time.
type Event struct {
	*orchestratorv1.StreamMessageResponse
	// At is when it arrived.
	At time.Time
}

// Recorder collects a turn's events. It is safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex // guards events
	events []Event
	// OnEvent, if set, is called with each event after it is recorded.
	OnEvent func(*orchestratorv1.StreamMessageResponse)
}

// Emit records ev; it has the signature of chat.Emit.
func (r *Recorder) Emit(ev *orchestratorv1.StreamMessageResponse) error {
	r.mu.Lock()
	r.events = append(r.events, Event{StreamMessageResponse: ev, At: time.Now()})
	r.mu.Unlock()
	if r.OnEvent != nil {
		r.OnEvent(ev)
	}
	return nil
}

// Events returns the events so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}
