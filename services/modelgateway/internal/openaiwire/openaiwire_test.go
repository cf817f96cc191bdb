package openaiwire_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/openaiwire"
)

func TestSSEReaderSkipsCommentsAndBlankLines(t *testing.T) {
	t.Parallel()
	body := ": keep-alive\n\n\n: keep-alive\n\n" +
		"data:{\"a\":1}\r\n\r\n" + // no space, CRLF
		"event: message\nid: 7\ndata: {\"b\":\n" + // multi-line data
		"data: 2}\n\n" +
		"data: [DONE]\n\n"
	r := openaiwire.NewSSEReader(strings.NewReader(body))
	var got []string
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(d))
	}
	want := []string{`{"a":1}`, "{\"b\":\n2}", "[DONE]"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("events %q, want %q", got, want)
	}
}

func TestSSEReaderLongLines(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100_000)
	r := openaiwire.NewSSEReader(strings.NewReader("data: " + long + "\n\n"))
	d, err := r.Next()
	if err != nil || string(d) != long {
		t.Fatalf("len %d err %v", len(d), err)
	}
}

func collect(t *testing.T, body string) ([]llm.Event, error) {
	t.Helper()
	var evs []llm.Event
	err := openaiwire.ParseStream("p", strings.NewReader(body), func() {},
		func(err error) *llm.Error {
			return &llm.Error{Kind: llm.KindConnection, Message: err.Error(), Err: err}
		},
		func(ev llm.Event) error { evs = append(evs, ev); return nil })
	return evs, err
}

func TestParseStreamAssemblesToolCallsByIndex(t *testing.T) {
	t.Parallel()
	// Two calls, interleaved, Qwen style: later deltas carry "id": "" and a
	// null name; the usage comes in a last chunk with no choices, after
	// "usage": null on the others.
	body := strings.Join([]string{
		`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":null}`,
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"second","arguments":""}}]}}],"usage":null}`,
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"first","arguments":"{\"x\""}}]}}],"usage":null}`,
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"","type":"function","function":{"name":null,"arguments":"{\"y\":2}"}}]}}],"usage":null}`,
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"","function":{"name":"","arguments":":1}"}}]}}],"usage":null}`,
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}`,
		`data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`,
		`data: [DONE]`, ``,
	}, "\n\n")
	evs, err := collect(t, body)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 {
		t.Fatalf("events %+v", evs)
	}
	a, b, end := evs[0].ToolCall, evs[1].ToolCall, evs[2]
	if a != (llm.ToolCall{ID: "call_a", Name: "first", Arguments: `{"x":1}`}) || b != (llm.ToolCall{ID: "call_b", Name: "second", Arguments: `{"y":2}`}) {
		t.Errorf("calls %+v %+v", a, b)
	}
	if end.Kind != llm.EventEnd || end.Finish != llm.FinishToolCalls || end.Usage.Prompt != 9 || end.Usage.Total != 12 {
		t.Errorf("end %+v", end)
	}
}

func TestParseStreamFailures(t *testing.T) {
	t.Parallel()
	// cut: the parser hands fail an error wrapping io.ErrUnexpectedEOF,
	// which upstream.Call.Fail reports as a cut answer.
	cases := map[string]struct {
		body string
		kind llm.ErrorKind
		msg  string
		cut  bool
	}{
		"ends early":         {"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n", llm.KindConnection, "without data: [DONE]", true},
		"ends inside a line": {"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[{\"ind", llm.KindConnection, "inside a line", true},
		"ends inside event":  {"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n", llm.KindConnection, "without data: [DONE]", true},
		"error event":        {"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n", llm.KindServer, "overloaded", false},
		"unparsable":         {"data: {nope\n\n", llm.KindBadResponse, "unparsable", false},
		"empty body":         {"", llm.KindConnection, "without data: [DONE]", true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			evs, err := collect(t, tc.body)
			var le *llm.Error
			if !errors.As(err, &le) || le.Kind != tc.kind || !strings.Contains(le.Message, tc.msg) {
				t.Errorf("err = %v, want kind %v with %q", err, tc.kind, tc.msg)
			}
			if got := errors.Is(err, io.ErrUnexpectedEOF); got != tc.cut {
				t.Errorf("err = %v: reported as cut %v, want %v", err, got, tc.cut)
			}
			// What arrived before the end still reaches the caller.
			if strings.Contains(tc.body, `"hi"`) && (len(evs) == 0 || evs[0].Text != "hi") {
				t.Errorf("events before the failure: %+v", evs)
			}
		})
	}
}

func TestParseStreamReasoningFieldsAndFinishWithoutDone(t *testing.T) {
	t.Parallel()
	body := "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"r1\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"r2\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"c\"},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n"
	evs, err := collect(t, body)
	if err != nil {
		t.Fatal(err)
	}
	// Both reasoning fields are read; deltas that arrived together merge.
	if len(evs) != 3 || evs[0].Text != "r1r2" || evs[0].Kind != llm.EventReasoning || evs[1].Text != "c" ||
		evs[2].Finish != llm.FinishLength || evs[2].Usage.Total != 3 {
		t.Errorf("events %+v", evs)
	}
}

func TestAssemblerWithoutIndexes(t *testing.T) {
	t.Parallel()
	var a openaiwire.Assembler
	name := func(s string) *string { return &s }
	d := func(id string, n *string, args string) *openaiwire.ToolCallDelta {
		x := &openaiwire.ToolCallDelta{ID: id}
		x.Function.Name = n
		x.Function.Arguments = &args
		return x
	}
	a.Add(d("c1", name("f"), `{"a":`))
	a.Add(d("", nil, `1}`))
	a.Add(d("c2", name("g"), `{}`))
	a.Add(d("c2", name("g"), ``)) // repeated id on every chunk
	calls := a.Calls()
	if len(calls) != 2 || calls[0].Arguments != `{"a":1}` || calls[1].ID != "c2" || calls[1].Arguments != "{}" {
		t.Errorf("calls %+v", calls)
	}
}

func TestEncodeMergesRouteExtras(t *testing.T) {
	t.Parallel()
	req := &llm.Request{Model: "m", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}},
		Extra: map[string]any{"presence_penalty": 0.5, "model": "must-not-override"}}
	d := openaiwire.Dialect{}
	wr, err := openaiwire.Encode(req, &d, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := wr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.Contains(s, `"presence_penalty":0.5`) || strings.Contains(s, "must-not-override") {
		t.Errorf("body %s", s)
	}
}

// Merging never holds a delta back: the first chunk is emitted while the
// rest has not been sent yet.
func TestParseStreamEmitsWithoutWaitingForMore(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	got := make(chan llm.Event, 16)
	done := make(chan error, 1)
	go func() {
		done <- openaiwire.ParseStream("p", pr, func() {}, func(err error) *llm.Error { return &llm.Error{Message: err.Error()} },
			func(ev llm.Event) error { got <- ev; return nil })
	}()
	_, _ = io.WriteString(pw, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"first\"}}]}\n\n")
	select {
	case ev := <-got:
		if ev.Text != "first" {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("first delta held back while the stream waits for more")
	}
	_, _ = io.WriteString(pw, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" second\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	_ = pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ev := <-got; ev.Text != " second" {
		t.Errorf("second event %+v", ev)
	}
}
