//go:build e2ecluster

package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/gateway/httpgateway/httpgatewaytest"
	"github.com/agentmesh/agentmesh/libs/events"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// Flow kinds.
const (
	flowChat     = "chat over SSE"
	flowAnalysis = "analysis"
	flowIngest   = "document ingest + search"
	flowClassify = "classification run with approvals"
	flowSQL      = "SQL job (read, then write to a table)"
)

// result is how one flow ended, as its user saw it.
type result struct {
	kind, id string
	// completed: the flow reached its goal. Otherwise reason says why not,
	// as the mesh told the user; a failure without a reason is unclean.
	completed bool
	reason    string
	// internal is a failure answered HTTP 500 "internal error".
	internal bool
	start    time.Time
	took     time.Duration
	// lost counts events of the flow the client never received although
	// the flow's event log holds them, plus jobs of an analysis whose
	// final event the log lacks; events counts those it received.
	lost, events int
	// duplicateChunks counts search hits repeating a chunk of the flow's
	// document; doubleWrites counts extra executions of a SQL write;
	// duplicateEvents counts events published twice as different events
	// (for a chat turn: events its client received twice).
	duplicateChunks, doubleWrites, duplicateEvents int
	// interrupted counts executions the SQL agent reported interrupted
	// (their replica died), which the user confirmed again; rerunWrites
	// counts the writes that then ran a second time.
	interrupted, rerunWrites int
	// afterEnd counts job events of an analysis after its watch ended (a
	// job that changed once the analysis was over); replayHung is a
	// watch from the start of a finished analysis that never ended.
	afterEnd   int
	replayHung bool
	// phantom counts events a client received that the flow's event log
	// does not hold (an event streamed, then lost from the log).
	phantom int
	// unchecked says why the suite could not check the flow.
	unchecked string
	// notes says what the client had to do: reconnects, retries.
	notes []string
}

func (r *result) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// driver runs flows against the cluster through the front.
type driver struct {
	c       *cluster
	api     *api
	results *syncList[*result]
	seq     struct {
		sync.Mutex
		n int
	}
	// hooks let the fault injector act at a given step of a flow.
	hooks struct {
		sync.Mutex
		// watch is called when an analysis's watch stream, on backend,
		// delivered its first event.
		watch func(root, backend string)
		// sqlStep is called before each input of a slow SQL job.
		sqlStep func(step int, value string)
		// chat is called when a chat turn's stream, on backend, named the
		// turn; while it is set, chat turns wait slowDelay for the model.
		chat func(conv, backend string)
	}
}

func (d *driver) chatHook() func(conv, backend string) {
	d.hooks.Lock()
	defer d.hooks.Unlock()
	return d.hooks.chat
}

func (d *driver) watchHook() func(root, backend string) {
	d.hooks.Lock()
	defer d.hooks.Unlock()
	return d.hooks.watch
}

func (d *driver) sqlHook() func(step int, value string) {
	d.hooks.Lock()
	defer d.hooks.Unlock()
	return d.hooks.sqlStep
}

func (d *driver) next() int {
	d.seq.Lock()
	defer d.seq.Unlock()
	d.seq.n++
	return d.seq.n
}

// flowTimeout bounds one flow: past it the flow is a hung flow, which the
// suite counts as unclean.
const flowTimeout = 4 * time.Minute

// run runs flow kind (slow: its executions wait on the simulators, so a
// fault can land inside one) and records its result.
func (d *driver) run(kind string, slow bool) *result {
	n := d.next()
	r := &result{kind: kind, start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), flowTimeout)
	defer cancel()
	var err error
	switch kind {
	case flowChat:
		err = d.chat(ctx, n, r)
	case flowAnalysis:
		err = d.analysis(ctx, n, slow, r)
	case flowIngest:
		err = d.ingest(ctx, n, slow, r)
	case flowClassify:
		err = d.classify(ctx, n, slow, r)
	case flowSQL:
		err = d.sqlJob(ctx, n, slow, r)
	}
	r.took = time.Since(r.start)
	var ce *checkError
	switch {
	case err == nil:
		r.completed = true
	case errors.As(err, &ce):
		r.unchecked = ce.Error()
	case ctx.Err() != nil:
		r.reason = "" // hung: no answer within the flow's time
		r.note("no end within %v: %v", flowTimeout, err)
	default:
		r.reason = failureReason(err)
		var he *httpError
		var se *streamError
		if (errors.As(err, &he) && he.status == http.StatusInternalServerError) || (errors.As(err, &se) && se.code() == 13) {
			// The mesh hid what failed: no reason a user can act on, and
			// not the Unavailable a dependency outage should answer.
			r.internal = true
			r.note("internal error: %v", err)
		}
		if r.reason == "" {
			r.note("failed without a reason: %v", err)
		}
	}
	d.results.add(r)
	return r
}

// flowFailure is a flow ended by the mesh with a reason the user can read.
type flowFailure struct{ reason string }

func (f *flowFailure) Error() string { return f.reason }

func failed(format string, args ...any) error {
	return &flowFailure{reason: fmt.Sprintf(format, args...)}
}

