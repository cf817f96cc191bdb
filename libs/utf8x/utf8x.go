// Package utf8x cuts and mends text for the places that take only UTF-8:
// protobuf strings, JSON, messages shown to people. Text from outside (a
// database's bytes, a program's stderr, a provider's error page, an
// e-mail's encoded words) may be in any charset, and a cut by bytes may
// fall inside a character.
package utf8x

import (
	"strings"
	"unicode/utf8"
)

// Prefix returns the longest prefix of s of at most n bytes that does not
// end inside a character ("" when n <= 0).
func Prefix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Suffix returns s from the first character that starts in its last n
// bytes ("" when n <= 0): the bytes a cut there leaves of a character (at
// most utf8.UTFMax-1 of them) are dropped. It takes text as a string or
// as bytes.
func Suffix[T ~string | ~[]byte](s T, n int) T {
	if n >= len(s) {
		return s
	}
	start := len(s) - max(n, 0)
	for i := 0; i < utf8.UTFMax-1 && start < len(s) && !utf8.RuneStart(s[start]); i++ {
		start++
	}
	return s[start:]
}

// Valid returns s with each run of bytes that are not UTF-8 replaced by
// one U+FFFD (strings.ToValidUTF8); s itself, without copying, when it is
// valid.
func Valid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
