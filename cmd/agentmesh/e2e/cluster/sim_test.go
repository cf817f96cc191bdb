//go:build e2ecluster

package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// Execution kinds: the side effects the issue says must never run twice,
// observed where they leave the mesh.
const (
	kindToolJob    = "tool job"              // a market-data request of an analysis's tool job
	kindPlanning   = "planning call"         // an analysis's planning model call
	kindBatch      = "classification batch"  // a classifier model call for one batch of conversations
	kindExtraction = "extraction"            // the LLM prose extractor's call for one document
	kindSQL        = "SQL execution (write)" // a confirmed write of a query's result to a new table
)

// execution is one observed execution of a side effect.
type execution struct {
	kind, key string
	// by is the process that made the request (the orchestrator replica
	// for a tool job, the model gateway replica for a model call); empty
	// when it could not be told.
	by         string
	start, end time.Time
	// completed is false when the caller went away before the answer was
	// written (it was killed, or its own caller gave up).
	completed bool
	done      chan struct{}
}

// recorder keeps every execution, and tells the fault injector when one
// of a kind is under way.
type recorder struct {
	mu      sync.Mutex // guards the fields below
	all     []*execution
	waiters []waiter
	// owner names the process holding the client end of a connection to
	// one of the test's servers, for execution.by.
	owner func(client, server string) string
}

type waiter struct {
	kind string
	ch   chan *execution
}

// begin records the start of an execution, made by the request req, and
// hands it to a waiter for its kind, if any.
func (r *recorder) begin(kind, key string, req *http.Request) *execution {
	e := &execution{kind: kind, key: key, start: time.Now(), done: make(chan struct{})}
	if local, ok := req.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && r.owner != nil {
		e.by = r.owner(req.RemoteAddr, local.String())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, e)
	kept := r.waiters[:0]
	for _, w := range r.waiters {
		if w.kind == kind {
			w.ch <- e
			continue
		}
		kept = append(kept, w)
	}
	r.waiters = kept
	return e
}

func (r *recorder) finish(e *execution, completed bool) {
	r.mu.Lock()
	e.end, e.completed = time.Now(), completed
	r.mu.Unlock()
	close(e.done)
}

// next returns a channel receiving the next execution of kind to begin.
func (r *recorder) next(kind string) <-chan *execution {
	ch := make(chan *execution, 1)
	r.mu.Lock()
	r.waiters = append(r.waiters, waiter{kind, ch})
	r.mu.Unlock()
	return ch
}

// executions returns a copy of what was recorded.
func (r *recorder) executions() []execution {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]execution, len(r.all))
	for i, e := range r.all {
		out[i] = *e
	}
	return out
}

// simServer is the provider simulator the model gateways call, as their
// one OpenAI-compatible provider, recording the model calls that are
// executions.
type simServer struct {
	*providersim.Sim
	url string
	srv *http.Server
}

// slowMarker in a text makes the simulator, or the market-data endpoint,
// take slowDelay to answer it: the fault injector kills a process while
// it waits.
const (
	slowMarker = "SLOW"
	slowDelay  = 2500 * time.Millisecond
)

func startSim(rec *recorder) (*simServer, error) {
	sim := providersim.New(providersim.Options{Flavor: providersim.OpenAI, NoRecord: true})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := sim.Handler()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		kind, key := modelCallExecution(body)
		if kind == "" {
			h.ServeHTTP(w, req)
			return
		}
		e := rec.begin(kind, key, req)
		if strings.Contains(key, slowMarker) {
			select {
			case <-time.After(slowDelay):
			case <-req.Context().Done():
				rec.finish(e, false)
				return
			}
		}
		h.ServeHTTP(w, req)
		rec.finish(e, req.Context().Err() == nil)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	return &simServer{Sim: sim, url: "http://" + lis.Addr().String(), srv: srv}, nil
}

func (s *simServer) close() { _ = s.srv.Close() }

// chatBody is the part of an OpenAI chat completion request the recorder
// reads.
type chatBody struct {
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
	Tools          []json.RawMessage `json:"tools"`
	ResponseFormat struct {
		JSONSchema struct {
			Schema map[string]any `json:"schema"`
		} `json:"json_schema"`
	} `json:"response_format"`
}

// modelCallExecution tells which execution a model call is, by the
// prompts the services own (classifier modelcalls, indexer extract,
// orchestrator planner), and its key: the batch's conversation ids, the
// document's title, the analysis's query. "" for any other call.
func modelCallExecution(raw []byte) (kind, key string) {
	var b chatBody
	if json.Unmarshal(raw, &b) != nil || len(b.Messages) == 0 {
		return "", ""
	}
	text := func(i int) string {
		if s, ok := b.Messages[i].Content.(string); ok {
			return s
		}
		return ""
	}
	var system, user string
	for i, m := range b.Messages {
		switch m.Role {
		case "system":
			system = text(i)
		case "user":
			user = text(i)
		}
	}
	switch {
	case strings.HasPrefix(user, "Classify these conversations"):
		ids := schemaEnum(b.ResponseFormat.JSONSchema.Schema, "classifications", "id")
		sort.Strings(ids)
		return kindBatch, strings.Join(ids, ",")
	case strings.HasPrefix(system, "You extract structured data"):
		title, _, _ := strings.Cut(strings.TrimPrefix(user, "Title: "), "\n")
		return kindExtraction, title
	case strings.HasPrefix(system, "You are a planning agent") && len(b.Tools) > 0 && len(b.Messages) == 2:
		// The first round only: a feedback round is the same execution.
		return kindPlanning, user
	}
	return "", ""
}

// schemaEnum digs properties.<array>.items.properties.<field>.enum out of
// a JSON schema.
func schemaEnum(schema map[string]any, array, field string) []string {
	get := func(m any, k string) map[string]any {
		mm, _ := m.(map[string]any)
		v, _ := mm[k].(map[string]any)
		return v
	}
	f := get(get(get(get(schema, "properties"), array), "items"), "properties")
	enum, _ := get(f, field)["enum"].([]any)
	out := make([]string, 0, len(enum))
	for _, v := range enum {
		out = append(out, fmt.Sprint(v))
	}
	return out
}

// marketData is the market-data endpoint of get_stock_price and
// get_financials (services/orchestrator/internal/analysis/marketdata's
// contract): every request is a tool job's execution.
type marketData struct {
	url string
	srv *http.Server
}

func startMarketData(rec *recorder) (*marketData, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	serve := func(w http.ResponseWriter, r *http.Request) {
		ticker := r.URL.Query().Get("ticker")
		e := rec.begin(kindToolJob, r.URL.Path+"?ticker="+ticker, r)
		completed := false
		defer func() { rec.finish(e, completed) }()
		if strings.Contains(ticker, slowMarker) {
			select {
			case <-time.After(slowDelay):
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"ticker": ticker, "price": 42.5, "currency": "AUD", "revenue": 1.5e9, "net_income": 2.1e8, "pe_ratio": 14.2,
		})
		completed = r.Context().Err() == nil
	}
	mux.HandleFunc("GET /v1/quote", serve)
	mux.HandleFunc("GET /v1/financials", serve)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	return &marketData{url: "http://" + lis.Addr().String(), srv: srv}, nil
}

func (m *marketData) close() { _ = m.srv.Close() }
