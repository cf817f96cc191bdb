package openaiapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// fakeModels answers the calls the handler makes: a short answer, one
// vector, the chat model. Its other methods are the nil interface's.
type fakeModels struct {
	modelv1.ModelServiceClient
	chats chan *modelv1.ChatRequest // when set, receives every Chat request
}

func (f *fakeModels) Chat(_ context.Context, in *modelv1.ChatRequest, _ ...grpc.CallOption) (*modelv1.ChatResponse, error) {
	if f.chats != nil {
		f.chats <- proto.Clone(in).(*modelv1.ChatRequest)
	}
	return &modelv1.ChatResponse{Message: &modelv1.Message{Role: modelv1.Role_ROLE_ASSISTANT, Content: "ok"},
		FinishReason: modelv1.FinishReason_FINISH_REASON_STOP, Usage: &modelv1.Usage{PromptTokens: 1, CompletionTokens: 1}, Model: in.GetModel()}, nil
}

func (f *fakeModels) Embed(context.Context, *modelv1.EmbedRequest, ...grpc.CallOption) (*modelv1.EmbedResponse, error) {
	return &modelv1.EmbedResponse{Embeddings: []*modelv1.Embedding{{Values: []float32{1, 0}}}}, nil
}

func (f *fakeModels) ListModels(context.Context, *modelv1.ListModelsRequest, ...grpc.CallOption) (*modelv1.ListModelsResponse, error) {
	return &modelv1.ListModelsResponse{Models: []*modelv1.LogicalModel{{Name: "chat", Available: true}}}, nil
}