// failureReason is the reason a user was given for err, "" when none.
func failureReason(err error) string {
	var ff *flowFailure
	if errors.As(err, &ff) {
		return ff.reason
	}
	var he *httpError
	if errors.As(err, &he) {
		if m := he.reason(); m != "" {
			return fmt.Sprintf("HTTP %d: %s", he.status, m)
		}
	}
	var se *streamError
	if errors.As(err, &se) {
		return se.Error()
	}
	return ""
}

// chatSlowMarker in a chat message makes the simulator wait slowDelay
// before answering it, so that a fault lands inside the turn.
const chatSlowMarker = "LINGER"

// chat creates a conversation and sends one message over SSE. A stream cut
// after the turn named itself (TurnStarted) is resumed with GET
// .../turns/{turn}:watch and the Last-Event-ID it got, through the front,
// so usually on another gateway replica, until the turn's last event; the
// events the client got are then checked against the whole turn read again
// from its start (lost: never received; duplicateEvents: received twice).
// A stream cut before the turn named itself is sent again, as a user would.
func (d *driver) chat(ctx context.Context, n int, r *result) error {
	var created struct {
		Conversation struct{ ID string } `json:"conversation"`
	}
	if err := d.api.call(ctx, http.MethodPost, "/v1/conversations", map[string]any{"title": fmt.Sprintf("e2e chat %d", n)}, &created); err != nil {
		return err
	}
	r.id = created.Conversation.ID
	hook := d.chatHook()
	question := "what changed in the last quarter?"
	if hook != nil {
		question = chatSlowMarker + " " + question
		d.c.sim.When(providersim.Match{LastUserContains: fmt.Sprintf("Question %d ", n) + "(attempt"}).Delay(slowDelay).
			Text("The last quarter brought three releases and one outage.")
	}
	var last error
	for attempt := 1; attempt <= 4; attempt++ {
		t := &chatTurn{}
		first := true
		backend, err := d.api.stream(ctx, http.MethodPost, "/v1/conversations/"+r.id+"/messages:stream",
			map[string]string{"content": fmt.Sprintf("Question %d (attempt %d): %s", n, attempt, question)}, nil,
			func(ev httpgatewaytest.Event, backend string) bool {
				t.add(ev)
				if first && hook != nil && t.id != "" {
					hook(r.id, backend)
					first = false
				}
				return true
			})
		for resume := 1; t.resumable && !t.ended() && (err == nil || transient(err)) && resume <= 60; resume++ {
			r.note("turn %s via %s cut after id %q (%v); resuming with Last-Event-ID", t.id, backend, t.lastID, err)
			if err := pause(ctx, 300*time.Millisecond); err != nil {
				return err
			}
			backend, err = d.api.stream(ctx, http.MethodGet, "/v1/conversations/"+r.id+"/turns/"+t.id+":watch", nil,
				http.Header{"Last-Event-ID": {t.lastID}}, func(ev httpgatewaytest.Event, _ string) bool { t.add(ev); return true })
		}
		r.events += len(t.ids)
		switch {
		case t.completed:
			if attempt > 1 {
				r.note("completed on attempt %d", attempt)
			}
			return d.checkTurn(ctx, r, t)
		case t.failure != "":
			last = failed("turn failed: %s", t.failure)
		case err != nil && !transient(err):
			return err
		case t.id != "":
			// TurnStarted said the turn's events could not be stored (the
			// event bus was away longer than the orchestrator waits): no
			// watch finds it, so the message is sent again.
			last = failed("turn %s, not resumable, cut after %d events (via %s): %v", t.id, len(t.ids), backend, err)
		default:
			last = failed("stream cut after %d events (via %s) before the turn named itself: %v", len(t.ids), backend, err)
		}
		r.note("attempt %d: %v", attempt, last)
		if err := pause(ctx, time.Second); err != nil {
			return last
		}
	}
	return last
}

// chatTurn is what a client got of a chat turn, over however many streams.
type chatTurn struct {
	id, lastID string
	resumable  bool     // TurnStarted said so: its events are stored
	ids        []string // every event id received, in order
	// unnamed counts events received without an id of their own: sent
	// while the orchestrator could not store them. The first of them may
	// have been stored all the same (its publish timed out after the
	// stream took it), and then is in the turn's log under an id.
	unnamed   int
	completed bool
	failure   string
}

func (t *chatTurn) add(ev httpgatewaytest.Event) {
	switch ev.Name {
	case "TurnStarted":
		var ts struct {
			TurnID    string `json:"turnId"`
			Resumable bool   `json:"resumable"`
		}
		_ = json.Unmarshal([]byte(ev.Data), &ts)
		t.id, t.resumable = ts.TurnID, ts.Resumable
	case "Completed":
		t.completed = true
	case "Error", "error":
		t.failure = ev.Data
	}
	// An event the orchestrator could not store (JetStream down) comes
	// without an id; an EventSource's id is then still the last one's,
	// which is not this event's.
	switch {
	case ev.ID != "" && ev.OwnID:
		t.ids = append(t.ids, ev.ID)
		t.lastID = ev.ID
	case ev.Comment == "":
		t.unnamed++
	}
}

