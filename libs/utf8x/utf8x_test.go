package utf8x_test

import (
	"testing"
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/libs/utf8x"
)

func TestPrefix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"café", 10, "café"},
		{"café", 5, "café"},
		{"café", 4, "caf"}, // é is bytes 3-4
		{"café", 3, "caf"},
		{"错错", 4, "错"},
		{"错错", 2, ""},
		{"abc", 0, ""},
		{"abc", -1, ""},
		{"", 3, ""},
		{"\xff\xfe", 1, "\xff"}, // not UTF-8: cut where asked
	} {
		if got := utf8x.Prefix(tc.s, tc.n); got != tc.want {
			t.Errorf("Prefix(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestValid(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]string{
		"café":       "café",
		"caf\xe9":    "caf\uFFFD",
		"\xc3(":      "\uFFFD(",
		"a\xff\xfeb": "a\uFFFDb", // a run of bad bytes is one U+FFFD, as strings.ToValidUTF8
		"":           "",
	} {
		if got := utf8x.Valid(s); got != want || !utf8.ValidString(got) {
			t.Errorf("Valid(%q) = %q, want %q", s, got, want)
		}
	}
}
