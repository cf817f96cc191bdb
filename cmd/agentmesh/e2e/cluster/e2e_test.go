//go:build e2ecluster

// Package cluster is the production-topology end-to-end suite (issue 16
// §1, `make e2e-cluster`): every service from its own binary as separate
// OS processes on loopback, two replicas where the design allows, on a
// three-node NATS JetStream cluster and a database process, driven through
// the gateways while replicas, a NATS node and the database are killed.
//
// What it counts, and where it looks:
//   - flows: each flow is driven as a client would (retrying what a
//     client retries, resuming streams with Last-Event-ID) and ends
//     completed, or failed with the reason the mesh gave; anything else is
//     unclean.
//   - executions: tool jobs are seen at the market-data endpoint, model
//     calls (planning, classification batches, extractions) at the provider
//     simulator, each with the process that made it (/proc); SQL writes in
//     the SQL agent's database (create mode: a second write of a table
//     fails). A repeat is legitimate only when the earlier execution was
//     cut, or a fault on its path happened in between; otherwise it is a
//     double run.
//   - events: analyses' watch streams are replayed from the start after
//     they end, and chat turns from their TurnStarted once they complete;
//     classification runs' and intake's events are read straight from the
//     JetStream stream; every event there must have reached the client
//     (once), and run events number 1..N without gaps.
//   - chunks: search hits and the chunks collection, per document.
//   - health: every replica's grpc.health.v1 while the database is down
//     (NOT_SERVING, liveness SERVING, same process) and after.
//
// The suite needs the e2ecluster build tag, Linux (/proc) and a Go
// toolchain that can build nats-server and ferretdb at the versions the
// workspace pins (module cache or proxy); E2ECLUSTER_BIN_DIR points it at
// prebuilt service binaries, E2ECLUSTER_LOG_DIR keeps the processes' logs.
package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

var allFlows = []string{flowChat, flowAnalysis, flowIngest, flowClassify, flowSQL}