func (t *chatTurn) ended() bool { return t.completed || t.failure != "" }

// checkTurn reads turn t whole from its start and counts the events its
// client never received, or received twice. A read cut by a fault (an
// error event, a transient error) is read again, as a client would.
func (d *driver) checkTurn(ctx context.Context, r *result, t *chatTurn) error {
	var whole []string
	var problem string
	for attempt := 1; ; attempt++ {
		whole, problem = nil, ""
		_, err := d.api.stream(ctx, http.MethodGet, "/v1/conversations/"+r.id+"/turns/"+t.id+":watch", nil, nil,
			func(ev httpgatewaytest.Event, _ string) bool {
				switch {
				case ev.Name == "error":
					problem = "error event " + ev.Data
				case ev.ID != "":
					whole = append(whole, ev.ID)
				}
				return true
			})
		if err != nil && !transient(err) {
			return fmt.Errorf("reading turn %s again: %w", t.id, err)
		}
		if err == nil && problem == "" && len(whole) > 0 {
			break
		}
		if err != nil {
			problem = err.Error()
		}
		r.note("reading turn %s again from its start: %d events, %s", t.id, len(whole), problem)
		if attempt == 10 {
			return failed("turn %s read again from its start: %d events, %s", t.id, len(whole), problem)
		}
		if err := pause(ctx, time.Second); err != nil {
			return err
		}
	}
	got := map[string]int{}
	for _, id := range t.ids {
		got[id]++
	}
	missing := 0
	for _, id := range whole {
		switch n := got[id]; {
		case n == 0:
			missing++
		case n > 1:
			r.duplicateEvents += n - 1
		}
	}
	// A stored event the client got without its id (see chatTurn) is not
	// lost: each event received unnamed accounts for at most one.
	if missing > 0 && t.unnamed > 0 {
		r.note("%d events of the log not received by id, %d received without one", missing, t.unnamed)
	}
	r.lost += max(0, missing-t.unnamed)
	return nil
}

func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// jobEvent is the data of a job watch event.
type jobEvent struct {
	Job struct {
		ID       string `json:"id"`
		ParentID string `json:"parentId"`
		Type     string `json:"type"`
		Status   string `json:"status"`
		Error    string `json:"error"`
		EndTime  string `json:"endTime"`
	} `json:"job"`
}

var terminalJob = map[string]bool{"JOB_STATUS_COMPLETE": true, "JOB_STATUS_FAILED": true, "JOB_STATUS_CANCELLED": true}

// analysis submits an analysis whose plan (scripted on the simulator)
// calls both market-data tools for a ticker of its own, and watches it to
// its end, reconnecting with Last-Event-ID whenever the stream is cut.
// Each submission attempt gets a new ticker, so that an attempt whose
// answer was lost (its analysis runs on, unwatched) is not mistaken for a
// second execution of the next attempt's tool jobs.
func (d *driver) analysis(ctx context.Context, n int, slow bool, r *result) error {
	var root string
	for attempt := 1; root == ""; attempt++ {
		ticker := fmt.Sprintf("E2E%03dA%d", n, attempt)
		if slow {
			ticker = fmt.Sprintf("SLOW%03dA%d", n, attempt)
		}
		d.c.sim.When(providersim.Match{WithTools: true, LastUserContains: "ticker " + ticker + "."}).
			ToolCall("get_stock_price", map[string]any{"ticker": ticker}).
			ToolCall("get_financials", map[string]any{"ticker": ticker, "report_type": "annual"})
		var submitted struct {
			Job struct{ ID string } `json:"job"`
		}
		resp, _, err := d.api.do(ctx, http.MethodPost, "/v1/analyses", map[string]string{
			"query": fmt.Sprintf("Analyse the last quarter of ticker %s.", ticker), "responseType": "generic_analysis",
		}, nil)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&submitted)
			resp.Body.Close()
			root = submitted.Job.ID
		}
		if err != nil {
			if !transient(err) || attempt == 5 {
				return err
			}
			r.note("submit attempt %d: %v", attempt, err)
			if err := pause(ctx, time.Second); err != nil {
				return err
			}
		}
	}
	r.id = root
	// The watch's event ids, mapped to the stream's sequences to compare
	// with the stream's own log.
	ids, err := d.c.eventIDs(ctx)
	if err != nil {
		return err
	}
	live := map[uint64]jobEvent{} // by stream sequence
	var final jobEvent
	if err := d.watchJob(ctx, root, r, func(id uint64, je jobEvent) {
		live[ids.Seq(id)] = je
		if je.Job.ID == root && terminalJob[je.Job.Status] {
			final = je
		}
	}); err != nil {
		d.noteTree(root, r)
		return err
	}
	r.events = len(live)
	// The watch ends once every job of the tree has delivered its final
	// event; lastSeen is the last event it delivered.
	var lastSeen uint64
	jobs := map[string]bool{}
	for seq, je := range live {
		jobs[je.Job.ID] = true
		lastSeen = max(lastSeen, seq)
	}
	// A watch from the start of the finished analysis must replay it and
	// end, as it does for a client that opens the analysis later.
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = d.watchJob(rctx, root, nil, func(_ uint64, je jobEvent) { jobs[je.Job.ID] = true })
	cancel()
	if err != nil {
		r.replayHung = true
		r.note("a watch from the start of the finished analysis did not end within a minute: %v", err)
	}
	var tree struct {
		Job treeJob `json:"job"`
	}
	if err := d.api.call(ctx, http.MethodGet, "/v1/jobs/"+root, nil, &tree); err != nil {
		return err
	}
	tree.Job.collect(jobs)
	// Every event of every job of the tree, read from the stream itself
	// (am.evt.<tenant>.job.<root>.<job>.<status>, see JobEvent).
	for id := range jobs {
		log, err := d.c.eventLog(ctx, "am.evt.default.job."+events.SubjectToken(root)+"."+events.SubjectToken(id)+".*")
		if err != nil {
			return fmt.Errorf("reading job %s's events: %w", id, err)
		}
		final := false
		for _, e := range log {
			var je orchestratorv1.JobEvent
			if err := e.event.GetPayload().UnmarshalTo(&je); err != nil {
				return fmt.Errorf("job event %d: %w", e.seq, err)
			}
			status := je.GetJob().GetStatus().String()
			final = final || terminalJob[status]
			if _, ok := live[e.seq]; ok {
				continue
			}
			if e.seq > lastSeen {
				r.afterEnd++
				r.note("job %s went %s (event %d) after the analysis's watch ended at event %d", id, status, e.seq, lastSeen)
				continue
			}
			r.lost++
			r.note("event %d (job %s %s) never reached the client", e.seq, id, status)
		}
		if !final {
			r.lost++
			r.note("job %s has no final event in the stream", id)
		}
	}
	if final.Job.Status != "JOB_STATUS_COMPLETE" {
		if final.Job.Error == "" {
			return errors.New("analysis " + root + " ended " + final.Job.Status + " without an error")
		}
		return failed("analysis ended %s: %s", final.Job.Status, final.Job.Error)
	}
	return nil
}

