package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/agentmesh/agentmesh/services/modelgateway/modelgateway"
)

// mock is an OpenAI-compatible upstream answering after a fixed latency.
// It notes when it read each request and when its wait ended, so the
// bench can tell the request leg from the response leg and show that both
// paths met the same upstream.
type mock struct {
	alarms *alarms
	unary  []byte
	stream [][]byte

	mu    sync.Mutex
	notes [][3]int64 // request id, read and woke (Unix ns)
}

func newMock(latency time.Duration) *mock {
	m := &mock{alarms: newAlarms(latency)}
	m.unary, _ = json.Marshal(map[string]any{
		"id": "chatcmpl-bench", "object": "chat.completion", "created": 1, "model": "bench-model",
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "The quarterly revenue grew by four percent."}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": 42, "completion_tokens": 9, "total_tokens": 51},
	})
	chunk := func(delta map[string]any, finish any) []byte {
		b, _ := json.Marshal(map[string]any{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bench-model",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
		return []byte("data: " + string(b) + "\n\n")
	}
	for _, w := range []string{"The ", "quarterly ", "revenue ", "grew ", "by ", "four ", "percent."} {
		m.stream = append(m.stream, chunk(map[string]any{"content": w}, nil))
	}
	m.stream = append(m.stream, chunk(map[string]any{}, "stop"))
	usage, _ := json.Marshal(map[string]any{"id": "c", "object": "chat.completion.chunk", "choices": []any{}, "usage": map[string]any{"prompt_tokens": 42, "completion_tokens": 9, "total_tokens": 51}})
	m.stream = append(m.stream, []byte("data: "+string(usage)+"\n\n"), []byte("data: [DONE]\n\n"))
	return m
}

func (m *mock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/timeline" {
		m.serveTimeline(w)
		return
	}
	var req struct {
		Stream bool `json:"stream"`
	}
	body, _ := io.ReadAll(r.Body)
	read := time.Now()
	_ = json.Unmarshal(body, &req)
	m.alarms.wait() // a fixed latency, the same in both paths' rounds (precise.go)
	woke := time.Now()
	if id, ok := requestID(body); ok {
		m.mu.Lock()
		m.notes = append(m.notes, [3]int64{id, read.UnixNano(), woke.UnixNano()})
		m.mu.Unlock()
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(m.unary)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	for _, c := range m.stream {
		_, _ = w.Write(c)
		_ = rc.Flush()
	}
}

// serveTimeline answers GET /timeline with its notes since the last call
// (a JSON array of [id, read, woke]) and forgets them.
func (m *mock) serveTimeline(w http.ResponseWriter) {
	m.mu.Lock()
	notes := m.notes
	m.notes = nil
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(notes)
}

// requestID is the number after the last " #" in a request body: the id
// the load generator put at the end of the user message.
func requestID(body []byte) (int64, bool) {
	i := bytes.LastIndex(body, []byte(" #"))
	if i < 0 {
		return 0, false
	}
	j := i + 2
	for j < len(body) && body[j] >= '0' && body[j] <= '9' {
		j++
	}
	id, err := strconv.ParseInt(string(body[i+2:j]), 10, 64)
	return id, err == nil
}

// serveMock runs the mock on a loopback port and prints "ADDR <host:port>".
func serveMock(latency time.Duration) error {
	modelgateway.TuneGC() // as the load generator does, so collections stay rare
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newMock(latency), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		_ = srv.Close()
	}()
	fmt.Printf("ADDR %s\n", lis.Addr())
	if err := srv.Serve(lis); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// request is one request the load generator sent: its id, when it was due
// (Unix ns), how late its goroutine started and its latency.
type request struct {
	id        int64
	due       int64
	startLate time.Duration
	lat       time.Duration
}

// arrival is what the mock noted of one request (Unix ns): when it had read
// it and when its wait ended.
type arrival struct{ read, woke int64 }

// timeline fetches and clears the mock's notes, by request id.
func (b *bench) timeline() map[int64]arrival {
	resp, err := b.http.Get(b.upstream + "/timeline")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var notes [][3]int64
	_ = json.NewDecoder(resp.Body).Decode(&notes)
	out := make(map[int64]arrival, len(notes))
	for _, n := range notes {
		out[n[0]] = arrival{read: n[1], woke: n[2]}
	}
	return out
}

// legs splits the requests of one path into where their time went.
type legs struct {
	start, request, wait, response []time.Duration
}

// add joins a round's requests with the mock's notes on them.
func (l *legs) add(s sample, notes map[int64]arrival) {
	for _, r := range s.reqs {
		a, ok := notes[r.id]
		if !ok || r.lat == 0 {
			continue
		}
		done := r.due + int64(r.lat)
		l.start = append(l.start, r.startLate)
		l.request = append(l.request, time.Duration(a.read-r.due))
		l.wait = append(l.wait, time.Duration(a.woke-a.read))
		l.response = append(l.response, time.Duration(done-a.woke))
	}
}

// row is the path's line in the timeline table; with base (the direct
// path's legs) each leg also shows its difference to base.
func (l *legs) row(mode string, rate int, path string, base *legs) string {
	cell := func(mine, theirs []time.Duration) string {
		m := p50(mine)
		if base == nil {
			return us(m)
		}
		return fmt.Sprintf("%s (%+.0f)", us(m), float64(m-p50(theirs))/float64(time.Microsecond))
	}
	var b legs
	if base != nil {
		b = *base
	}
	return fmt.Sprintf("| %s | %d | %s | %d | %s | %s | %s | %s |", mode, rate, path, len(l.request),
		cell(l.start, b.start), cell(l.request, b.request), cell(l.wait, b.wait), cell(l.response, b.response))
}

// p50 is the median of d (which it sorts), 0 for none.
func p50(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}
