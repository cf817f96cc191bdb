package up

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/testkit"
)

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// scrape reads every sample of GET url.
func scrape(t *testing.T, url string) (samples []sample, text string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	for _, line := range strings.Split(string(body), "\n") {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[p[1]] = p[2]
		}
		samples = append(samples, s)
	}
	return samples, string(body)
}

// sum adds the samples named name whose labels include want.
func sum(samples []sample, name string, want map[string]string) (total float64, found bool) {
next:
	for _, s := range samples {
		if s.name != name {
			continue
		}
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		total += s.value
		found = true
	}
	return total, found
}

// createConversation creates a conversation through the gateway and
// returns its id.
func createConversation(t *testing.T, gw string) string {
	t.Helper()
	resp, err := http.Post(gw+"/v1/conversations", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var created struct {
		Conversation struct{ ID string } `json:"conversation"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&created); err != nil || created.Conversation.ID == "" {
		t.Fatalf("create conversation: status %d, %v", resp.StatusCode, err)
	}
	return created.Conversation.ID
}

// TestUpTelemetry: under `agentmesh up`, /metrics holds histograms whose
// buckets are seconds (a fast probe and a slow chat turn land in different
// buckets), HTTP metrics labelled by route pattern, and the event bus's
// queue metrics; and spans exported over OTLP carry each service's own
// name, none of them the embedded database's.
func TestUpTelemetry(t *testing.T) {
	rcv, endpoint := testkit.StartOTLP(t, "grpc")
	gw, _, stop := startMeshWith(t, t.TempDir(), map[string]string{
		"MODELGATEWAY_PROVIDER":       "sim",
		"MODELGATEWAY_SIM_LATENCY":    "300ms", // each model answer takes this long
		"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
	})
	// The banner comes once every component serves: ready at once, no
	// polling.
	resp, err := http.Get(gw + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz right after the banner: %d %s", resp.StatusCode, body)
	}

	for range 5 {
		resp, err := http.Get(gw + "/livez")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	conv := createConversation(t, gw)
	resp, err = http.Post(gw+"/v1/conversations/"+conv+"/messages:stream", "application/json", strings.NewReader(`{"content":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "event: Completed") {
		t.Fatalf("chat turn: %d %s", resp.StatusCode, body)
	}
	resp, err = http.Post(gw+"/v1/analyses", "application/json", strings.NewReader(`{"query":"Summarise our incident reports","responseType":"generic_analysis"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	// A classification run on the sample conversations: its stream ends at
	// the fetch approval.
	resp, err = http.Post(gw+"/agents/classificationAgent/runs", "application/json", strings.NewReader(`{"instruction":"Classify chat conversations"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "event: agent.run.awaiting_fetch_approval") {
		t.Fatalf("classification run: %d %s", resp.StatusCode, body)
	}

	resp, err = http.Post(gw+"/v1/documents", "application/json", strings.NewReader(
		`{"sourceType":"SOURCE_TYPE_WIKI","title":"Runbook","rawContent":"Restart the ingest worker when the queue stalls."}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("document ingest: %d %s", resp.StatusCode, body)
	}

	var samples []sample
	var text string
	testkit.Eventually(t, 30*time.Second, func() bool {
		samples, text = scrape(t, gw+"/metrics")
		n, _ := sum(samples, "agentmesh_events_outbox_relay_lag_seconds_count", nil)
		_, queues := sum(samples, "agentmesh_events_consumer_pending", map[string]string{"stream": "AM_WORK"})
		return n > 0 && queues
	}, "no outbox relay lag or work-queue depth in /metrics")

	const httpDur = "http_server_request_duration_seconds"
	streamRoute := "/v1/conversations/{conversationId}/messages:stream"
	for _, tc := range []struct {
		what, metric string
		labels       map[string]string
		fast         bool // every observation in le=0.1, else none below 0.25
	}{
		{"GET /livez", httpDur, map[string]string{"http_route": "/livez", "http_request_method": "GET"}, true},
		{"the chat stream", httpDur, map[string]string{"http_route": streamRoute}, false},
		{"the orchestrator's turn", "agentmesh_orchestrator_turn_duration_seconds", nil, false},
		{"the model gateway's calls", "agentmesh_modelgateway_call_duration_seconds", nil, false},
	} {
		count, ok := sum(samples, tc.metric+"_count", tc.labels)
		if !ok || count == 0 {
			t.Errorf("%s: no %s_count%v", tc.what, tc.metric, tc.labels)
			continue
		}
		le := func(b string) float64 {
			l := map[string]string{"le": b}
			for k, v := range tc.labels {
				l[k] = v
			}
			n, ok := sum(samples, tc.metric+"_bucket", l)
			if !ok {
				t.Errorf("%s: no bucket le=%s (boundaries not in seconds?)", tc.what, b)
			}
			return n
		}
		if tc.fast && le("0.1") != count {
			t.Errorf("%s: %v of %v observations at most 0.1 s; want all", tc.what, le("0.1"), count)
		}
		if !tc.fast && (le("0.25") != 0 || le("300") != count) {
			t.Errorf("%s: %v of %v observations at most 0.25 s, %v at most 300 s; want none, all", tc.what, le("0.25"), count, le("300"))
		}
	}
	for _, s := range samples {
		if r, ok := s.labels["http_route"]; ok && !strings.HasPrefix(r, "/") {
			t.Errorf("http_route %q is not a pattern", r)
		}
	}
	if strings.Contains(text, conv) {
		t.Errorf("/metrics names the conversation id %s: a label holds a raw path", conv)
	}
	if n, _ := sum(samples, "agentmesh_indexer_ingests_total", map[string]string{"outcome": "indexed"}); n != 1 {
		t.Errorf("document ingests indexed: %v, want 1", n)
	}
	if n, _ := sum(samples, "agentmesh_orchestrator_job_transitions_total", map[string]string{"type": "analysis_request", "to": "pending"}); n != 1 {
		t.Errorf("analyses created: %v, want 1", n)
	}
	for _, state := range []string{"Planning", "Fetching", "AwaitingFetchApproval"} {
		if n, _ := sum(samples, "agentmesh_classifier_run_transitions_total", map[string]string{"state": state}); n != 1 {
			t.Errorf("classification runs entering %s: %v, want 1", state, n)
		}
	}
	if n, _ := sum(samples, "agentmesh_classifier_run_transitions_total", map[string]string{"state": "Completed"}); n != 0 {
		t.Errorf("classification runs completed: %v, want 0", n)
	}
	// Every model call of the chat turn and the classification run carries
	// its caller's scope: no tokens are counted for no tenant.
	if n, _ := sum(samples, "agentmesh_modelgateway_tokens_total", map[string]string{"tenant": "none"}); n != 0 {
		t.Errorf("%v tokens counted for tenant none, want 0", n)
	}
	if _, ok := sum(samples, httpDur+"_count", map[string]string{"http_route": streamRoute}); !ok {
		t.Errorf("no %s series with http_route=%q", httpDur, streamRoute)
	}
	// An excerpt for the reader of -v: where the probe and the turn landed,
	// and the event bus's figures.
	for _, line := range strings.Split(text, "\n") {
		bucket := strings.Contains(line, `le="0.1"`) || strings.Contains(line, `le="0.5"`)
		if (strings.HasPrefix(line, httpDur+"_bucket") || strings.HasPrefix(line, "agentmesh_orchestrator_turn_duration_seconds_bucket")) && bucket ||
			strings.HasPrefix(line, "agentmesh_events_") && !strings.Contains(line, "_bucket") ||
			strings.HasPrefix(line, "agentmesh_classifier_") || strings.HasPrefix(line, "agentmesh_modelgateway_tokens_total") {
			t.Log(line)
		}
	}

	stop() // flushes the spans
	services := map[string]int{}
	var names []string
	for _, s := range rcv.Spans() {
		services[s.Service()]++
		if s.Service() == "gateway" || s.Service() == "orchestrator" {
			names = append(names, s.Name+"@"+s.Service())
		}
	}
	t.Logf("spans by service.name: %v", services)
	listing := map[string]map[string]bool{}
	for _, s := range rcv.Spans() {
		if listing[s.Service()] == nil {
			listing[s.Service()] = map[string]bool{}
		}
		listing[s.Service()][s.Name] = true
	}
	for svc, spans := range listing {
		var n []string
		for name := range spans {
			n = append(n, name)
		}
		sort.Strings(n)
		t.Logf("service.name=%s: %s", svc, strings.Join(n, " | "))
	}
	for _, want := range []string{"gateway", "orchestrator", "modelgateway"} {
		if services[want] == 0 {
			t.Errorf("no span from %s: %v", want, services)
		}
	}
	known := map[string]bool{"gateway": true, "modelgateway": true, "orchestrator": true, "vision": true, "indexer": true, "classifier": true, "sqlagent": true}
	for svc := range services {
		if !known[svc] {
			t.Errorf("spans with service.name %q: only the mesh's services may export spans (FerretDB's must not)", svc)
		}
	}
	joined := strings.Join(names, "\n")
	for _, want := range []string{
		"POST " + streamRoute + "@gateway",
		"agentmesh.orchestrator.v1.ConversationService/StreamMessage@orchestrator",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("no span %q among:\n%s", want, joined)
		}
	}
}