// treeJob is a job with its children, as GET /v1/jobs/{id} answers.
type treeJob struct {
	ID       string    `json:"id"`
	Type     string    `json:"type"`
	Status   string    `json:"status"`
	Attempts int       `json:"attempts"`
	Error    string    `json:"error"`
	Children []treeJob `json:"children"`
}

// noteTree notes the state of every job of an analysis that did not end.
func (d *driver) noteTree(root string, r *result) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var tree struct {
		Job treeJob `json:"job"`
	}
	if err := d.api.call(ctx, http.MethodGet, "/v1/jobs/"+root, nil, &tree); err != nil {
		r.note("its tree: %v", err)
		return
	}
	var walk func(j treeJob)
	walk = func(j treeJob) {
		r.note("job %s %s %s attempts=%d %s", j.ID, strings.TrimPrefix(j.Type, "JOB_TYPE_"), strings.TrimPrefix(j.Status, "JOB_STATUS_"), j.Attempts, j.Error)
		for _, c := range j.Children {
			walk(c)
		}
	}
	walk(tree.Job)
}

func (j treeJob) collect(into map[string]bool) {
	if j.ID != "" {
		into[j.ID] = true
	}
	for _, c := range j.Children {
		c.collect(into)
	}
}

// watchJob reads GET /v1/jobs/{root}:watch until the analysis's last
// event, calling fn with each event once. A cut stream is reconnected
// with Last-Event-ID, through the front, so usually to another gateway
// replica. r (nil for a replay) receives notes about reconnects.
func (d *driver) watchJob(ctx context.Context, root string, r *result, fn func(seq uint64, je jobEvent)) error {
	var lastID string
	var rootDone bool
	for attempt := 1; ; attempt++ {
		header := http.Header{}
		if lastID != "" {
			header.Set("Last-Event-ID", lastID)
		}
		ended := false
		first := true
		backend, err := d.api.stream(ctx, http.MethodGet, "/v1/jobs/"+root+":watch", nil, header, func(ev httpgatewaytest.Event, backend string) bool {
			if ev.Name == "error" {
				return true
			}
			if hook := d.watchHook(); first && r != nil && hook != nil {
				hook(root, backend)
			}
			first = false
			seq, perr := strconv.ParseUint(ev.ID, 10, 64)
			var je jobEvent
			if perr != nil || json.Unmarshal([]byte(ev.Data), &je) != nil {
				return true
			}
			fn(seq, je)
			lastID = ev.ID
			if je.Job.ID == root && terminalJob[je.Job.Status] {
				rootDone = true
			}
			return true
		})
		if err == nil {
			ended = true
		}
		if ended && rootDone {
			return nil
		}
		if err != nil && !transient(err) {
			return err
		}
		if r != nil {
			r.note("watch via %s cut after id %q (%v); reconnecting with Last-Event-ID", backend, lastID, err)
		}
		if attempt > 60 {
			return fmt.Errorf("watch of %s: gave up after %d reconnects: %v", root, attempt, err)
		}
		if err := pause(ctx, 300*time.Millisecond); err != nil {
			return err
		}
	}
}

