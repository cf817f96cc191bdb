package classifier

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	"github.com/agentmesh/agentmesh/gateway/httpgateway/httpgatewaytest"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/conversations"
	"github.com/agentmesh/agentmesh/services/classifier/internal/meshtest"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runevents"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// The gateway keys of the tests that go through the gateway: one for the
// scope the tests work in, one for another tenant.
const (
	gatewayKey      = "gw-key-acme"
	otherGatewayKey = "gw-key-globex"
	gatewayKeys     = gatewayKey + "=acme:support," + otherGatewayKey + "=globex:support"
	// providerKey is the model provider's key a client of the original
	// agent sends as "Authorization: Bearer ...".
	providerKey = "sk-provider-key-of-the-client"
)

// startGateway serves the real REST/SSE gateway in front of the classifier
// at addr and returns its base URL.
func startGateway(t *testing.T, addr string, keepAlive time.Duration) string {
	t.Helper()
	cfg := httpgateway.Config{APIKeys: gatewayKeys, SSEKeepAlive: keepAlive}
	return httpgatewaytest.Start(t, cfg, httpgateway.Backends{Classifier: httpgatewaytest.Dial(t, addr)})
}

// seedClient is a client of the original classification agent: REST and
// SSE on /agents/classificationAgent/runs, its provider key as bearer token
// and the gateway key in X-API-Key.
type seedClient struct {
	t   *testing.T
	url string
	key string
}

// request sends a request with the client's headers plus extra.
func (c seedClient) request(ctx context.Context, method, path, body string, extra map[string]string) *http.Response {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+providerKey)
	req.Header.Set("X-API-Key", c.key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// status is GET /agents/classificationAgent/runs/{runId}: the HTTP status
// and the JSON body.
func (c seedClient) status(runID string) (int, map[string]any) {
	c.t.Helper()
	resp := c.request(testCtx(c.t), "GET", "/agents/classificationAgent/runs/"+runID, "", nil)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		c.t.Fatalf("status of %s: %v: %s", runID, err, b)
	}
	return resp.StatusCode, m
}

// stream sends a request whose answer is an event stream and reads it to
// its end.
func (c seedClient) stream(method, path, body string, extra map[string]string) (int, []sseEvent) {
	c.t.Helper()
	resp := c.request(testCtx(c.t), method, path, body, extra)
	defer resp.Body.Close()
	return resp.StatusCode, eventsOf(sseEvents(resp.Body))
}

// resumeWhileHeld reconnects to run runID, held by its executor, with the
// last event id the client saw. It returns the resumed stream once its
// first event has arrived, while the run is still held: the resume follows
// the executor, sending at once what the client missed. The returned
// stream starts with that event. It must be called from the test's
// goroutine while the run is held, and Fatals there.
func (c seedClient) resumeWhileHeld(runID, lastID string) <-chan sseEvent {
	c.t.Helper()
	resp := c.request(testCtx(c.t), "POST", "/agents/classificationAgent/runs/"+runID+"/resume", "", map[string]string{"Last-Event-ID": lastID})
	c.t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		c.t.Errorf("resume: HTTP %d", resp.StatusCode)
		return nil
	}
	evs := sseEvents(resp.Body)
	out := make(chan sseEvent, 1)
	timeout := time.After(10 * time.Second)
	for len(out) == 0 {
		select {
		case ev, ok := <-evs:
			if !ok {
				c.t.Errorf("the resume ended with no event")
				close(out)
				return out
			}
			if ev.Comment == "" {
				out <- ev
			}
		case <-timeout:
			c.t.Errorf("the resume sent no event within 10 s while the run was held")
			_ = resp.Body.Close()
			close(out)
			return out
		}
	}
	go func() {
		defer close(out)
		for ev := range evs {
			out <- ev
		}
	}()
	return out
}

// eventsOf reads a stream to its end and returns its events, without the
// comments.
func eventsOf(evs <-chan sseEvent) []sseEvent {
	var out []sseEvent
	for ev := range evs {
		if ev.Comment == "" {
			out = append(out, ev)
		}
	}
	return out
}

// sseEvent is one Server-Sent Event, or a comment line.
type sseEvent httpgatewaytest.Event

// typ is the event's run event type, read from its data as the original
// agent's clients do.
func (e sseEvent) typ() string {
	var d struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal([]byte(e.Data), &d)
	return d.Type
}

