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

// TestEscaped: controls and bidirectional formatting characters show as
// escapes, the characters asked to be kept (a table's tabs and newlines)
// and every other character as they are.
func TestEscaped(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain, Café 東京":             "plain, Café 東京",
		"a\x1b[31mRED\r\nX\x00":      `a\x1b[31mRED\x0d` + "\n" + `X\x00`,
		"invoice\u202egnp.exe\u0085": `invoice\u202egnp.exe\x85`,
		"col\tcol\n":                 "col\tcol\n",
	} {
		if got := utf8x.Escaped(in, '\t', '\n'); got != want {
			t.Errorf("Escaped(%q) = %q, want %q", in, got, want)
		}
	}
	if got := utf8x.Escaped("a\tb"); got != `a\x09b` {
		t.Errorf("a tab not kept: %q", got)
	}
}
