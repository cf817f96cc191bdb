package openaiwire

import (
	"bytes"
	"encoding/json"
	"math"
	"sort"
	"testing"
)

// reflectFields has ChatRequest's fields without its methods, so
// encoding/json encodes it by reflection: the reference AppendJSON must match.
type reflectFields ChatRequest

// referenceJSON is the request as encoding/json writes it (HTML escaping
// off), Extra fields the struct did not write appended in key order.
func referenceJSON(r *ChatRequest) ([]byte, error) {
	enc := func(v any) ([]byte, error) {
		var buf bytes.Buffer
		e := json.NewEncoder(&buf)
		e.SetEscapeHTML(false)
		if err := e.Encode(v); err != nil {
			return nil, err
		}
		return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
	}
	b, err := enc((*reflectFields)(r))
	if err != nil || len(r.Extra) == 0 {
		return b, err
	}
	var present map[string]json.RawMessage
	if err := json.Unmarshal(b, &present); err != nil {
		return nil, err
	}
	var keys []string
	for k := range r.Extra {
		if _, ok := present[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	b = b[:len(b)-1]
	for _, k := range keys {
		kb, _ := enc(k)
		vb, err := enc(r.Extra[k])
		if err != nil {
			return nil, err
		}
		b = append(append(append(append(b, ','), kb...), ':'), vb...)
	}
	return append(b, '}'), nil
}

const trickyText = "plain \"quoted\" back\\slash <b>&amp;</b> \x00\x01\b\f\n\r\t\x1f\x7f é 😀 \u2028\u2029 bad\xff\xfe utf8 \xe2\x82"

func fullRequest() *ChatRequest {
	f := func(v float64) *float64 { return &v }
	i := func(v int) *int { return &v }
	seed := int64(-42)
	on := true
	nc := NamedToolChoice{Type: "function"}
	nc.Function.Name = "get_" + trickyText
	return &ChatRequest{
		Model: "model-" + trickyText,
		Messages: []Message{
			{Role: "system", Content: trickyText},
			{Role: "user", Content: []ContentPart{{Type: "text", Text: trickyText}, {Type: "image_url", ImageURL: &ImageURL{URL: "data:image/png;base64,AAAA"}}}},
			{Role: "assistant", Content: "", ReasoningContent: "thinking " + trickyText, ToolCalls: []ToolCall{
				{ID: "call_1", Type: "function", Function: FunctionCall{Name: "f", Arguments: `{"a": "<x>"}`}},
				{ID: "call_2", Type: "function", Function: FunctionCall{Name: "g", Arguments: "{}"}},
			}},
			{Role: "tool", Content: `{"ok":true}`, ToolCallID: "call_1"},
			{Role: "assistant", Content: nil},
			{Role: "user", Content: map[string]any{"odd": []int{1, 2}}},
		},
		Tools: []Tool{
			{Type: "function", Function: FunctionDef{Name: "f", Description: trickyText, Parameters: json.RawMessage(" {\n \"type\" : \"object\", \"properties\": {\"a\": {\"type\": \"string\", \"pattern\": \"<\\u003c>\"}}}\n")}},
			{Type: "function", Function: FunctionDef{Name: "g"}},
		},
		ToolChoice:      nc,
		ResponseFormat:  &ResponseFormat{Type: "json_schema", JSONSchema: &JSONSchema{Name: "answer", Schema: json.RawMessage(`{"type": "object"}`)}},
		Temperature:     f(0.7),
		TopP:            f(1e-7),
		TopK:            i(40),
		MaxTokens:       i(1024),
		Stop:            []string{"\n\n", trickyText},
		Seed:            &seed,
		Stream:          true,
		StreamOptions:   &StreamOptions{IncludeUsage: true},
		Thinking:        &ThinkingParam{Type: "enabled"},
		ReasoningEffort: "high",
		EnableThinking:  &on,
		ThinkingBudget:  i(2048),
		Extra:           map[string]any{"model": "ignored: the struct sets it", "top_logprobs": 3, "z_" + trickyText: []any{"<&>", 1.5, nil}, "a_nested": map[string]any{"k": trickyText}},
	}
}

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	cases := map[string]*ChatRequest{
		"full":         fullRequest(),
		"minimal":      {Model: "m", Messages: []Message{{Role: "user", Content: "hi"}}},
		"nil messages": {Model: "m"},
		"string tool choice": {Model: "m", Messages: []Message{{Role: "user", Content: "hi"}}, ToolChoice: "auto",
			Tools: []Tool{{Type: "function", Function: FunctionDef{Name: "f", Parameters: json.RawMessage(`{}`)}}}},
		"json object": {Model: "m", ResponseFormat: &ResponseFormat{Type: "json_object"}, StreamOptions: &StreamOptions{}},
	}
	for _, v := range []float64{0, -0.5, 1, 123456789.125, 1e20, 1e21, 1.5e-6, 1e-6, -1e-7, 5e-324, math.MaxFloat64} {
		cases["float "+string(appendFloatMust(v))] = &ChatRequest{Model: "m", Temperature: &v}
	}
	for name, r := range cases {
		want, err := referenceJSON(r)
		if err != nil {
			t.Fatalf("%s: reference: %v", name, err)
		}
		got, err := r.AppendJSON(nil)
		if err != nil {
			t.Fatalf("%s: AppendJSON: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
		if !json.Valid(got) {
			t.Errorf("%s: invalid JSON %s", name, got)
		}
	}
}

func appendFloatMust(f float64) []byte {
	b, err := appendFloat(nil, f)
	if err != nil {
		panic(err)
	}
	return b
}

func TestAppendJSONRefusesWhatEncodingJSONRefuses(t *testing.T) {
	nan := math.NaN()
	inf := math.Inf(1)
	for name, r := range map[string]*ChatRequest{
		"NaN temperature":    {Model: "m", Temperature: &nan},
		"Inf top_p":          {Model: "m", TopP: &inf},
		"invalid parameters": {Model: "m", Tools: []Tool{{Type: "function", Function: FunctionDef{Name: "f", Parameters: json.RawMessage(`{"type":`)}}}},
		"invalid schema":     {Model: "m", ResponseFormat: &ResponseFormat{Type: "json_schema", JSONSchema: &JSONSchema{Name: "x", Schema: json.RawMessage(`nope`)}}},
		"bad extra":          {Model: "m", Extra: map[string]any{"f": func() {}}},
	} {
		if _, err := referenceJSON(r); err == nil {
			t.Fatalf("%s: the reference encoder accepted it", name)
		}
		if b, err := r.AppendJSON(nil); err == nil {
			t.Errorf("%s: AppendJSON accepted it: %s", name, b)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", trickyText, "\u2028", "\xed\xa0\x80", "\xf4\x90\x80\x80", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var buf bytes.Buffer
		e := json.NewEncoder(&buf)
		e.SetEscapeHTML(false)
		if err := e.Encode(s); err != nil {
			t.Fatal(err)
		}
		want := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if got := appendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("appendString(%q) = %s, encoding/json writes %s", s, got, want)
		}
	})
}