// sseEvents reads a text/event-stream body as an EventSource does.
func sseEvents(body io.Reader) <-chan sseEvent {
	out := make(chan sseEvent, 64)
	go func() {
		defer close(out)
		for ev := range httpgatewaytest.Events(body) {
			out <- sseEvent(ev)
		}
	}()
	return out
}

// checkIDs fails unless the events' ids are first, first+1, ...: a run's
// events numbered without a gap or a repeat.
func checkIDs(t *testing.T, evs []sseEvent, first int) {
	t.Helper()
	for i, e := range evs {
		if e.ID != strconv.Itoa(first+i) {
			t.Fatalf("event %d (%s) has id %q, want %d; ids %v", i, e.Name, e.ID, first+i, eventIDs(evs))
		}
	}
}

func eventIDs(evs []sseEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// stepHook holds a run each time it enters one of a set of states, until
// the test has looked at it: entered says which run entered which state,
// and the run goes on after next() returns.
type stepHook struct {
	states  map[statemachine.State]bool
	entered chan stepAt
	release chan struct{}
}

type stepAt struct {
	runID string
	state statemachine.State
}

func newStepHook(states ...statemachine.State) *stepHook {
	h := &stepHook{states: map[statemachine.State]bool{}, entered: make(chan stepAt), release: make(chan struct{})}
	for _, s := range states {
		h.states[s] = true
	}
	return h
}

func (h *stepHook) hook(_ context.Context, runID string, s statemachine.State) {
	if h.states[s] {
		h.entered <- stepAt{runID, s}
		<-h.release
	}
}

// at waits for a run to enter state, calls look while it is held there,
// then lets it go on. It returns the run id.
func (h *stepHook) at(t *testing.T, state statemachine.State, look func(runID string)) string {
	t.Helper()
	select {
	case got := <-h.entered:
		if got.state != state {
			t.Fatalf("the run entered %s, want %s", got.state, state)
		}
		look(got.runID)
		h.release <- struct{}{}
		return got.runID
	case <-time.After(30 * time.Second):
		t.Fatalf("the run never entered %s", state)
	}
	return ""
}

// The original agent's "Get Run Status" answers with its AgentContext:
// a client reads runId, state (named as AgentState names it),
// totalConversationsClassified, targetSampleSize and plansCount in every
// state a run goes through, through the gateway, authenticated by the
// gateway key while its bearer token is its provider key. An unknown run
// and another tenant's run are both 404.
func TestSeedClientReadsRunStatusInEveryState(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	steps := newStepHook(statemachine.Planning, statemachine.Fetching, statemachine.Classifying, statemachine.Saving,
		statemachine.Summarizing, statemachine.Error)
	s := startService(t, in, map[string]string{"CLASSIFIER_LEASE_TTL": "10s"}, steps.hook)
	ids := importSample(t, s.client)
	in.models.ScriptPlans(meshtest.NewPlan(4, nil), meshtest.NewPlan(2, nil))
	in.models.ScriptClassifications(ids, 2, sampleLabels(ids))
	in.models.ScriptSummary(summaryText)
	client := seedClient{t: t, url: startGateway(t, s.addr, time.Minute), key: gatewayKey}

	// expect reads the status and compares the fields a client of the
	// original reads.
	expect := func(runID, state string, classified, target, plans int) map[string]any {
		t.Helper()
		code, got := client.status(runID)
		if code != http.StatusOK {
			t.Fatalf("status of %s in %s: HTTP %d %v", runID, state, code, got)
		}
		want := map[string]any{"runId": runID, "state": state, "totalConversationsClassified": float64(classified),
			"targetSampleSize": float64(target), "plansCount": float64(plans)}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("in %s: %s = %v, want %v (%v)", state, k, got[k], v, got)
			}
		}
		return got
	}
	// inBackground sends a request whose stream ends once the run waits
	// or ends; the test meanwhile steps the run through the held states.
	inBackground := func(path, body string) <-chan []sseEvent {
		done := make(chan []sseEvent, 1)
		go func() {
			code, evs := client.stream("POST", path, body, nil)
			if code != http.StatusOK {
				t.Errorf("POST %s: HTTP %d", path, code)
			}
			done <- evs
		}()
		return done
	}
	command := func(runID, typ string) <-chan []sseEvent {
		return inBackground("/agents/classificationAgent/runs/"+runID+"/command", `{"type":"`+typ+`"}`)
	}

	started := inBackground("/agents/classificationAgent/runs", `{"instruction":"Classify four support conversations"}`)
	runID := steps.at(t, statemachine.Planning, func(id string) { expect(id, "Planning", 0, 0, 0) })
	steps.at(t, statemachine.Fetching, func(string) { expect(runID, "Fetching", 0, 4, 1) })
	evs := <-started
	checkIDs(t, evs, 1)
	got := expect(runID, "AwaitingFetchApproval", 0, 4, 1)
	if fetched, _ := got["fetchedConversationIds"].([]any); len(fetched) != 4 || got["instruction"] != "Classify four support conversations" {
		t.Errorf("AgentContext awaiting fetch approval: %v", got)
	}

	approved := command(runID, "ApproveFetch")
	steps.at(t, statemachine.Classifying, func(string) { expect(runID, "Classifying", 0, 4, 1) })
	checkIDs(t, <-approved, len(evs)+1)
	got = expect(runID, "AwaitingBatchApproval", 0, 4, 1)
	if pending, _ := got["pendingClassifications"].([]any); len(pending) != 2 {
		t.Errorf("AgentContext awaiting batch approval: %v", got)
	}

	approved = command(runID, "ApproveBatch")
	steps.at(t, statemachine.Saving, func(string) { expect(runID, "Saving", 0, 4, 1) })
	steps.at(t, statemachine.Classifying, func(string) { expect(runID, "Classifying", 2, 4, 1) })
	<-approved
	expect(runID, "AwaitingBatchApproval", 2, 4, 1)

	approved = command(runID, "ApproveBatch")
	steps.at(t, statemachine.Saving, func(string) { expect(runID, "Saving", 2, 4, 1) })
	steps.at(t, statemachine.Summarizing, func(string) { expect(runID, "Summarizing", 4, 4, 1) })
	<-approved
	got = expect(runID, "Completed", 4, 4, 1)
	if got["summary"] != strings.TrimSpace(summaryText) || got["modelCallsCount"] != 4.0 {
		t.Errorf("AgentContext of the completed run: %v", got)
	}

	// A second run fails: a conversation of its batch disappears while it
	// is being classified. It is shown in Error, then Stopped.
	started = inBackground("/agents/classificationAgent/runs", `{"instruction":"Classify two"}`)
	second := steps.at(t, statemachine.Planning, func(id string) { expect(id, "Planning", 0, 0, 0) })
	steps.at(t, statemachine.Fetching, func(string) { expect(second, "Fetching", 0, 2, 1) })
	<-started
	approved = command(second, "ApproveFetch")
	steps.at(t, statemachine.Classifying, func(string) {
		if _, err := in.db.Collection(conversations.Collection).DeleteOne(testCtx(t), bson.D{{Key: "id", Value: ids[0]}}); err != nil {
			t.Fatal(err)
		}
	})
	steps.at(t, statemachine.Error, func(string) {
		if got := expect(second, "Error", 0, 2, 1); !strings.Contains(got["stopReason"].(string), ids[0]) {
			t.Errorf("AgentContext in Error: %v", got)
		}
	})
	if evs := <-approved; evs[len(evs)-1].typ() != runevents.RunStopped {
		t.Errorf("the failed batch's stream ends with %s", evs[len(evs)-1].typ())
	}
	if got := expect(second, "Stopped", 0, 2, 1); !strings.HasPrefix(got["stopReason"].(string), "error: ") {
		t.Errorf("AgentContext of the stopped run: %v", got)
	}

	// Unknown runs and other tenants' runs are both not found, in the
	// gateway's JSON error shape.
	other := seedClient{t: t, url: client.url, key: otherGatewayKey}
	for name, c := range map[string]struct {
		client seedClient
		runID  string
	}{"unknown run": {client, "no-such-run"}, "another tenant's run": {other, runID}} {
		code, body := c.client.status(c.runID)
		if code != http.StatusNotFound || body["code"] != 5.0 || body["message"] == "" || body["runId"] != nil {
			t.Errorf("%s: HTTP %d %v", name, code, body)
		}
	}
}