// ingest stores a ticket long enough for the LLM prose extractor, waits
// for its extraction job, and searches for a word only it contains.
func (d *driver) ingest(ctx context.Context, n int, slow bool, r *result) error {
	title := fmt.Sprintf("Ticket E2E-%d: invoice export fails", n)
	if slow {
		title = fmt.Sprintf("Ticket %s-%d: invoice export fails", slowMarker, n)
	}
	token := fmt.Sprintf("zebrafrost%d", n)
	doc := map[string]string{
		"sourceType": "SOURCE_TYPE_TICKET",
		"sourceUrl":  fmt.Sprintf("https://tickets.example.com/E2E-%d", n),
		"title":      title,
		"rawContent": fmt.Sprintf("Ticket E2E-%d. Customer %d reports that the invoice export for March fails with a timeout "+
			"after thirty seconds whenever the report includes more than two thousand lines. The support agent reproduced it "+
			"on the staging system and found the %s job stuck on a lock held by the nightly reconciliation. Priority: high. "+
			"Component: billing. Assigned to the payments team, who will ship a fix in the next release.", n, n%977, token),
	}
	var out struct {
		Document struct {
			ID              string
			ExtractionJobID string `json:"extractionJobId"`
		} `json:"document"`
		Unchanged       bool   `json:"unchanged"`
		ExtractionJobID string `json:"extractionJobId"`
	}
	if err := d.api.call(ctx, http.MethodPost, "/v1/documents", doc, &out); err != nil {
		return err
	}
	r.id = out.Document.ID
	// A retry (the first answer lost to a kill) may find the content
	// indexed already, by the ingest it retried or by reconciliation
	// finishing it: the answer is "unchanged", and the extraction job is
	// the document's (IngestDocumentResponse names only a job it queued).
	if out.Unchanged && out.ExtractionJobID == "" {
		out.ExtractionJobID = out.Document.ExtractionJobID
		r.note("the retried ingest found the document indexed: its extraction job %s", out.ExtractionJobID)
	}
	if r.id == "" || out.ExtractionJobID == "" {
		return fmt.Errorf("POST /v1/documents: document %q, extraction job %q", r.id, out.ExtractionJobID)
	}
	for {
		var job struct {
			Job struct {
				Status, Error string
			} `json:"job"`
		}
		if err := d.api.call(ctx, http.MethodGet, "/v1/extraction-jobs/"+out.ExtractionJobID, nil, &job); err != nil {
			return err
		}
		switch job.Job.Status {
		case "EXTRACTION_JOB_STATUS_SUCCEEDED":
		case "EXTRACTION_JOB_STATUS_FAILED", "EXTRACTION_JOB_STATUS_PARTIALLY_FAILED", "EXTRACTION_JOB_STATUS_SUPERSEDED":
			if job.Job.Error == "" {
				return fmt.Errorf("extraction job %s ended %s without an error", out.ExtractionJobID, job.Job.Status)
			}
			return failed("extraction job ended %s: %s", job.Job.Status, job.Job.Error)
		default:
			if err := pause(ctx, 200*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		break
	}
	// The intake's events: the job queued and finished, the document indexed.
	for _, want := range []struct{ filter, what string }{
		{"am.evt.default.extraction_job." + out.ExtractionJobID + ".queued", "queued"},
		{"am.evt.default.extraction_job." + out.ExtractionJobID + ".succeeded", "succeeded"},
		{"am.evt.default.document." + r.id + ".indexed", "indexed"},
	} {
		log, err := d.c.eventLog(ctx, want.filter)
		if err != nil {
			return fmt.Errorf("reading %s: %w", want.filter, err)
		}
		r.events += len(log)
		if len(log) == 0 {
			r.lost++
			r.note("no %s event in the stream (%s)", want.what, want.filter)
		}
	}
	var found struct {
		Hits []struct {
			ChunkID    string `json:"chunkId"`
			DocumentID string `json:"documentId"`
			Text       string `json:"text"`
		} `json:"hits"`
	}
	// The replica that answers may not be the one that indexed: its
	// search follows the other's changes, a little later.
	searched := time.Now()
	for attempt := 1; ; attempt++ {
		found.Hits = nil
		if err := d.api.call(ctx, http.MethodPost, "/v1/search", map[string]any{"query": token, "limit": 20}, &found); err != nil {
			return err
		}
		hit := false
		for _, h := range found.Hits {
			hit = hit || h.DocumentID == r.id
		}
		if hit {
			if attempt > 1 {
				r.note("found by search %v after the extraction ended (%d searches)", time.Since(searched).Round(time.Millisecond), attempt)
			}
			break
		}
		if time.Since(searched) > 20*time.Second {
			break
		}
		if err := pause(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	ours := 0
	for _, h := range found.Hits {
		if h.DocumentID != r.id {
			continue
		}
		ours++
		if seen[h.ChunkID] || seen["text:"+h.Text] {
			r.duplicateChunks++
			r.note("search hit repeats chunk %s", h.ChunkID)
		}
		seen[h.ChunkID], seen["text:"+h.Text] = true, true
	}
	if ours == 0 {
		return failed("search for %q found no chunk of document %s (%d hits)", token, r.id, len(found.Hits))
	}
	return nil
}

// runEvent is the data of a classification run event.
type runEvent struct {
	Type       string `json:"type"`
	LogMessage string `json:"logMessage"`
	Data       struct {
		RunID      string `json:"runId"`
		Error      string `json:"error"`
		StopReason string `json:"stopReason"`
		Reason     string `json:"reason"`
	} `json:"data"`
}

// classify imports six conversations of a customer of its own and runs a
// classification of them (its plan scripted on the simulator), approving
// every fetch and batch. A cut stream is resumed with Last-Event-ID; a
// command whose answer was cut is sent again only if the run still waits
// for it. Each start attempt gets its own customer, for the reason the
// analysis gets its own ticker.
func (d *driver) classify(ctx context.Context, n int, slow bool, r *result) error {
	prefix := "E2E"
	if slow {
		prefix = slowMarker
	}
	seen := map[uint64]string{} // event id → type
	var lastID uint64
	var last, streamErr string
	var ids []string // this call's event ids, for the notes
	read := func(ev httpgatewaytest.Event, _ string) bool {
		if ev.Name == "error" {
			// The gateway's end of a stream that failed upstream; its id
			// is the last event's, kept by the EventSource rules.
			streamErr = ev.Data
			return true
		}
		var re runEvent
		if json.Unmarshal([]byte(ev.Data), &re) == nil && re.Data.RunID != "" && r.id == "" {
			r.id = re.Data.RunID
		}
		if seq, err := strconv.ParseUint(ev.ID, 10, 64); err == nil {
			seen[seq] = ev.Name
			ids = append(ids, ev.ID)
			if seq >= lastID {
				lastID, last = seq, ev.Name
			}
		}
		if ev.Name == "agent.run.error" || ev.Name == "agent.run.stopped" {
			last = ev.Name + ": " + firstNonEmpty(re.Data.Error, re.Data.StopReason, re.Data.Reason, re.LogMessage, ev.Data)
		}
		return true
	}
	// call streams one request of the run and notes what it delivered.
	call := func(label, path string, body any, h http.Header) error {
		streamErr, ids = "", nil
		backend, err := d.api.stream(ctx, http.MethodPost, path, body, h, read)
		if err == nil && streamErr != "" {
			err = &streamError{data: streamErr}
		}
		span := "no events"
		if len(ids) > 0 {
			span = "ids " + ids[0] + ".." + ids[len(ids)-1]
		}
		r.note("%s via %s: %s, at %s; %v", label, orUnknown(backend), span, strings.TrimPrefix(last, "agent.run."), err)
		return err
	}
	for attempt := 1; r.id == ""; attempt++ {
		customer := fmt.Sprintf("%s%03dR%d", prefix, n, attempt)
		if err := d.importConversations(ctx, customer); err != nil {
			return err
		}
		d.c.sim.When(providersim.Match{JSON: true, Func: func(q *providersim.Request) bool {
			u := q.LastUserText()
			return strings.HasPrefix(u, "Write the classification plan") && strings.Contains(u, "customer "+customer+".")
		}}).JSON(map[string]any{
			"targetSampleSize": 6, "strategy": "every conversation of the customer",
			"planDetails": "All six conversations of customer " + customer + ".", "additionalInstructions": "",
			"query": map[string]any{"customer": customer},
		})
		err := call("start", "/agents/classificationAgent/runs",
			map[string]string{"instruction": fmt.Sprintf("Classify the conversations of customer %s.", customer)}, nil)
		if r.id == "" {
			if err == nil {
				return errors.New("the run's stream named no run")
			}
			if !transient(err) || attempt == 5 {
				return err
			}
			if err := pause(ctx, time.Second); err != nil {
				return err
			}
		}
	}
	base := "/agents/classificationAgent/runs/" + r.id
	for step := 0; step < 60; step++ {
		var err error
		switch {
		case last == "agent.run.completed":
			return d.checkRunLog(ctx, seen, 0, r)
		case strings.HasPrefix(last, "agent.run.error"), strings.HasPrefix(last, "agent.run.stopped"):
			if err := d.checkRunLog(ctx, seen, 0, r); err != nil {
				return err
			}
			return failed("run ended %s", last)
		case last == "agent.run.awaiting_fetch_approval", last == "agent.run.awaiting_batch_approval":
			command := "ApproveFetch"
			if last == "agent.run.awaiting_batch_approval" {
				command = "ApproveBatch"
			}
			before := lastID
			err = call(command, base+"/command", map[string]string{"type": command}, nil)
			if err == nil && lastID == before {
				return fmt.Errorf("run %s: %s answered no event", r.id, command)
			}
		default:
			// Cut mid-way: pick the run up where the client lost it.
			err = call(fmt.Sprintf("resume after %d", lastID), base+"/resume", map[string]any{},
				http.Header{"Last-Event-ID": {strconv.FormatUint(lastID, 10)}})
		}
		if err != nil {
			var he *httpError
			if !transient(err) && !(errors.As(err, &he) && he.status == http.StatusConflict) {
				// Refused: the run may have moved on without the client
				// (a command applied before its stream was cut, and
				// retried). What the run says decides the outcome.
				var run struct {
					Run struct{ State string } `json:"run"`
				}
				if gerr := d.api.call(ctx, http.MethodGet, base, nil, &run); gerr == nil && run.Run.State == "RUN_STATE_COMPLETED" {
					r.note("the run completed without the client: %v", err)
					return d.checkRunLog(ctx, seen, 0, r)
				}
				if lerr := d.checkRunLog(ctx, seen, lastID, r); lerr != nil {
					r.note("%v", lerr)
				}
				return err
			}
			last = "" // resume
			if err := pause(ctx, 500*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("run %s not finished after 60 steps, at %s", r.id, last)
}

// checkRunLog reads the run's events from the NATS stream: they must
// number 1..N without a gap, the client must have received each (up to
// upTo, when not 0: a client that gave up saw only so far), and the log
// must hold each event the client received.
func (d *driver) checkRunLog(ctx context.Context, seen map[uint64]string, upTo uint64, r *result) error {
	log, dup, err := d.c.runLog(ctx, r.id)
	if err != nil {
		return fmt.Errorf("reading run %s's events: %w", r.id, err)
	}
	r.events = len(seen)
	var maxID uint64
	for id := range log {
		maxID = max(maxID, id)
	}
	if upTo > 0 {
		maxID = min(maxID, upTo)
	}
	for id := uint64(1); id <= maxID; id++ {
		if _, ok := log[id]; !ok {
			r.lost++
			r.note("the run's log has no event %d (ids run 1..%d)", id, maxID)
			continue
		}
		switch got, ok := seen[id]; {
		case !ok:
			r.lost++
			r.note("event %d (%s) never reached the client", id, log[id])
		case got != log[id]:
			r.lost++
			r.note("the client received event %d as %s; the run's log holds %s there", id, got, log[id])
		}
	}
	for id, typ := range seen {
		if _, ok := log[id]; !ok {
			r.phantom++
			r.note("the client received event %d (%s), which the run's log does not hold", id, typ)
		}
	}
	if dup > 0 {
		r.duplicateEvents += dup
		r.note("%d run sequence numbers were published as two different events", dup)
	}
	return nil
}

// importConversations stores six conversations of customer.
func (d *driver) importConversations(ctx context.Context, customer string) error {
	var lines []string
	for i := 1; i <= 6; i++ {
		conv := map[string]any{
			"id": fmt.Sprintf("%s-c%d", customer, i), "channel": "chat", "customer": customer,
			"messages": []map[string]string{
				{"role": "customer", "text": fmt.Sprintf("My order %d has not arrived.", i)},
				{"role": "agent", "text": "It ships today; here is the tracking number."},
			},
		}
		b, _ := json.Marshal(conv)
		lines = append(lines, string(b))
	}
	var out struct {
		Imported int `json:"imported"`
	}
	if err := d.api.call(ctx, http.MethodPost, "/v1/classifier/conversations:import", map[string]string{"jsonl": strings.Join(lines, "\n")}, &out); err != nil {
		return err
	}
	if out.Imported != 6 {
		return fmt.Errorf("import of %s: %d of 6 conversations imported", customer, out.Imported)
	}
	return nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// sqlSession is what the SQL agent answers.
type sqlSession struct {
	Session struct {
		ID    string `json:"id"`
		Stage string `json:"stage"`
		Turns []struct {
			Role, Text string
		} `json:"turns"`
	} `json:"session"`
	Reply        string `json:"reply"`
	SQLToConfirm string `json:"sqlToConfirm"`
	Result       *struct {
		Rows []json.RawMessage `json:"rows"`
	} `json:"result"`
}

// sqlJob walks a SQL session: the user's query, confirmed, then its
// result written to a new table (create mode, so a second execution of
// the write would fail on the existing table), confirmed. An input whose
// answer was lost is sent again only if the session is still at the stage
// it was sent in, as a UI that re-reads the session would do.
func (d *driver) sqlJob(ctx context.Context, n int, slow bool, r *result) error {
	var s sqlSession
	if err := d.api.call(ctx, http.MethodPost, "/v1/sql/sessions", map[string]string{"connection": "shop"}, &s); err != nil {
		return err
	}
	r.id = s.Session.ID
	query := "SELECT c.country, count(*) AS orders, sum(o.total) AS total FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.country ORDER BY c.country"
	if slow {
		query = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM n WHERE x < 3000000) SELECT count(*) AS c FROM n"
	}
	table := fmt.Sprintf("e2e_report_%d", n)
	steps := []struct {
		field, value string
	}{
		{"text", query},
		{"selection", "confirm"},
		// The confirmed read asks for its job name (EXECUTE_SQL).
		{"selection", "default"},
		{"selection", "write"},
		{"text", table},
		{"selection", "create"},
		{"selection", "confirm"},
		// After a write the session offers SEND_EMAIL; finish instead.
		{"selection", "done"},
	}
	stage := s.Session.Stage
	var resultRows int
	for i, st := range steps {
		if hook := d.sqlHook(); slow && hook != nil {
			hook(i+1, st.value)
		}
		requestID := fmt.Sprintf("step-%d", i+1)
		for attempt := 1; ; attempt++ {
			if attempt > 60 {
				return fmt.Errorf("step %d (%s=%s): no answer after %d attempts", i+1, st.field, st.value, attempt)
			}
			var out sqlSession
			err := func() error {
				// The request id makes a resend of an input that was applied
				// answer as it did, not act again.
				body := map[string]string{st.field: st.value, "requestId": requestID}
				resp, _, err := d.api.do(ctx, http.MethodPost, "/v1/sql/sessions/"+r.id+":input", body, nil)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				return json.NewDecoder(resp.Body).Decode(&out)
			}()
			var he *httpError
			switch {
			case err == nil && out.Session.Stage == stage && strings.Contains(out.Reply, "was interrupted"):
				// The execution this step confirmed died with its replica;
				// the session says it may have run and asks again, and the
				// user confirms again.
				r.note("step %d: %s", i+1, oneLine(out.Reply))
				r.interrupted++
				requestID = fmt.Sprintf("step-%d-again-%d", i+1, attempt) // a new input
				continue
			case err == nil:
				if i == 2 {
					// A resent input answered as before carries no result
					// table (the job says what ran): the rows are unknown.
					resultRows = -1
					if out.Result != nil {
						resultRows = len(out.Result.Rows)
					}
				}
				stage = out.Session.Stage
			case errors.As(err, &he) && (strings.Contains(he.body, "SQL_RUNNING") || strings.Contains(he.body, "SESSION_CONFLICT")):
				// Its execution is still recorded as running (perhaps in a
				// killed replica, until its deadline passes).
				if attempt == 1 || attempt%10 == 0 {
					r.note("step %d (%s=%s): %s; waiting", i+1, st.field, st.value, oneLine(he.reason()))
				}
				if err := pause(ctx, 2*time.Second); err != nil {
					return err
				}
				continue
			case !transient(err):
				return err
			default:
				// The answer was lost: did the input take effect?
				var now sqlSession
				if gerr := d.api.call(ctx, http.MethodGet, "/v1/sql/sessions/"+r.id, nil, &now); gerr != nil {
					return gerr
				}
				switch now.Session.Stage {
				case stage:
					r.note("step %d (%s=%s): %v; session still at %s, sending again", i+1, st.field, st.value, err, stage)
					if err := pause(ctx, 500*time.Millisecond); err != nil {
						return err
					}
					continue
				case "EXECUTING":
					// Applied, and running or dead while running: the
					// session answers the same input once it knows.
					r.note("step %d (%s=%s): %v; session EXECUTING, sending again until it answers", i+1, st.field, st.value, err)
					if err := pause(ctx, 2*time.Second); err != nil {
						return err
					}
					continue
				}
				r.note("step %d (%s=%s): answer lost (%v) but the session moved on to %s", i+1, st.field, st.value, err, now.Session.Stage)
				stage = now.Session.Stage
				if i == 2 {
					resultRows = -1 // unknown: the result was in the lost answer
				}
			}
			break
		}
	}
	var final sqlSession
	if err := d.api.call(ctx, http.MethodGet, "/v1/sql/sessions/"+r.id, nil, &final); err != nil {
		return err
	}
	wrote, exists := 0, 0
	for _, t := range final.Session.Turns {
		if strings.HasPrefix(t.Text, "Wrote ") {
			wrote++
		}
		if strings.Contains(t.Text, "Writing failed") && strings.Contains(strings.ToLower(t.Text), "exist") {
			exists++
		}
	}
	rows, err := d.c.tableRows(table)
	switch {
	case err != nil:
		if final.Session.Stage == "DONE" {
			return fmt.Errorf("session %s says done but table %s: %v", r.id, table, err)
		}
		return failed("session ended at %s without writing %s: %s", final.Session.Stage, table, lastAgentTurn(final))
	case resultRows >= 0 && rows != resultRows:
		r.doubleWrites++
		r.note("table %s holds %d rows, the query returned %d", table, rows, resultRows)
	}
	switch {
	case wrote+exists > 1 && r.interrupted > 0:
		r.rerunWrites += wrote + exists - 1
		r.note("the write ran %d times (%d wrote, %d found the table already written), confirmed again after the session said it was interrupted and may have run", wrote+exists, wrote, exists)
	case wrote+exists > 1:
		r.doubleWrites += wrote + exists - 1
		r.note("the write ran %d times (%d wrote, %d found the table already written)", wrote+exists, wrote, exists)
	}
	if final.Session.Stage != "DONE" {
		return failed("session ended at %s: %s", final.Session.Stage, lastAgentTurn(final))
	}
	return nil
}

func lastAgentTurn(s sqlSession) string {
	for i := len(s.Session.Turns) - 1; i >= 0; i-- {
		if s.Session.Turns[i].Role != "user" {
			return s.Session.Turns[i].Text
		}
	}
	return ""
}
