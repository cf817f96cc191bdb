package openaiapi

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
)

// benchBody is the load bench's chat request (services/modelgateway/cmd/loadbench).
const benchBody = `{"messages":[{"content":"You are a concise financial analyst.","role":"system"},` +
	`{"content":"Summarise the quarter in one sentence. #123456","role":"user"}],"model":"chat",` +
	`"stream":true,"stream_options":{"include_usage":true}}`

// BenchmarkDecodeChat measures reading a chat request, the API's own work
// on the path of every request (go test -bench DecodeChat -benchmem).
func BenchmarkDecodeChat(b *testing.B) {
	body := []byte(benchBody)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeChat(body); err != nil {
			b.Fatal(err)
		}
	}
}

// TestObjectReadsLikeEncodingJSON: the fields of an object read from valid
// JSON are the values encoding/json gives, whatever the spacing, escapes,
// duplicate keys (the last wins) and nesting; invalid JSON is refused with
// encoding/json's own message.
func TestObjectReadsLikeEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		want       map[string]string // field → its str value, "" when absent or not a string
		err        string
	}{
		{name: "compact", body: `{"model":"chat","user":"u"}`, want: map[string]string{"model": "chat", "user": "u"}},
		{name: "spaced", body: " \n{ \"model\" :\t\"chat\" , \"user\":\r\n\"u\" }\n", want: map[string]string{"model": "chat", "user": "u"}},
		{name: "escaped key", body: `{"mo\u0064el":"chat"}`, want: map[string]string{"model": "chat"}},
		{name: "escaped value", body: `{"model":"ch\"a\\t\u00e9\n"}`, want: map[string]string{"model": "ch\"a\\t\u00e9\n"}},
		{name: "invalid utf-8", body: "{\"model\":\"a\xffb\"}", err: "body: not valid JSON: the body is not valid UTF-8"},
		{name: "duplicate key, last wins", body: `{"model":"a","model":"b"}`, want: map[string]string{"model": "b"}},
		{name: "nested values skipped", body: `{"x":{"model":"no","y":[1,{"z":"]}"}]},"s":"}]\"","model":"yes"}`, want: map[string]string{"model": "yes"}},
		{name: "empty", body: `{}`, want: map[string]string{"model": ""}},
		{name: "trailing garbage", body: `{"model":"chat"} x`, err: "body: not valid JSON: invalid character 'x' after top-level value"},
		{name: "unterminated", body: `{"model":"chat"`, err: "body: not valid JSON: unexpected end of JSON input"},
		{name: "not an object", body: `["model"]`, err: "body: want a JSON object, got array"},
		{name: "byte order mark", body: "\uFEFF{\"model\":\"chat\"}", err: "body: not valid JSON: it starts with a byte order mark (U+FEFF), which JSON sent over a network must not have"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseObject([]byte(tc.body), "")
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for field, want := range tc.want {
				got, _, err := o.str(field)
				if err != nil || got != want {
					t.Errorf("str(%q) = %q, %v; want %q", field, got, err, want)
				}
			}
		})
	}
}

// TestNestedObjectReplacesInvalidUTF8: the body is checked whole (above);
// a nested object read on its own replaces a bad byte as encoding/json does.
func TestNestedObjectReplacesInvalidUTF8(t *testing.T) {
	t.Parallel()
	o, err := parseObject([]byte("{\"model\":\"a\xffb\"}"), "messages[0]")
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := o.str("model"); err != nil || got != "a\ufffdb" {
		t.Errorf("str(model) = %q, %v; want a\ufffdb", got, err)
	}
}

