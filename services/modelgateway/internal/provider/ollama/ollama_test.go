package ollama_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/provider/ollama"
)

func parse(body string) ([]llm.Event, error) {
	var evs []llm.Event
	err := ollama.ParseStream("ollama", strings.NewReader(body), func() {},
		func(err error) *llm.Error {
			return &llm.Error{Kind: llm.KindConnection, Message: err.Error(), Err: err}
		},
		func(ev llm.Event) error { evs = append(evs, ev); return nil })
	return evs, err
}

func TestParseStreamToolCalls(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","message":{"role":"assistant","content":"","thinking":"hmm"},"done":false}
{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"index":1,"name":"b","arguments":{"k":[1,2]}}},{"function":{"index":0,"name":"a","arguments":"{\"s\":\"x\"}"}}]},"done":false}
{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":7,"eval_count":5}
`
	evs, err := parse(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 4 || evs[0].Text != "hmm" {
		t.Fatalf("events %+v", evs)
	}
	a, b := evs[1].ToolCall, evs[2].ToolCall
	if a.Name != "a" || a.Arguments != `{"s":"x"}` || b.Name != "b" || b.Arguments != `{"k":[1,2]}` || a.ID == "" || a.ID == b.ID {
		t.Errorf("calls %+v %+v", a, b)
	}
	if evs[3].Finish != llm.FinishToolCalls || evs[3].Usage.Prompt != 7 || evs[3].Usage.Completion != 5 {
		t.Errorf("end %+v", evs[3])
	}
	again, _ := parse(body)
	if again[1].ToolCall.ID != a.ID {
		t.Error("generated ids are not stable")
	}
}

func TestParseStreamErrors(t *testing.T) {
	t.Parallel()
	// cut: the parser hands fail an error wrapping io.ErrUnexpectedEOF,
	// which upstream.Call.Fail reports as a cut answer.
	for name, tc := range map[string]struct {
		body string
		kind llm.ErrorKind
		cut  bool
	}{
		"error line":        {"{\"message\":{\"content\":\"a\"},\"done\":false}\n{\"error\":\"out of memory\"}\n", llm.KindServer, false},
		"no done line":      {"{\"message\":{\"content\":\"a\"},\"done\":false}\n", llm.KindConnection, true},
		"cut inside a line": {"{\"message\":{\"content\":\"a\"},\"done\":false}\n{\"message\":{\"cont", llm.KindConnection, true},
		"unparsable line":   {"{\"message\":{\"content\":\"a\"},\"done\":false}\n{nope}\n", llm.KindBadResponse, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			evs, err := parse(tc.body)
			var le *llm.Error
			if !errors.As(err, &le) || le.Kind != tc.kind || len(evs) != 1 {
				t.Errorf("events %v err %v", evs, err)
			}
			if got := errors.Is(err, io.ErrUnexpectedEOF); got != tc.cut {
				t.Errorf("err = %v: reported as cut %v, want %v", err, got, tc.cut)
			}
		})
	}
	// A done line that lacks only its newline is complete.
	evs, err := parse("{\"message\":{\"content\":\"a\"},\"done\":false}\n{\"message\":{\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\"}")
	if err != nil || len(evs) != 2 || evs[1].Kind != llm.EventEnd {
		t.Errorf("done line without newline: events %v err %v", evs, err)
	}
}

func TestEncodeThinkValues(t *testing.T) {
	t.Parallel()
	on, off := true, false
	for _, tc := range []struct {
		th   llm.Thinking
		want string
	}{
		{llm.Thinking{}, ""},
		{llm.Thinking{Enabled: &on}, "true"},
		{llm.Thinking{Enabled: &off, Effort: "high"}, "false"},
		{llm.Thinking{Effort: "low"}, `"low"`},
	} {
		body, err := ollama.Encode(&llm.Request{Model: "m", Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}, Thinking: tc.th}, true)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(body)
		var m map[string]json.RawMessage
		_ = json.Unmarshal(b, &m)
		if string(m["think"]) != tc.want {
			t.Errorf("%+v: think %s, want %s", tc.th, m["think"], tc.want)
		}
		if string(m["stream"]) != "true" {
			t.Errorf("stream %s", m["stream"])
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	req := &llm.Request{Model: "m", Messages: []llm.Message{
		{Role: llm.RoleSystem, Content: "You are a financial analyst."},
		{Role: llm.RoleUser, Content: "How is BHP doing?"},
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "get_stock_price", Arguments: `{"ticker":"BHP"}`}}},
		{Role: llm.RoleTool, ToolCallID: "c1", Content: `{"price":45.1}`},
	}, Tools: []llm.Tool{{Name: "get_stock_price", Parameters: json.RawMessage(`{"type":"object","properties":{"ticker":{"type":"string"}}}`)}}}
	b.ReportAllocs()
	for b.Loop() {
		body, err := ollama.Encode(req, true)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseStream parses 40 content lines, a tool-call line and the
// done line.
func BenchmarkParseStream(b *testing.B) {
	var sb strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&sb, "{\"model\":\"m\",\"created_at\":\"2024-01-01T00:00:00Z\",\"message\":{\"role\":\"assistant\",\"content\":\"word%d \"},\"done\":false}\n", i)
	}
	sb.WriteString(`{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"index":0,"name":"f","arguments":{"a":1}}}]},"done":false}` + "\n")
	sb.WriteString(`{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":10,"eval_count":42}` + "\n")
	body := sb.String()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := ollama.ParseStream("o", strings.NewReader(body), func() {}, nil, func(llm.Event) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