// A client that loses its stream in the middle of a run reconnects as an
// EventSource does: POST .../resume with the last event id it saw. It gets
// the run's later events exactly once and in order, then the resume's own.
// Event ids are the run's own (1, 2, 3...), not a counter that other runs
// and tenants move. The executor still holds the run when the client
// reconnects: the resume follows it, sending what the client missed at
// once, then the executor's events as they come, until the run waits for
// approval; it takes nothing over.
func TestSeedClientReconnectsWithLastEventID(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	steps := newStepHook(statemachine.Fetching)
	s := startService(t, in, map[string]string{"CLASSIFIER_LEASE_TTL": "5s"}, steps.hook)
	importSample(t, s.client)
	in.models.ScriptPlans(meshtest.NewPlan(4, nil), meshtest.NewPlan(4, nil))
	client := seedClient{t: t, url: startGateway(t, s.addr, 100*time.Millisecond), key: gatewayKey}

	// A first run, so that ids shared between runs would show.
	first := make(chan []sseEvent, 1)
	go func() {
		_, evs := client.stream("POST", "/agents/classificationAgent/runs", `{"instruction":"first run"}`, nil)
		first <- evs
	}()
	steps.at(t, statemachine.Fetching, func(string) {})
	checkIDs(t, <-first, 1)

	ctx, disconnect := context.WithCancel(testCtx(t))
	resp := client.request(ctx, "POST", "/agents/classificationAgent/runs", `{"instruction":"second run"}`, nil)
	defer resp.Body.Close()
	var seen []sseEvent
	var resumed <-chan sseEvent
	runID := steps.at(t, statemachine.Fetching, func(string) {
		// The run is held after its plan: its stream has delivered the
		// events up to there. The client keeps two and loses the stream.
		for ev := range sseEvents(resp.Body) {
			if ev.Comment == "" {
				seen = append(seen, ev)
			}
			if len(seen) == 2 {
				break
			}
		}
		disconnect()
		checkIDs(t, seen, 1)
		// It reconnects while the executor still holds the run.
		resumed = client.resumeWhileHeld(runIDOf(t, seen[0]), seen[1].ID)
	})
	got := eventsOf(resumed)
	if runID != runIDOf(t, seen[0]) {
		t.Fatalf("held run %s, streamed run %s", runID, runIDOf(t, seen[0]))
	}

	// What the client has now is the run's whole history, as JetStream
	// holds it: no event missed, none twice.
	testkit.Eventually(t, 10*time.Second, func() bool { return pendingOutbox(t, in, runID) == 0 }, "outbox published")
	stored := replayAll(t, in, runID, 0, countEvents(t, in, runID))
	all := append(seen, got...)
	checkIDs(t, all, 1)
	if len(all) != len(stored) {
		t.Fatalf("the client has %d events, the run %d: %v", len(all), len(stored), types(stored))
	}
	for i, e := range stored {
		if all[i].typ() != e.GetType() || all[i].Name != e.GetType() {
			t.Fatalf("event %s is %s, stored %s", all[i].ID, all[i].typ(), e.GetType())
		}
	}
	t.Logf("the client kept events 1-2 of run %s, the resume with Last-Event-ID 2 delivered %s-%s", runID, got[0].ID, got[len(got)-1].ID)
	if last := all[len(all)-1].typ(); last != runevents.AwaitingFetchApproval || slices.Contains(types(stored), runevents.RunResumed) {
		t.Errorf("the resumed stream ends with %s; the run's events %v", last, types(stored))
	}
}

