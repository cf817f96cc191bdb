//go:build e2ecluster

package cluster

// The suite's own instruments, tried on their own (go test -tags
// e2ecluster -run 'Test[^C]' runs only these, in a second): each must be
// able to report the failure it exists to find.

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

func TestReruns(t *testing.T) {
	t0 := time.Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	exec := func(kind, by string, start int, completed bool) execution {
		return execution{kind: kind, key: "k", by: by, start: at(start), end: at(start + 1), completed: completed}
	}
	kill := func(target string, s int) *fault {
		return &fault{what: "kill -9 " + target, kind: "service", target: target, at: at(s)}
	}
	for name, tc := range map[string]struct {
		execs     []execution
		faults    []*fault
		explained bool
	}{
		"two completed runs and no fault: a double run": {
			execs: []execution{exec(kindToolJob, "orchestrator-a", 0, true), exec(kindToolJob, "orchestrator-b", 5, true)},
		},
		"the first run was cut": {
			execs:     []execution{exec(kindToolJob, "orchestrator-a", 0, false), exec(kindToolJob, "orchestrator-b", 5, true)},
			explained: true,
		},
		"the replica that ran it was killed in between": {
			execs:     []execution{exec(kindToolJob, "orchestrator-a", 0, true), exec(kindToolJob, "orchestrator-b", 5, true)},
			faults:    []*fault{kill("orchestrator-a", 2)},
			explained: true,
		},
		"a kill of another orchestrator explains no tool job": {
			execs:  []execution{exec(kindToolJob, "orchestrator-a", 0, true), exec(kindToolJob, "orchestrator-a", 5, true)},
			faults: []*fault{kill("orchestrator-b", 2)},
		},
		"a kill after the second run explains nothing": {
			execs:  []execution{exec(kindToolJob, "orchestrator-a", 0, true), exec(kindToolJob, "orchestrator-b", 5, true)},
			faults: []*fault{kill("orchestrator-a", 7)},
		},
		"a model gateway killed on a batch's path": {
			execs:     []execution{exec(kindBatch, "modelgateway-a", 0, true), exec(kindBatch, "modelgateway-b", 5, true)},
			faults:    []*fault{kill("modelgateway-b", 2)},
			explained: true,
		},
		"a kill of an unrelated service explains no batch": {
			execs:  []execution{exec(kindBatch, "modelgateway-a", 0, true), exec(kindBatch, "modelgateway-a", 5, true)},
			faults: []*fault{kill("indexer-a", 2)},
		},
		"the database restarted in between": {
			execs:     []execution{exec(kindExtraction, "modelgateway-a", 0, true), exec(kindExtraction, "modelgateway-a", 5, true)},
			faults:    []*fault{{what: "kill -9 ferretdb", kind: "mongo", target: "ferretdb", at: at(3)}},
			explained: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			rs := reruns(tc.execs, tc.faults)
			if len(rs) != 1 {
				t.Fatalf("%d re-runs, want 1", len(rs))
			}
			if got := rs[0].explanation != ""; got != tc.explained {
				t.Errorf("explained = %v (%q), want %v", got, rs[0].explanation, tc.explained)
			}
		})
	}
	if rs := reruns([]execution{exec(kindToolJob, "orchestrator-a", 0, true)}, nil); len(rs) != 0 {
		t.Errorf("one execution: %d re-runs", len(rs))
	}
}

func TestModelCallExecution(t *testing.T) {
	body := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	batchSchema := map[string]any{"type": "object", "properties": map[string]any{"classifications": map[string]any{
		"type": "array", "items": map[string]any{"type": "object", "properties": map[string]any{
			"id": map[string]any{"type": "string", "enum": []string{"c2", "c1"}}}}}}}
	for name, tc := range map[string]struct {
		body      []byte
		kind, key string
	}{
		"classification batch, keyed by its conversations": {
			body: body(map[string]any{
				"messages":        []map[string]any{{"role": "system", "content": "You classify"}, {"role": "user", "content": "Classify these conversations (batch 1):\n..."}},
				"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "batch_classification", "schema": batchSchema}},
			}),
			kind: kindBatch, key: "c1,c2",
		},
		"extraction, keyed by the title": {
			body: body(map[string]any{"messages": []map[string]any{
				{"role": "system", "content": "You extract structured data from one document for a search index."},
				{"role": "user", "content": "Title: Ticket E2E-7: export fails\nContent type: ticket\n\nbody"},
			}}),
			kind: kindExtraction, key: "Ticket E2E-7: export fails",
		},
		"planning call, keyed by the query": {
			body: body(map[string]any{
				"messages": []map[string]any{{"role": "system", "content": "You are a planning agent. Your ONLY job..."}, {"role": "user", "content": "Analyse ticker X."}},
				"tools":    []map[string]any{{"type": "function", "function": map[string]any{"name": "get_stock_price"}}},
			}),
			kind: kindPlanning, key: "Analyse ticker X.",
		},
		"the planner's feedback round is the same execution": {
			body: body(map[string]any{
				"messages": []map[string]any{{"role": "system", "content": "You are a planning agent."}, {"role": "user", "content": "Analyse ticker X."},
					{"role": "assistant", "content": ""}, {"role": "tool", "content": "invalid"}, {"role": "user", "content": "Some of your tool calls were invalid"}},
				"tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "get_stock_price"}}},
			}),
		},
		"a chat turn is no execution": {
			body: body(map[string]any{"messages": []map[string]any{{"role": "user", "content": "hello"}}}),
		},
		"not JSON": {body: []byte("{")},
	} {
		t.Run(name, func(t *testing.T) {
			kind, key := modelCallExecution(tc.body)
			if kind != tc.kind || key != tc.key {
				t.Errorf("got (%q, %q), want (%q, %q)", kind, key, tc.kind, tc.key)
			}
		})
	}
}

func TestPeerPIDFindsTheClientProcess(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	client, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	remote, local := server.RemoteAddr().String(), server.LocalAddr().String()
	if got := peerPID(remote, local, []int{1, os.Getpid()}); got != os.Getpid() {
		t.Errorf("peerPID(%s) = %d, want this process %d", remote, got, os.Getpid())
	}
	if got := peerPID(remote, local, []int{1}); got != 0 {
		t.Errorf("peerPID among processes that do not hold it = %d, want 0", got)
	}
	client.Close()
	server.Close()
	if got := peerPID(remote, local, []int{os.Getpid()}); got != 0 {
		t.Errorf("peerPID of a closed connection = %d, want 0", got)
	}
}

func TestFrontSkipsADeadBackend(t *testing.T) {
	live, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	go func() {
		for {
			c, err := live.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // a killed replica: nothing listens
	f, err := startFront([]frontBackend{{"dead", deadAddr}, {"live", live.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	for i := range 4 {
		c, err := net.Dial("tcp", f.lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("connection %d: %q %v", i, buf, err)
		}
		if b := f.backendOf(c.LocalAddr().String()); b != "live" {
			t.Errorf("connection %d served by %q, want live", i, b)
		}
		c.Close()
	}
}
