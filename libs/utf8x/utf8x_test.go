package utf8x_test

import (
	"testing"
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// Prefix and Suffix cut at most n bytes' worth, never inside a character.
func TestPrefixAndSuffix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s              string
		n              int
		prefix, suffix string
	}{
		{"café", 10, "café", "café"},
		{"café", 5, "café", "café"},
		{"café", 4, "caf", "afé"},
		{"café", 3, "caf", "fé"},
		{"café", 1, "c", ""}, // é is bytes 3-4
		{"café", 2, "ca", "é"},
		{"错错", 4, "错", "错"},
		{"错错", 2, "", ""},
		{"abc", 0, "", ""},
		{"abc", -1, "", ""},
		{"", 3, "", ""},
		{"\xff\xfe", 1, "\xff", "\xfe"}, // not UTF-8: cut where asked
		{"\x80\x80\x80\x80\x80a", 5, "\x80\x80\x80\x80\x80", "\x80a"}, // at most 3 bytes dropped
	} {
		if got := utf8x.Prefix(tc.s, tc.n); got != tc.prefix {
			t.Errorf("Prefix(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.prefix)
		}
		if got := utf8x.Suffix(tc.s, tc.n); got != tc.suffix {
			t.Errorf("Suffix(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.suffix)
		}
		if got := string(utf8x.Suffix([]byte(tc.s), tc.n)); got != tc.suffix {
			t.Errorf("Suffix([]byte(%q), %d) = %q, want %q", tc.s, tc.n, got, tc.suffix)
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
