// Package meshtest starts, for the classifier's tests and benchmarks, the
// real model side of the mesh: the provider simulator (libs/testkit/
// providersim) over HTTP and the real model gateway in-process, routing the
// logical models "classifier" and "chat" to it. It also scripts the
// simulator with the answers a classification run needs: plans, batch
// classifications (answered per exact batch) and summaries.
//
// Only test code imports this package.
package meshtest

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/classifier/internal/modelcalls"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgatewaytest"
)

// Models is a provider simulator behind a running model gateway.
type Models struct {
	// Sim is the simulator; script it with When, inspect with Requests.
	Sim *providersim.Server
	// Addr is the model gateway's gRPC address.
	Addr string
}

// StartModels starts the simulator and the model gateway; both stop in
// t.Cleanup.
func StartModels(t testing.TB) *Models {
	t.Helper()
	sim := providersim.Start(t, providersim.Options{Flavor: providersim.OpenAI})
	routing := fmt.Sprintf(`providers:
  sim: {type: openai, base_url: %q}
models:
  classifier:
    - {provider: sim, model: sim-classifier, temperature: 0}
  chat:
    - {provider: sim, model: sim-chat}
`, sim.URL+"/v1")
	addr := modelgatewaytest.Start(t, routing, map[string]string{
		"OPENAI_API_KEY":                "sim-key",
		"MODELGATEWAY_MAX_ATTEMPTS":     "1",
		"MODELGATEWAY_PROBE_INTERVAL":   "1h",
		"MODELGATEWAY_RETRY_BASE_DELAY": "10ms",
		"MODELGATEWAY_RETRY_MAX_DELAY":  "20ms",
	})
	return &Models{Sim: sim, Addr: addr}
}

// Plan is a plan answer as the planning model writes it.
type Plan struct {
	TargetSampleSize       int            `json:"targetSampleSize"`
	Strategy               string         `json:"strategy"`
	PlanDetails            string         `json:"planDetails"`
	AdditionalInstructions string         `json:"additionalInstructions"`
	Query                  map[string]any `json:"query"`
}

// NewPlan returns a plan answer with readable details.
func NewPlan(target int, query map[string]any) Plan {
	if query == nil {
		query = map[string]any{}
	}
	return Plan{
		TargetSampleSize:       target,
		Strategy:               fmt.Sprintf("classify %d conversations in id order", target),
		PlanDetails:            fmt.Sprintf("## Classification Plan\n\nTarget: %d conversations.\n\nSample in id order; label each RESOLVED or UNRESOLVED.", target),
		AdditionalInstructions: "Treat escalations without an outcome as UNRESOLVED.",
		Query:                  query,
	}
}

// ScriptPlans answers the run's planning calls with plans, in order, one
// call each; a planning call after the last gets the simulator's default.
func (m *Models) ScriptPlans(plans ...Plan) {
	for i, p := range plans {
		m.Sim.When(providersim.Match{LastUserContains: modelcalls.PlanMarker}).JSON(p).Times(1).Named(fmt.Sprintf("plan-%d", i+1))
	}
}

// ScriptSummary answers every summary call with text.
func (m *Models) ScriptSummary(text string) {
	m.Sim.When(providersim.Match{LastUserContains: modelcalls.SummarizeMarker}).Text(text).Named("summary")
}

var conversationHeading = regexp.MustCompile(`(?m)^### Conversation (\S+) \(`)

// BatchIDs returns the conversation ids a classification request carried,
// in prompt order; nil for other requests.
func BatchIDs(r providersim.Request) []string {
	text := r.LastUserText()
	if !strings.Contains(text, modelcalls.ClassifyMarker) {
		return nil
	}
	var ids []string
	for _, m := range conversationHeading.FindAllStringSubmatch(text, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// ScriptClassifications answers classification calls for any batch of at
// most batchSize consecutive conversations of order (the order the run
// fetches them in) with labels[id] and a reason. The simulator answers
// statically, so one rule per possible batch is registered; a batch outside
// these gets the simulator's default answer (valid against the request's
// schema) unless ScriptUnusableClassifications is registered after.
func (m *Models) ScriptClassifications(order []string, batchSize int, labels map[string]string) {
	for start := range order {
		for n := 1; n <= batchSize && start+n <= len(order); n++ {
			batch := slices.Clone(order[start : start+n])
			var cls []map[string]string
			for _, id := range batch {
				cls = append(cls, map[string]string{"id": id, "label": labels[id], "reason": "scripted label for " + id})
			}
			want := slices.Clone(batch)
			sort.Strings(want)
			m.Sim.When(providersim.Match{Func: func(r *providersim.Request) bool {
				got := BatchIDs(*r)
				sort.Strings(got)
				return slices.Equal(got, want)
			}}).JSON(map[string]any{"classifications": cls}).Named("classify:" + strings.Join(batch, ","))
		}
	}
}

// ScriptUnusableClassifications answers every classification call that no
// earlier rule answers with a list that covers none of the batch: the
// gateway's schema check refuses it (after its one repair attempt) and the
// run fails. Register it after ScriptClassifications.
func (m *Models) ScriptUnusableClassifications() {
	m.Sim.When(providersim.Match{Func: func(r *providersim.Request) bool {
		return strings.Contains(r.AllText(), modelcalls.ClassifyMarker) // the repair request too
	}}).JSON(map[string]any{"classifications": []any{}}).Named("classify:unusable")
}

// Calls splits the recorded chat requests by kind.
type Calls struct {
	// Plans are the planning requests, in order.
	Plans []providersim.Request
	// Batches are the conversation ids of each classification request.
	Batches [][]string
	// Summaries are the summary requests.
	Summaries []providersim.Request
}

// Calls returns the recorded requests by kind.
func (m *Models) Calls() Calls {
	var c Calls
	for _, r := range m.Sim.ChatRequests() {
		text := r.LastUserText()
		switch {
		case strings.Contains(text, modelcalls.PlanMarker):
			c.Plans = append(c.Plans, r)
		case strings.Contains(text, modelcalls.ClassifyMarker):
			c.Batches = append(c.Batches, BatchIDs(r))
		case strings.Contains(text, modelcalls.SummarizeMarker):
			c.Summaries = append(c.Summaries, r)
		}
	}
	return c
}

// Total returns the number of model calls recorded.
func (c Calls) Total() int { return len(c.Plans) + len(c.Batches) + len(c.Summaries) }