func newTestHandler(t *testing.T, client modelv1.ModelServiceClient) *Handler {
	t.Helper()
	h, err := New(Options{Client: client, Caller: func(*http.Request) (Caller, bool) {
		return Caller{Tenant: "alice", Key: "alice-key"}, true
	}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// do sends one request to h and returns the response, with its error
// object when it failed (its param "" when null).
func do(t *testing.T, h http.Handler, method, path, body string, header http.Header) (*httptest.ResponseRecorder, apiError) {
	t.Helper()
	req := httptest.NewRequest(method, Prefix+path, strings.NewReader(body))
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var e errorBody
	if rec.Code != http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
			t.Fatalf("%s %s: %d %q is not an OpenAI error object", method, path, rec.Code, rec.Body)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", method, path, ct)
		}
	}
	return rec, e.Error
}

// wantParamError checks a 400 invalid_request_error naming param.
func wantParamError(t *testing.T, what string, rec *httptest.ResponseRecorder, e apiError, param string) {
	t.Helper()
	if rec.Code != http.StatusBadRequest || e.Type != "invalid_request_error" || derefOr(e.Param) != param {
		t.Errorf("%s: got %d %q param %q, want 400 invalid_request_error param %q\n%s", what, rec.Code, e.Type, derefOr(e.Param), param, rec.Body)
	}
}

// openAITypes are the JSON types OpenAI's API gives the request fields of
// the README's conformance tables (more than one where it takes either).
var (
	chatFieldTypes = map[string][]string{
		"model": {"string"}, "messages": {"array"},
		"messages[].role": {"string"}, "messages[].content": {"string", "array"}, "messages[].tool_calls": {"array"},
		"messages[].tool_call_id": {"string"}, "messages[].reasoning_content": {"string"}, "messages[].name": {"string"},
		"tools": {"array"}, "tool_choice": {"string", "object"}, "parallel_tool_calls": {"boolean"}, "response_format": {"object"},
		"temperature": {"number"}, "top_p": {"number"}, "max_tokens": {"number"}, "max_completion_tokens": {"number"},
		"stop": {"string", "array"}, "seed": {"number"}, "user": {"string"}, "stream": {"boolean"},
		"stream_options": {"object"}, "stream_options.include_usage": {"boolean"}, "reasoning_effort": {"string"},
		"n": {"number"}, "logprobs": {"boolean"}, "top_logprobs": {"number"},
		"frequency_penalty": {"number"}, "presence_penalty": {"number"}, "logit_bias": {"object"},
		"functions": {"array"}, "function_call": {"string", "object"},
		"store": {"boolean"}, "metadata": {"object"}, "service_tier": {"string"}, "modalities": {"array"},
		"audio": {"object"}, "prediction": {"object"}, "web_search_options": {"object"}, "verbosity": {"string"},
	}
	embeddingFieldTypes = map[string][]string{
		"model": {"string"}, "input": {"string", "array"}, "encoding_format": {"string"}, "dimensions": {"number"}, "user": {"string"},
	}
	// aValueOf is a value of each JSON type.
	aValueOf = map[string]string{"string": `"x"`, "number": `7`, "boolean": `true`, "object": `{}`, "array": `[]`}
)

// readmeFields returns the request fields of the README table that starts
// with header, in the OpenAI-compatible API section: the rows whose first
// cell only names fields (`a`, `b`), "tools[]" as "tools".
func readmeFields(t *testing.T, header string) []string {
	t.Helper()
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n### OpenAI-compatible API\n")
	if !ok {
		t.Fatal("README.md has no OpenAI-compatible API section")
	}
	section, _, _ = strings.Cut(section, "\n### ")
	_, table, ok := strings.Cut(section, "\n"+header)
	if !ok {
		t.Fatalf("README.md's OpenAI-compatible API section has no table %q", header)
	}
	table, _, _ = strings.Cut(table, "\n\n")
	names := regexp.MustCompile("`([^`]+)`")
	pure := regexp.MustCompile("^`[^`]+`(, `[^`]+`)*( \\(deprecated\\))?$")
	var out []string
	for _, row := range strings.Split(table, "\n") {
		cells := strings.Split(row, "|")
		if len(cells) < 3 || !pure.MatchString(strings.TrimSpace(cells[1])) {
			continue
		}
		for _, m := range names.FindAllStringSubmatch(cells[1], -1) {
			out = append(out, strings.TrimSuffix(m[1], "[]"))
		}
	}
	if len(out) < 3 {
		t.Fatalf("README.md's table %q names only %v", header, out)
	}
	return out
}

// Every field the README's conformance tables list, used or dropped, is
// held to the JSON type OpenAI's API gives it: a value of any other type
// is a 400 naming the field (fields that are ignored were once dropped
// whatever their type: "frequency_penalty": "x" was a 200).
func TestFieldTypes(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t, &fakeModels{})
	for _, name := range readmeFields(t, "| request field |") {
		if chatFieldTypes[name] == nil {
			t.Errorf("README lists chat request field %q, which this test has no type for", name)
		}
	}
	for _, name := range readmeFields(t, "| embeddings |") {
		if embeddingFieldTypes[name] == nil {
			t.Errorf("README lists embeddings field %q, which this test has no type for", name)
		}
	}
	// A tool message needs an assistant's call to answer; each role's
	// message is tried as the third, so that each role is held to every
	// message field, its own or not.
	history := `{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}`
	for name, types := range chatFieldTypes {
		for kind, wrong := range aValueOf {
			if slices.Contains(types, kind) {
				continue
			}
			switch field, isMessage := strings.CutPrefix(name, "messages[]."); {
			case isMessage:
				for _, role := range []string{"system", "developer", "user", "assistant", "tool"} {
					body := `{"model": "chat", "messages": [` + history + `, {"role": "` + role + `", "content": "x", "tool_call_id": "c1", "` + field + `": ` + wrong + `}]}`
					rec, e := do(t, h, "POST", "/chat/completions", body, nil)
					wantParamError(t, role+" message's "+field+": "+wrong, rec, e, "messages[2]."+field)
				}
			case name == "stream_options.include_usage":
				rec, e := do(t, h, "POST", "/chat/completions", `{"model": "chat", "messages": [{"role": "user", "content": "hi"}], "stream_options": {"include_usage": `+wrong+`}}`, nil)
				wantParamError(t, name+": "+wrong, rec, e, name)
			default:
				// A duplicate key: the last counts.
				rec, e := do(t, h, "POST", "/chat/completions", `{"model": "chat", "messages": [{"role": "user", "content": "hi"}], "`+name+`": `+wrong+`}`, nil)
				wantParamError(t, name+": "+wrong, rec, e, name)
			}
		}
	}
	for name, types := range embeddingFieldTypes {
		for kind, wrong := range aValueOf {
			if !slices.Contains(types, kind) {
				rec, e := do(t, h, "POST", "/embeddings", `{"model": "embed", "input": "x", "`+name+`": `+wrong+`}`, nil)
				wantParamError(t, "embeddings "+name+": "+wrong, rec, e, name)
			}
		}
	}
}

