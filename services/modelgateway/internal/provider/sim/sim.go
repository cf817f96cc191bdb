// Package sim is the provider "sim": the scripted provider simulator
// (libs/testkit/providersim) served in-process over in-memory pipes and
// spoken to with the OpenAI-compatible adapter, so demos and end-to-end
// tests run on machines without any model. Its answers say they are
// simulated.
package sim

import (
	"time"

	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/openaiwire"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/provider/openai"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/upstream"
)

// Provider is a running in-process simulator with its adapter.
type Provider struct {
	*openaiwire.Client
	// Sim is the simulator, for scripting it.
	Sim *providersim.Sim
	mem *providersim.InMemory
}

// Pace is how fast the simulator answers: Latency before each answer,
// ChunkDelay between streamed chunks. The zero Pace answers at once.
type Pace struct {
	Latency, ChunkDelay time.Duration
}

// New starts a simulator (clean OpenAI dialect, no faults) named name,
// answering at pace. Close stops it. It records no requests: a test's
// simulator keeps each one for inspection, which in a mesh that serves for
// days would hold every request's body until the process ends.
func New(name string, timeouts upstream.Timeouts, pace Pace) *Provider {
	s := providersim.New(providersim.Options{Flavor: providersim.OpenAI, Latency: pace.Latency, ChunkDelay: pace.ChunkDelay, NoRecord: true})
	mem := s.InMemory()
	up := &upstream.Client{
		Provider:  name,
		BaseURL:   mem.BaseURL + "/v1",
		Transport: mem.Transport,
		Timeouts:  timeouts,
	}
	return &Provider{Client: openai.New(up, openai.Options{}), Sim: s, mem: mem}
}

// Close stops the simulator.
func (p *Provider) Close() { p.mem.Close() }