func TestCluster(t *testing.T) {
	suiteStart := time.Now()
	c := startCluster(t)
	d := &driver{c: c, api: newAPI(c.front), results: &syncList[*result]{}}

	// Every flow once on a quiet cluster: the suite's own check that the
	// flows and their checks work before faults make them harder to read.
	for _, k := range allFlows {
		if r := d.run(k, false); !r.completed || r.lost > 0 {
			t.Fatalf("%s on a quiet cluster: completed=%v reason=%q lost=%d notes=%v", k, r.completed, r.reason, r.lost, r.notes)
		}
	}

	// The recorder knows each execution by the services' own prompts and
	// routes: if it saw none of a kind, it has gone blind to it.
	kinds := map[string]bool{}
	for _, e := range c.rec.executions() {
		kinds[e.kind] = true
	}
	for _, k := range []string{kindToolJob, kindPlanning, kindBatch, kindExtraction} {
		if !kinds[k] {
			t.Fatalf("the quiet flows made no %s the recorder could see: it no longer recognises the service's requests", k)
		}
	}

	l := startLoad(d, 3)
	outages := c.injectFaults(d)
	l.stopAndWait()

	// Every flow once more: the mesh recovered.
	for _, k := range allFlows {
		if r := d.run(k, false); !r.completed {
			t.Errorf("%s after the faults: %q %v", k, r.reason, r.notes)
		}
	}

	// The watch stream whose gateway was killed: its client reconnected
	// through the front and missed nothing.
	for _, r := range d.results.list() {
		if r.id != c.sseRoot {
			continue
		}
		reconnects := 0
		for _, n := range r.notes {
			if strings.Contains(n, "reconnecting with Last-Event-ID") {
				reconnects++
			}
		}
		c.sseKill.note("its client reconnected %d time(s) with Last-Event-ID; received %d events, lost %d; analysis completed=%v", reconnects, r.events, r.lost, r.completed)
		if reconnects == 0 || r.lost > 0 || !r.completed {
			t.Errorf("the watch stream cut by the gateway kill: %d reconnects, %d events lost, completed=%v: %v", reconnects, r.lost, r.completed, r.notes)
		}
	}
	// The chat turn whose gateway was killed: its client resumed it through
	// the front and missed nothing.
	for _, r := range d.results.list() {
		if r.id != c.chatConv {
			continue
		}
		resumes := 0
		for _, n := range r.notes {
			if strings.Contains(n, "resuming with Last-Event-ID") {
				resumes++
			}
		}
		c.chatKill.note("its client resumed the turn %d time(s) with Last-Event-ID; received %d events, lost %d, twice %d; turn completed=%v", resumes, r.events, r.lost, r.duplicateEvents, r.completed)
		if resumes == 0 || r.lost > 0 || r.duplicateEvents > 0 || !r.completed {
			t.Errorf("the chat stream cut by the gateway kill: %d resumes, %d events lost, %d twice, completed=%v: %v", resumes, r.lost, r.duplicateEvents, r.completed, r.notes)
		}
	}
	// The flows' model calls went to both model gateway replicas, each of
	// which counts its own: GET /v1/usage sums every replica's.
	var usage struct {
		Replicas, ReplicasUnanswered int
		Points                       []struct {
			Calls int64 `json:",string"`
		}
	}
	uctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := d.api.call(uctx, http.MethodGet, "/v1/usage", nil, &usage); err != nil {
		t.Errorf("GET /v1/usage: %v", err)
	} else if usage.Replicas != replicaCounts["modelgateway"] || usage.ReplicasUnanswered != 0 || len(usage.Points) == 0 {
		t.Errorf("GET /v1/usage summed %d replicas (%d unanswered) into %d points, want every one of the %d replicas",
			usage.Replicas, usage.ReplicasUnanswered, len(usage.Points), replicaCounts["modelgateway"])
	}
	cancel()
	c.checkOpenAIUsage(t)

	s := &summary{
		results: d.results.list(), faults: c.faults.list(), execs: c.rec.executions(),
		outages: outages, startupCrashes: c.startupCrashes,
	}
	s.reruns = reruns(s.execs, s.faults)
	s.chunkProblems = c.checkChunks(d.results.list())
	s.took = time.Since(suiteStart)
	s.print(os.Stdout)

	if u := s.unclean(); len(u) > 0 {
		t.Errorf("%d flows neither completed nor failed with a reason", len(u))
	}
	for _, r := range s.results {
		if r.unchecked != "" {
			t.Errorf("%s %s could not be checked: %s", r.kind, r.id, r.unchecked)
		}
	}
	if in := s.internal(); len(in) > 0 {
		t.Errorf("%d flows failed with an internal error instead of a reason", len(in))
	}
	if dr := s.doubleRuns(); len(dr) > 0 {
		t.Errorf("%d executions ran twice with no fault to explain it", len(dr))
	}
	for name, check := range map[string]func(r *result) int{
		"lost events":                                   func(r *result) int { return r.lost },
		"events published twice":                        func(r *result) int { return r.duplicateEvents },
		"duplicated chunks in search":                   func(r *result) int { return r.duplicateChunks },
		"SQL writes that ran twice":                     func(r *result) int { return r.doubleWrites },
		"job events after their analysis's watch ended": func(r *result) int { return r.afterEnd },
	} {
		if n := s.total(check); n > 0 {
			t.Errorf("%s: %d", name, n)
		}
	}
	if len(s.chunkProblems) > 0 {
		t.Errorf("%d documents with duplicated chunks in MongoDB", len(s.chunkProblems))
	}
	for name, o := range outages {
		svc := c.replica(name).svc
		if usesMongo[svc] && o.notServingAfter == 0 {
			t.Errorf("%s never reported NOT_SERVING while the database was down", name)
		}
		if o.livenessLost {
			t.Errorf("%s reported its liveness entry not SERVING while the database was down", name)
		}
		if o.restarted {
			t.Errorf("%s was restarted to recover from the database restart", name)
		}
	}
}

// load keeps flows running in the background while faults are injected.
type load struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

// startLoad starts workers goroutines, each running every kind of flow in
// turn, every other one slow, until stopAndWait.
func startLoad(d *driver, workers int) *load {
	l := &load{stop: make(chan struct{})}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := w; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				d.run(allFlows[i%len(allFlows)], i%2 == 0)
			}
		}()
	}
	return l
}

// stopAndWait lets the flows under way finish.
func (l *load) stopAndWait() {
	close(l.stop)
	l.wg.Wait()
}