// The dropped fields, each of its type, are accepted (and a null is
// absent, as OpenAI reads it).
func TestDroppedFieldsOfTheirType(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t, &fakeModels{})
	body := `{"model": "chat", "messages": [{"role": "user", "content": "hi", "name": "ann", "tool_calls": [], "reasoning_content": null}],
		"user": "u-1", "parallel_tool_calls": true, "top_logprobs": 2, "frequency_penalty": 0.5, "presence_penalty": -1,
		"logit_bias": {"50256": -100}, "store": false, "metadata": {"run": "7"}, "service_tier": "auto", "modalities": ["text"],
		"audio": null, "prediction": {"type": "content", "content": "x"}, "web_search_options": {}, "verbosity": "low"}`
	if rec, _ := do(t, h, "POST", "/chat/completions", body, nil); rec.Code != http.StatusOK {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
}

// No route takes a query parameter: one is a 400 naming it, as at the
// rest of the gateway; ?tenant= was a 200 showing the caller's own usage.
func TestQueryParameters(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t, &fakeModels{})
	chat := `{"model": "chat", "messages": [{"role": "user", "content": "hi"}]}`
	for _, tc := range []struct{ method, path, body, param string }{
		{"GET", "/models?foo=1", "", "foo"},
		{"GET", "/models/chat?foo", "", "foo"},
		{"GET", "/usage?tenant=zeta", "", "tenant"},
		{"GET", "/usage?tenant=zeta&project=p", "", "project"},
		{"POST", "/chat/completions?api-version=2024-10-21", chat, "api-version"},
		{"POST", "/embeddings?x=", `{"model": "embed", "input": "x"}`, "x"},
		{"GET", "/models?%zz", "", "query"},
		{"GET", "/models?=1", "", "query"},
	} {
		rec, e := do(t, h, tc.method, tc.path, tc.body, nil)
		wantParamError(t, tc.method+" "+tc.path, rec, e, tc.param)
	}
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/models", ""}, {"GET", "/models/chat", ""}, {"GET", "/usage", ""}, {"POST", "/chat/completions", chat},
	} {
		if rec, _ := do(t, h, tc.method, tc.path, tc.body, nil); rec.Code != http.StatusOK {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, rec.Code, rec.Body)
		}
	}
}

// A known path asked with another method is a 405 with Allow, in
// OpenAI's error shape (it was a 404 unknown_url); an unknown path stays
// a 404.
func TestWrongMethod(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t, &fakeModels{})
	for _, tc := range []struct{ method, path, allow string }{
		{"GET", "/chat/completions", "POST"},
		{"PUT", "/chat/completions", "POST"},
		{"GET", "/embeddings", "POST"},
		{"POST", "/models", "GET, HEAD"},
		{"DELETE", "/models/chat", "GET, HEAD"},
		{"POST", "/usage", "GET, HEAD"},
	} {
		rec, e := do(t, h, tc.method, tc.path, "", nil)
		if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != tc.allow || e.Type != "invalid_request_error" || derefOr(e.Code) != "method_not_allowed" {
			t.Errorf("%s %s: %d Allow %q %q %q, want 405 Allow %q\n%s", tc.method, tc.path, rec.Code, rec.Header().Get("Allow"), e.Type, derefOr(e.Code), tc.allow, rec.Body)
		}
	}
	for _, path := range []string{"/completions", "/models/", "/chat/completions/x"} {
		rec, e := do(t, h, "GET", path, "", nil)
		if rec.Code != http.StatusNotFound || derefOr(e.Code) != "unknown_url" || rec.Header().Get("Allow") != "" {
			t.Errorf("GET %s: %d %q Allow %q, want 404 unknown_url", path, rec.Code, derefOr(e.Code), rec.Header().Get("Allow"))
		}
	}
	if rec, _ := do(t, h, "HEAD", "/models", "", nil); rec.Code != http.StatusOK {
		t.Errorf("HEAD /models: %d", rec.Code)
	}
}

