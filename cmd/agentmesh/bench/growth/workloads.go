package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// api is a client of the gateway's public REST/SSE API in its open
// development mode (tenant "default", where `agentmesh up` loads the
// classifier's sample conversations).
type api struct {
	base string
	http *http.Client
	seq  atomic.Int64 // makes every document and question distinct
}

func newAPI(base string, conns int) *api {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 2 * conns
	tr.MaxIdleConnsPerHost = 2 * conns
	return &api{base: base, http: &http.Client{Transport: tr}}
}

// sample is the timing of one successful operation.
type sample struct {
	first time.Duration // to the first event; 0 for an operation without events
	whole time.Duration
}

// op performs one operation of a workload.
type op func(ctx context.Context) (sample, error)

// workload is one row kind of the table: an operation clients repeat, and
// the kind of stored item whose count is the row's level.
type workload struct {
	name string // as -workloads names it
	unit string // what ops/s counts, for the summary
	kind string // what each operation leaves stored
	// events says whether an operation has a first event to time.
	events bool
	// newClient prepares one client (chat: its conversation) and returns
	// the operation it repeats; each operation stores one more item of
	// kind, except chat turns, whose item is the conversation made here.
	newClient func(ctx context.Context) (op, error)
	// seed stores one more finished item of kind, through the same API.
	seed func(ctx context.Context) error
	// target is the floor for ops/s; 0 = none.
	target float64
}

// workloads returns the four workloads; a seeded conversation gets
// seedTurns turns.
func (a *api) workloads(seedTurns int) []workload {
	return []workload{
		{
			name: "chat", unit: "chat turns/s", kind: "conversations", events: true, target: 300,
			newClient: func(ctx context.Context) (op, error) {
				id, err := a.createConversation(ctx)
				if err != nil {
					return nil, err
				}
				return func(ctx context.Context) (sample, error) { return a.chatTurn(ctx, id) }, nil
			},
			seed: func(ctx context.Context) error {
				id, err := a.createConversation(ctx)
				for i := 0; err == nil && i < seedTurns; i++ {
					_, err = a.chatTurn(ctx, id)
				}
				return err
			},
		},
		{
			name: "analysis", unit: "analyses/s", kind: "analyses", events: true, target: 200,
			newClient: func(context.Context) (op, error) { return a.analysis, nil },
			seed:      func(ctx context.Context) error { _, err := a.analysis(ctx); return err },
		},
		{
			name: "classify", unit: "classification runs/s", kind: "classification runs", events: true,
			newClient: func(context.Context) (op, error) { return a.classification, nil },
			seed:      func(ctx context.Context) error { _, err := a.classification(ctx); return err },
		},
		{
			name: "ingest", unit: "document ingests/s", kind: "documents",
			newClient: func(context.Context) (op, error) { return a.ingest, nil },
			seed:      func(ctx context.Context) error { _, err := a.ingest(ctx); return err },
		},
	}
}

// httpError is a response outside 2xx.
type httpError struct {
	method, path string
	status       int
	body         string
}

func (e *httpError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d %s", e.method, e.path, e.status, strings.TrimSpace(e.body))
}

// do sends a request with a JSON body (none if body is nil) and returns
// the response, which is 2xx, or an error that says why not.
func (a *api) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, &httpError{method, path, resp.StatusCode, string(b)}
	}
	return resp, nil
}

// call sends a unary request and decodes the JSON answer into out.
func (a *api) call(ctx context.Context, method, path string, body, out any) error {
	resp, err := a.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

// stream sends a request answered by an event stream and calls fn with
// each event and its arrival time until the stream ends or fn returns
// false. The stream's own `event: error` is an error.
func (a *api) stream(ctx context.Context, method, path string, body any, fn func(ev event, at time.Time) bool) error {
	resp, err := a.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return fmt.Errorf("%s %s: HTTP %d with Content-Type %q, not an event stream", method, path, resp.StatusCode, ct)
	}
	r := newSSEReader(resp.Body)
	for {
		ev, err := r.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		at := time.Now()
		if ev.Name == "error" {
			return fmt.Errorf("%s %s: error event %s", method, path, ev.Data)
		}
		if !fn(ev, at) {
			return nil
		}
	}
}

func (a *api) createConversation(ctx context.Context) (string, error) {
	var created struct {
		Conversation struct{ ID string } `json:"conversation"`
	}
	if err := a.call(ctx, "POST", "/v1/conversations", map[string]any{}, &created); err != nil {
		return "", err
	}
	if created.Conversation.ID == "" {
		return "", errors.New("POST /v1/conversations: no conversation id")
	}
	return created.Conversation.ID, nil
}

// chatTurn sends one message to conversation id over the SSE route and
// reads the answer to its Completed event; an Error event fails the turn.
func (a *api) chatTurn(ctx context.Context, id string) (sample, error) {
	start := time.Now()
	var s sample
	var completed bool
	var failure string
	path := "/v1/conversations/" + id + "/messages:stream"
	msg := fmt.Sprintf("Question %d: what changed in the last quarter?", a.seq.Add(1))
	err := a.stream(ctx, "POST", path, map[string]string{"content": msg}, func(ev event, at time.Time) bool {
		if s.first == 0 {
			s.first = at.Sub(start)
		}
		switch ev.Name {
		case "Completed":
			completed = true
		case "Error":
			failure = ev.Data
		}
		return true
	})
	s.whole = time.Since(start)
	switch {
	case err != nil:
		return s, err
	case failure != "":
		return s, fmt.Errorf("POST %s: Error event %s", path, failure)
	case !completed:
		return s, fmt.Errorf("POST %s: the stream ended without Completed", path)
	}
	return s, nil
}

