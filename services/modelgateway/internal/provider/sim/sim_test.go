package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/upstream"
)

// The built-in simulator answers, and keeps nothing of the requests it
// answered: a mesh on it serves for days.
func TestSimulatorKeepsNoRequests(t *testing.T) {
	p := New("sim", upstream.Timeouts{}, Pace{})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		resp, err := p.Chat(ctx, &llm.Request{Model: "sim-chat", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hello"}}})
		if err != nil {
			t.Fatalf("Chat: %v", err)
		}
		if !strings.Contains(resp.Message.Content, "simulated") {
			t.Errorf("answer %q does not say it is simulated", resp.Message.Content)
		}
	}
	if n := p.Sim.Count(); n != 3 {
		t.Errorf("the simulator counted %d requests, want 3", n)
	}
	if reqs := p.Sim.Requests(); len(reqs) != 0 {
		t.Errorf("the simulator kept %d requests", len(reqs))
	}
}