// injectFaults kills one replica of each service in the middle of a flow
// it serves, a NATS node and the database, one after the other, each once
// the last one was recovered from.
func (c *cluster) injectFaults(d *driver) map[string]mongoOutage {
	t := c.t
	t.Helper()
	var flows sync.WaitGroup
	defer flows.Wait()
	spawn := func(kind string) <-chan struct{} {
		done := make(chan struct{})
		flows.Add(1)
		go func() { defer flows.Done(); defer close(done); d.run(kind, true) }()
		return done
	}
	// Waits for an execution of kind whose key carries the slow marker:
	// it waits slowDelay at the simulator, long enough to kill inside it.
	slowExecution := func(kind string) *execution {
		e := c.waitExecution(kind, slowMarker, 90*time.Second)
		if e == nil {
			t.Fatalf("no slow %s under way within 90s to inject a fault into", kind)
		}
		return e
	}

	// orchestrator: the replica executing a tool job, while it waits for
	// the market-data endpoint.
	spawn(flowAnalysis)
	e := slowExecution(kindToolJob)
	if r := c.replica(e.by); r == nil || r.svc != "orchestrator" {
		t.Fatalf("tool job %s executed by %q, not an orchestrator replica", e.key, e.by)
	}
	c.killReplica(c.replica(e.by), "executing tool job "+e.key)

	// modelgateway: the replica relaying a classification batch call.
	spawn(flowClassify)
	e = slowExecution(kindBatch)
	if r := c.replica(e.by); r == nil || r.svc != "modelgateway" {
		t.Fatalf("batch %s relayed by %q, not a model gateway replica", e.key, e.by)
	}
	c.killReplica(c.replica(e.by), "relaying classification batch "+e.key)

	// classifier: which replica executes a run cannot be seen from outside
	// (its lease names a random instance id), so two slow runs are under
	// way, and the kill is of one replica; the runs' clients note the
	// streams it cut.
	spawn(flowClassify)
	spawn(flowClassify)
	e = slowExecution(kindBatch)
	c.killReplica(c.replica("classifier-a"), "classification batch "+e.key+" and others under way")

	// indexer: while an extraction job of an ingest waits for its model
	// call. Either replica may run it (a shared work queue), and which one
	// does cannot be seen from the model gateway's call: one is killed.
	spawn(flowIngest)
	e = slowExecution(kindExtraction)
	c.killReplica(c.replica("indexer-a"), "extraction job of "+e.key+" under way")

	// sqlagent: the only replica, while it writes a slow query's result
	// to a table (step 7 of the session: the confirmed write).
	writing := make(chan struct{}, 1)
	d.hooks.Lock()
	d.hooks.sqlStep = func(step int, _ string) {
		if step == 7 {
			select {
			case writing <- struct{}{}:
			default:
			}
		}
	}
	d.hooks.Unlock()
	sqlDone := spawn(flowSQL)
	select {
	case <-writing:
	case <-time.After(90 * time.Second):
		t.Fatal("no slow SQL write under way within 90s")
	}
	d.hooks.Lock()
	d.hooks.sqlStep = nil
	d.hooks.Unlock()
	time.Sleep(700 * time.Millisecond) // inside the write's slow query
	c.killReplica(c.replica("sqlagent-a"), "confirmed write of a slow query's result")
	// The session of the killed write recovers only once its execution's
	// deadline has passed (query timeout + 30 s): let it, before the
	// database goes away under it.
	<-sqlDone

	// vision: no flow of the list uses it (no image is ingested);
	// the kill shows the mesh's health and recovery without it.
	c.killReplica(c.replica("vision-a"), "no flow uses vision")

	// gateway: the replica serving an analysis's watch stream, once the
	// stream delivered its first event; the client reconnects through the
	// front with Last-Event-ID.
	watching := make(chan [2]string, 1)
	d.hooks.Lock()
	d.hooks.watch = func(root, backend string) {
		select {
		case watching <- [2]string{root, backend}:
		default:
		}
	}
	d.hooks.Unlock()
	spawn(flowAnalysis)
	var w [2]string
	select {
	case w = <-watching:
	case <-time.After(90 * time.Second):
		t.Fatal("no analysis watch stream within 90s")
	}
	d.hooks.Lock()
	d.hooks.watch = nil
	d.hooks.Unlock()
	c.sseKill = c.killReplica(c.replica(w[1]), "serving the watch stream of analysis "+w[0])
	c.sseRoot = w[0]

	// gateway: the replica serving a chat turn's stream, once the turn
	// named itself and while it waits for the model; the client resumes the
	// turn through the front with Last-Event-ID.
	chatting := make(chan [2]string, 1)
	d.hooks.Lock()
	d.hooks.chat = func(conv, backend string) {
		select {
		case chatting <- [2]string{conv, backend}:
		default:
		}
	}
	d.hooks.Unlock()
	spawn(flowChat)
	var cw [2]string
	select {
	case cw = <-chatting:
	case <-time.After(90 * time.Second):
		t.Fatal("no chat stream within 90s")
	}
	d.hooks.Lock()
	d.hooks.chat = nil
	d.hooks.Unlock()
	c.chatKill = c.killReplica(c.replica(cw[1]), "serving the SSE stream of a chat turn in conversation "+cw[0])
	c.chatConv = cw[0]

	// A NATS node: the events stream's leader.
	c.killNATSNode(6 * time.Second)

	// The database.
	// Down for longer than a health check's period plus its timeout (5 s
	// each in libs/service), so that every replica can notice.
	_, outages := c.restartMongo(15 * time.Second)
	return outages
}