// analysis submits an analysis and watches it to its end: first is
// submit → first job event, whole is submit → the analysis's final event.
func (a *api) analysis(ctx context.Context) (sample, error) {
	start := time.Now()
	var s sample
	var submitted struct {
		Job struct{ ID string } `json:"job"`
	}
	q := fmt.Sprintf("Analyse BHP's quarter %d", a.seq.Add(1))
	if err := a.call(ctx, "POST", "/v1/analyses", map[string]string{"query": q, "responseType": "generic_analysis"}, &submitted); err != nil {
		return s, err
	}
	root := submitted.Job.ID
	if root == "" {
		return s, errors.New("POST /v1/analyses: no job id")
	}
	path := "/v1/jobs/" + root + ":watch"
	var final string
	err := a.stream(ctx, "GET", path, nil, func(ev event, at time.Time) bool {
		if s.first == 0 {
			s.first = at.Sub(start)
		}
		var je struct {
			Job struct {
				ID, Status, Error string
			} `json:"job"`
		}
		if json.Unmarshal([]byte(ev.Data), &je) == nil && je.Job.ID == root {
			switch je.Job.Status {
			case "JOB_STATUS_COMPLETE", "JOB_STATUS_FAILED", "JOB_STATUS_CANCELLED":
				final = je.Job.Status + " " + je.Job.Error
				s.whole = at.Sub(start)
			}
		}
		return true
	})
	switch {
	case err != nil:
		return s, err
	case final == "":
		return s, fmt.Errorf("GET %s: the stream ended before the analysis did", path)
	case !strings.HasPrefix(final, "JOB_STATUS_COMPLETE"):
		return s, fmt.Errorf("analysis %s ended %s", root, strings.TrimSpace(final))
	}
	return s, nil
}

// maxRunSteps bounds the requests of one classification run, so a run
// that never completes fails instead of looping.
const maxRunSteps = 50

// classification starts a run on the original agent's route and approves
// every fetch and batch until the run completes: first is the start's
// first event, whole the run's agent.run.completed.
func (a *api) classification(ctx context.Context) (sample, error) {
	start := time.Now()
	var s sample
	var runID, last string
	var seen []string // the run's event types and commands, for errors
	read := func(ev event, at time.Time) bool {
		if s.first == 0 {
			s.first = at.Sub(start)
		}
		var d struct {
			Type string `json:"type"`
			Data struct {
				RunID string `json:"runId"`
			} `json:"data"`
		}
		if json.Unmarshal([]byte(ev.Data), &d) == nil && d.Data.RunID != "" && runID == "" {
			runID = d.Data.RunID
		}
		last = ev.Name
		seen = append(seen, ev.ID+":"+strings.TrimPrefix(ev.Name, "agent.run."))
		return true
	}
	history := func() string {
		return "; the run's events: " + strings.Join(seen[max(len(seen)-12, 0):], " ")
	}
	instruction := fmt.Sprintf("Classify a sample of support conversations (bench run %d)", a.seq.Add(1))
	if err := a.stream(ctx, "POST", "/agents/classificationAgent/runs", map[string]string{"instruction": instruction}, read); err != nil {
		return s, err
	}
	if runID == "" {
		return s, errors.New("POST /agents/classificationAgent/runs: no runId in the run's events")
	}
	for range maxRunSteps {
		var command string
		switch last {
		case "agent.run.completed":
			s.whole = time.Since(start)
			return s, nil
		case "agent.run.awaiting_fetch_approval":
			command = "ApproveFetch"
		case "agent.run.awaiting_batch_approval":
			command = "ApproveBatch"
		default:
			return s, fmt.Errorf("run %s: the stream ended at %q%s", runID, last, history())
		}
		seen = append(seen, "→"+command)
		path := "/agents/classificationAgent/runs/" + runID + "/command"
		if err := a.stream(ctx, "POST", path, map[string]string{"type": command}, read); err != nil {
			return s, fmt.Errorf("%w%s", err, history())
		}
	}
	return s, fmt.Errorf("run %s: not completed after %d commands%s", runID, maxRunSteps, history())
}

// ingest stores one distinct small document.
func (a *api) ingest(ctx context.Context) (sample, error) {
	start := time.Now()
	n := a.seq.Add(1)
	doc := map[string]string{
		"sourceType": "SOURCE_TYPE_TICKET",
		"sourceUrl":  fmt.Sprintf("https://tickets.example.com/BENCH-%d", n),
		"title":      fmt.Sprintf("Ticket BENCH-%d: invoice export fails", n),
		"rawContent": fmt.Sprintf("Ticket BENCH-%d. Customer %d reports that the invoice export for March fails with a timeout "+
			"after 30 seconds. Priority: high. Component: billing. Assigned to the payments team.", n, n%977),
	}
	var out struct {
		Document struct{ ID string } `json:"document"`
	}
	if err := a.call(ctx, "POST", "/v1/documents", doc, &out); err != nil {
		return sample{}, err
	}
	if out.Document.ID == "" {
		return sample{}, errors.New("POST /v1/documents: no document id")
	}
	return sample{whole: time.Since(start)}, nil
}