// TestDecodeChatArrays: elements of arrays are read whole, nested ones too.
func TestDecodeChatArrays(t *testing.T) {
	t.Parallel()
	cr, err := decodeChat([]byte(benchBody))
	if err != nil {
		t.Fatal(err)
	}
	if !cr.stream || !cr.includeUsage {
		t.Errorf("stream %v, include usage %v; want both", cr.stream, cr.includeUsage)
	}
	ref, err := decodeChat([]byte(`{"model": "chat", "stream": true, "stream_options": {"include_usage": true}, "messages": [
		{"role": "system", "content": "You are a concise financial analyst."},
		{"role": "user", "content": [{"type": "text", "text": "Summarise the quarter in one sentence. #123456"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(ref.req, cr.req) {
		t.Errorf("the same request spelled two ways decodes differently:\n%v\n%v", ref.req, cr.req)
	}
}

// FuzzParseObject checks parseObject against encoding/json on any input:
// where encoding/json reads an object into a map, every field has the
// same value (and no other field exists); where it refuses, so does
// parseObject, with its message. go test -fuzz ParseObject explores
// further than the seeds.
func FuzzParseObject(f *testing.F) {
	for _, seed := range []string{benchBody, `{}`, `{"a":1,"a":[2]}`, `{"k\"ey":"v\\"}`, "{\"\xff\":\"\xfe\"}", ` { "a" : { "b" : [ "}" , "]" ] } } `,
		`{"a":-1.5e+3,"b":true,"c":null,"d":false}`, `{"a":"\u00e9\ud83d\ude00"}`, `{"a":1}}`, `{"a" 1}`, `[{"a":1}]`, `"{}"`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var want map[string]json.RawMessage
		werr := json.Unmarshal(raw, &want)
		o, err := parseObject(raw, "")
		if !utf8.Valid(raw) {
			if err == nil {
				t.Fatalf("parseObject(%q) accepted a body that is not UTF-8", raw)
			}
			return
		}
		if werr != nil || want == nil {
			if err == nil {
				t.Fatalf("parseObject(%q) accepted what encoding/json refuses (%v)", raw, werr)
			}
			return
		}
		if err != nil {
			t.Fatalf("parseObject(%q): %v; encoding/json read it", raw, err)
		}
		names := map[string]bool{}
		for _, m := range o.fields {
			names[string(m.name)] = true
		}
		if len(names) != len(want) {
			t.Fatalf("parseObject(%q) has fields %v, encoding/json %v", raw, names, want)
		}
		for name, v := range want {
			got, ok := o.field(name)
			if !ok || !bytes.Equal(got, v) {
				t.Fatalf("parseObject(%q).field(%q) = %q, %v; encoding/json %q", raw, name, got, ok, v)
			}
			if jsonKind(v) == "string" {
				var s string
				_ = json.Unmarshal(v, &s)
				if got, _, _ := o.str(name); got != s {
					t.Fatalf("str(%q) = %q, encoding/json %q", name, got, s)
				}
			}
			if jsonKind(v) == "array" {
				var items []json.RawMessage
				_ = json.Unmarshal(v, &items)
				got, _, _ := o.array(name)
				if len(got) != len(items) {
					t.Fatalf("array(%q) = %q, encoding/json %q", name, got, items)
				}
				for i := range items {
					if !bytes.Equal(got[i], items[i]) {
						t.Fatalf("array(%q)[%d] = %q, encoding/json %q", name, i, got[i], items[i])
					}
				}
			}
		}
	})
}

// TestIntegersInDigitsAreExact: an integer written in digits is read
// exactly over the whole int64 range (a seed drawn from 2^63 was refused
// as "want an integer, got 9.223372036854776e+18"); written as 1.0 or
// 1e3 it is read up to 2^53; past int64, or inexact, it is refused,
// naming the parameter.
func TestIntegersInDigitsAreExact(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]int64{
		"9223372036854775807":  math.MaxInt64,
		"-9223372036854775808": math.MinInt64,
		"9007199254740993":     1<<53 + 1,
		"42.0":                 42,
		"1e3":                  1000,
	} {
		cr, err := decodeChat([]byte(`{"model": "chat", "messages": [{"role": "user", "content": "hi"}], "seed": ` + text + `}`))
		if err != nil || cr.req.GetOptions().GetSeed() != want {
			t.Errorf("seed %s: %d (%v), want %d", text, cr.req.GetOptions().GetSeed(), err, want)
		}
	}
	for text, msg := range map[string]string{
		"9223372036854775808": "seed: 9223372036854775808 is out of range: want an integer from -2^63 to 2^63-1, in digits",
		"1e19":                "seed: 1e19 is out of range: want an integer from -2^63 to 2^63-1, in digits",
		"4.5":                 "seed: want an integer, got 4.5",
	} {
		_, err := decodeChat([]byte(`{"model": "chat", "messages": [{"role": "user", "content": "hi"}], "seed": ` + text + `}`))
		if err == nil || err.Error() != msg {
			t.Errorf("seed %s: %v, want %q", text, err, msg)
		}
	}
}