// checkChunks looks at the chunks collection for every ingested
// document: no two chunks may hold the same place (content hash, sequence)
// of one document, and the current content has as many chunks as the
// document says.
func (c *cluster) checkChunks(rs []*result) []string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, closeDB := c.db(ctx)
	defer closeDB()
	var problems []string
	for _, r := range rs {
		if r.kind != flowIngest || r.id == "" {
			continue
		}
		var doc struct {
			ContentHash string `bson:"content_hash"`
			ChunkCount  int    `bson:"chunk_count"`
		}
		if err := db.Collection("indexer_documents").FindOne(ctx, bson.M{"_id": r.id}).Decode(&doc); err != nil {
			problems = append(problems, "document "+r.id+": "+err.Error())
			continue
		}
		cur, err := db.Collection("indexer_chunks").Find(ctx, bson.M{"doc_id": r.id})
		if err != nil {
			problems = append(problems, "chunks of "+r.id+": "+err.Error())
			continue
		}
		var chunks []struct {
			ContentHash string `bson:"content_hash"`
			Seq         int    `bson:"seq"`
		}
		if err := cur.All(ctx, &chunks); err != nil {
			problems = append(problems, "chunks of "+r.id+": "+err.Error())
			continue
		}
		place := map[string]int{}
		current := 0
		for _, ch := range chunks {
			place[fmt.Sprintf("content %s, seq %d", ch.ContentHash, ch.Seq)]++
			if ch.ContentHash == doc.ContentHash {
				current++
			}
		}
		for p, n := range place {
			if n > 1 {
				problems = append(problems, fmt.Sprintf("document %s: %s stored %d times", r.id, p, n))
			}
		}
		if current != doc.ChunkCount {
			problems = append(problems, fmt.Sprintf("document %s: %d chunks of its content, chunk_count %d", r.id, current, doc.ChunkCount))
		}
	}
	return problems
}

// checkOpenAIUsage makes one OpenAI-compatible chat call at each gateway
// replica, each of which counts its own, and reads GET /openai/v1/usage
// through the front door: every replica's counts summed (GATEWAY_PEERS).
func (c *cluster) checkOpenAIUsage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const tenant = "openai-usage"
	do := func(method, url, body string, out any) error {
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Tenant-Id", tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, b)
		}
		return json.Unmarshal(b, out)
	}
	gateways := c.replicas["gateway"]
	for _, r := range gateways {
		var done map[string]any
		if err := do(http.MethodPost, "http://"+r.addr+"/openai/v1/chat/completions",
			`{"model": "chat", "messages": [{"role": "user", "content": "count me"}]}`, &done); err != nil {
			t.Errorf("an OpenAI chat call at %s: %v", r.name, err)
			return
		}
	}
	var usage struct {
		Data []struct {
			Model    string `json:"model"`
			Requests int    `json:"requests"`
		} `json:"data"`
		Replicas           int `json:"replicas"`
		ReplicasUnanswered int `json:"replicas_unanswered"`
	}
	if err := do(http.MethodGet, c.front.url()+"/openai/v1/usage", "", &usage); err != nil {
		t.Errorf("GET /openai/v1/usage: %v", err)
		return
	}
	requests := 0
	for _, row := range usage.Data {
		requests += row.Requests
	}
	fmt.Printf("GET /openai/v1/usage: %d requests counted across %d replicas (%d unanswered), one call made at each of %d\n",
		requests, usage.Replicas, usage.ReplicasUnanswered, len(gateways))
	if usage.Replicas != len(gateways) || usage.ReplicasUnanswered != 0 || requests != len(gateways) {
		t.Errorf("GET /openai/v1/usage: %d requests from %d replicas (%d unanswered), want %d from every one of the %d replicas",
			requests, usage.Replicas, usage.ReplicasUnanswered, len(gateways), len(gateways))
	}
}