// runIDOf reads the run id from an event's data as the original agent's
// clients do: the run's events name it in agent.run.started's data.
func runIDOf(t *testing.T, e sseEvent) string {
	t.Helper()
	var d struct {
		Data struct {
			RunID string `json:"runId"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(e.Data), &d); err != nil || d.Data.RunID == "" {
		t.Fatalf("no run id in %s (%v)", e.Data, err)
	}
	return d.Data.RunID
}

// A seed client whose stream is cut just before the run completes
// reconnects as an EventSource does, with the last event id it saw, while
// the executor still finishes the run: the resume follows it, sending the
// events the client missed at once, then the rest up to
// agent.run.completed and final_data, and ends; nothing runs again. Reconnecting later from any event of the
// finished run replays the rest; from its last event the answer is 204
// (nothing to reconnect for); a resume with no event id is refused, the
// run being finished.
func TestSeedClientReconnectsToARunThatFinished(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	steps := newStepHook(statemachine.Summarizing)
	s := startService(t, in, map[string]string{"CLASSIFIER_LEASE_TTL": "5s"}, steps.hook)
	ids := importSample(t, s.client)
	in.models.ScriptPlans(meshtest.NewPlan(2, nil))
	in.models.ScriptClassifications(ids, 2, sampleLabels(ids))
	in.models.ScriptSummary(summaryText)
	client := seedClient{t: t, url: startGateway(t, s.addr, 100*time.Millisecond), key: gatewayKey}

	_, seen := client.stream("POST", "/agents/classificationAgent/runs", `{"instruction":"classify"}`, nil)
	runID := runIDOf(t, seen[0])
	command := "/agents/classificationAgent/runs/" + runID + "/command"
	_, evs := client.stream("POST", command, `{"type":"ApproveFetch"}`, nil)
	seen = append(seen, evs...)
	if seen[len(seen)-1].typ() != runevents.AwaitingBatchApproval {
		t.Fatalf("the run waits with %s, want batch approval", seen[len(seen)-1].typ())
	}

	ctx, disconnect := context.WithCancel(testCtx(t))
	resp := client.request(ctx, "POST", command, `{"type":"ApproveBatch"}`, nil)
	defer resp.Body.Close()
	var resumed <-chan sseEvent
	steps.at(t, statemachine.Summarizing, func(string) {
		// The run is about to summarise and complete; the client has the
		// first event of the approval's stream and loses it.
		for ev := range sseEvents(resp.Body) {
			if ev.Comment == "" {
				seen = append(seen, ev)
				break
			}
		}
		disconnect()
		resumed = client.resumeWhileHeld(runID, seen[len(seen)-1].ID)
	})
	got := eventsOf(resumed)
	all := append(seen, got...)
	checkIDs(t, all, 1)
	testkit.Eventually(t, 10*time.Second, func() bool { return pendingOutbox(t, in, runID) == 0 }, "outbox published")
	stored := replayAll(t, in, runID, 0, countEvents(t, in, runID))
	if len(all) != len(stored) {
		t.Fatalf("the client has %d events, the run %d: %v", len(all), len(stored), types(stored))
	}
	for i, e := range stored {
		if all[i].typ() != e.GetType() {
			t.Fatalf("event %s is %s, stored %s", all[i].ID, all[i].typ(), e.GetType())
		}
		if e.GetType() == runevents.RunResumed {
			t.Fatalf("the reconnect resumed the finished run: %v", types(stored))
		}
	}
	var sawCompleted, sawFinal bool
	for _, e := range got {
		sawCompleted = sawCompleted || e.typ() == runevents.RunCompleted
		sawFinal = sawFinal || e.typ() == runevents.FinalData
	}
	if !sawCompleted || !sawFinal {
		t.Fatalf("the resumed stream lacks the run's end: %v", eventIDs(got))
	}
	t.Logf("the client lost the stream at event %s; the resume delivered %s-%s and ended", seen[len(seen)-1].ID, got[0].ID, got[len(got)-1].ID)

	resume := "/agents/classificationAgent/runs/" + runID + "/resume"
	code, again := client.stream("POST", resume, "", map[string]string{"Last-Event-ID": "2"})
	if code != http.StatusOK || len(again) != len(all)-2 {
		t.Fatalf("reconnect from event 2 of the finished run: HTTP %d, %d events, want %d", code, len(again), len(all)-2)
	}
	checkIDs(t, again, 3)
	if code, evs := client.stream("POST", resume, "", map[string]string{"Last-Event-ID": all[len(all)-1].ID}); code != http.StatusNoContent || len(evs) != 0 {
		t.Fatalf("reconnect from the last event: HTTP %d, %d events; want 204", code, len(evs))
	}
	r := client.request(testCtx(t), "POST", resume, "", nil)
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	if r.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "RUN_FINISHED") {
		t.Fatalf("resume without an event id: HTTP %d %s, want 400 RUN_FINISHED", r.StatusCode, body)
	}
	if n := countEvents(t, in, runID); n != len(all) {
		t.Fatalf("the run has %d events after the reconnects, had %d: a reconnect ran it", n, len(all))
	}
}