// A compressed body is a 415 naming its Content-Encoding (it was a 400
// "body: want a JSON object, got number"); identity is no encoding.
func TestContentEncoding(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t, &fakeModels{})
	chat := `{"model": "chat", "messages": [{"role": "user", "content": "hi"}]}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(chat))
	_ = zw.Close()
	for _, tc := range []struct{ path, body, encoding, named string }{
		{"/chat/completions", gz.String(), "gzip", "gzip"},
		{"/chat/completions", chat, "br", "br"},
		{"/chat/completions", chat, "identity, deflate", "deflate"},
		{"/embeddings", chat, "GZIP", "GZIP"},
	} {
		rec, e := do(t, h, "POST", tc.path, tc.body, http.Header{"Content-Encoding": {tc.encoding}})
		if rec.Code != http.StatusUnsupportedMediaType || e.Type != "invalid_request_error" || derefOr(e.Param) != "Content-Encoding" ||
			!strings.Contains(e.Message, tc.named) || rec.Header().Get("Accept-Encoding") != "identity" {
			t.Errorf("%s Content-Encoding %s: %d %q param %q %q Accept-Encoding %q", tc.path, tc.encoding, rec.Code, e.Type, derefOr(e.Param), e.Message, rec.Header().Get("Accept-Encoding"))
		}
	}
	for _, encoding := range []string{"identity", "Identity", ""} {
		if rec, _ := do(t, h, "POST", "/chat/completions", chat, http.Header{"Content-Encoding": {encoding}}); rec.Code != http.StatusOK {
			t.Errorf("Content-Encoding %q: %d %s", encoding, rec.Code, rec.Body)
		}
	}
}

// A tool's parameters are checked as response_format's schema is
// (structured.Compile): one that does not compile is a 400 naming the
// tool's parameters, not passed on (a bogus type and a remote $ref were
// 200s).
func TestToolParametersSchema(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t, &fakeModels{})
	good := `{"type": "object", "properties": {"ticker": {"type": "string"}}, "required": ["ticker"], "additionalProperties": false}`
	for _, tc := range []struct {
		name, schema string
		ok           bool
	}{
		{"bogus type", `{"type": "bogus"}`, false},
		{"remote $ref", `{"$ref": "http://evil/x"}`, false},
		{"type of the wrong type", `{"type": 12}`, false},
		{"not an object", `"object"`, false},
		{"reference cycle", `{"type": "object", "allOf": [{"$ref": "#"}]}`, false},
		{"good", good, true},
		{"local $ref", `{"type": "object", "properties": {"a": {"$ref": "#/$defs/s"}}, "$defs": {"s": {"type": "string"}}}`, true},
		{"draft 7", `{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}`, true},
	} {
		body := `{"model": "chat", "messages": [{"role": "user", "content": "hi"}], "tools": [
			{"type": "function", "function": {"name": "a", "parameters": ` + good + `}},
			{"type": "function", "function": {"name": "b", "parameters": ` + tc.schema + `}}]}`
		rec, e := do(t, h, "POST", "/chat/completions", body, nil)
		if tc.ok {
			if rec.Code != http.StatusOK {
				t.Errorf("%s: %d %s", tc.name, rec.Code, rec.Body)
			}
			continue
		}
		wantParamError(t, tc.name, rec, e, "tools[1].function.parameters")
	}
}

// Tool messages answer the tool calls of the assistant message right
// before them, every one of those calls before any other message, as
// OpenAI (and DeepSeek and Qwen) require: a tool message that answers no
// call of the message before it is a 400 naming its tool_call_id, a call
// left unanswered a 400 naming its id (both were passed on, for the
// provider to refuse naming no field).
func TestToolCallID(t *testing.T) {
	t.Parallel()
	chats := make(chan *modelv1.ChatRequest, 8)
	h := newTestHandler(t, &fakeModels{chats: chats})
	call := func(id string) string {
		return `{"role": "assistant", "content": null, "tool_calls": [{"id": "` + id + `", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}`
	}
	calls := func(ids ...string) string {
		var cs []string
		for _, id := range ids {
			cs = append(cs, `{"id": "`+id+`", "type": "function", "function": {"name": "f", "arguments": "{}"}}`)
		}
		return `{"role": "assistant", "content": null, "tool_calls": [` + strings.Join(cs, ", ") + `]}`
	}
	tool := func(id string) string { return `{"role": "tool", "tool_call_id": "` + id + `", "content": "42"}` }
	user := `{"role": "user", "content": "hi"}`
	for _, tc := range []struct {
		name     string
		messages []string
		param    string // "" when accepted
	}{
		{"answers the call before it", []string{user, call("call_1"), tool("call_1")}, ""},
		{"two calls answered in either order, then the next turn", []string{user, calls("call_1", "call_2"), tool("call_2"), tool("call_1"),
			`{"role": "assistant", "content": "done"}`, user, call("call_3"), tool("call_3")}, ""},
		{"answers an earlier turn's call", []string{user, call("call_1"), tool("call_1"), call("call_2"), tool("call_2"), tool("call_1")}, "messages[5].tool_call_id"},
		{"answers a call after a user message", []string{user, call("call_1"), user, tool("call_1")}, "messages[1].tool_calls[0].id"},
		{"one of two calls unanswered", []string{user, calls("call_1", "call_2"), tool("call_1"), user}, "messages[1].tool_calls[1].id"},
		{"the last message's call unanswered", []string{user, call("call_1")}, "messages[1].tool_calls[0].id"},
		{"answers no call", []string{user, call("call_1"), tool("call_9")}, "messages[2].tool_call_id"},
		{"no assistant turn before it", []string{user, tool("call_1")}, "messages[1].tool_call_id"},
		{"answers a later call", []string{user, tool("call_1"), call("call_1")}, "messages[1].tool_call_id"},
		{"a call without an id", []string{user, `{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}`, tool("x")}, "messages[2].tool_call_id"},
		{"no id", []string{user, call("call_1"), `{"role": "tool", "content": "42"}`}, "messages[2].tool_call_id"},
		// One tool message would answer both.
		{"two calls with one id", []string{user, calls("call_1", "call_1"), tool("call_1")}, "messages[1].tool_calls[1].id"},
	} {
		rec, e := do(t, h, "POST", "/chat/completions", `{"model": "chat", "messages": [`+strings.Join(tc.messages, ", ")+`]}`, nil)
		if tc.param != "" {
			wantParamError(t, tc.name, rec, e, tc.param)
			continue
		}
		if rec.Code != http.StatusOK {
			t.Errorf("%s: %d %s", tc.name, rec.Code, rec.Body)
			continue
		}
		if got := <-chats; len(got.GetMessages()) != len(tc.messages) {
			t.Errorf("%s: ModelService got %d messages", tc.name, len(got.GetMessages()))
		}
	}
}

// TestContentPartsByRole: an image part belongs to a user message and a
// refusal part to an assistant's (history sent back); elsewhere each is a
// 400 naming the part's type, as the README's table says.
func TestContentPartsByRole(t *testing.T) {
	t.Parallel()
	h := newTestHandler(t, &fakeModels{})
	image := `{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}`
	refusal := `{"type": "refusal", "refusal": "I can't help with that."}`
	for _, tc := range []struct {
		role, part string
		ok         bool
	}{
		{"assistant", refusal, true},
		{"user", refusal, false},
		{"system", refusal, false},
		{"assistant", image, false},
		{"system", image, false},
	} {
		body := `{"model": "chat", "messages": [{"role": "user", "content": "hi"}, {"role": "` + tc.role + `", "content": [` + tc.part + `]}, {"role": "user", "content": "and?"}]}`
		rec, e := do(t, h, "POST", "/chat/completions", body, nil)
		if tc.ok {
			if rec.Code != http.StatusOK {
				t.Errorf("%s message with %s: %d %s", tc.role, tc.part, rec.Code, rec.Body)
			}
			continue
		}
		wantParamError(t, tc.role+" message with "+tc.part, rec, e, "messages[1].content[0].type")
	}
}
