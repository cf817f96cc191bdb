package jsonstr_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/libs/jsonstr"
)

// reference is encoding/json's spelling of s.
func reference(t *testing.T, s string, escapeHTML bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(escapeHTML)
	if err := e.Encode(s); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func check(t *testing.T, s string) {
	t.Helper()
	for _, html := range []bool{true, false} {
		want := reference(t, s, html)
		if got := jsonstr.Append([]byte("x"), s, html); !bytes.Equal(got[1:], want) {
			t.Fatalf("Append(%q, html %v) = %s, encoding/json writes %s", s, html, got[1:], want)
		}
		if plain := jsonstr.Plain(s, html); plain != (string(want) == `"`+s+`"`) {
			t.Fatalf("Plain(%q, html %v) = %v, encoding/json writes %s", s, html, plain, want)
		}
	}
}

// TestAppendAsEncodingJSON: every ASCII byte alone and among others, HTML
// characters, U+2028/U+2029, other runes, invalid UTF-8, and random mixes
// of them, with and without HTML escaping.
func TestAppendAsEncodingJSON(t *testing.T) {
	t.Parallel()
	cases := []string{"", "plain", `q"b\s`, "<a&b>", "line\u2028par\u2029", "日本 é 😀", "\x7f", "a\u2027\u202a", "\xff", "\xed\xa0\x80"}
	for c := range 0x80 {
		cases = append(cases, string(rune(c)), "x"+string(rune(c))+"y")
	}
	runes := []string{"a", `"`, `\`, "<", ">", "&", "\n", "\t", "\b", "\f", "\r", "\x00", "\x1f", "\x7f", "é", "\u2028", "\u2029", "日", "😀", "\ufffd", "\xff"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		var sb strings.Builder
		for range rng.IntN(12) {
			sb.WriteString(runes[rng.IntN(len(runes))])
		}
		cases = append(cases, sb.String())
	}
	for _, s := range cases {
		check(t, s)
	}
}

func FuzzAppend(f *testing.F) {
	for _, s := range []string{"", "plain", "<&>", "\u2028", "\xed\xa0\x80", "\xf4\x90\x80\x80", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(check)
}
