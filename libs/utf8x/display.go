package utf8x

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// Unprintable reports the characters text shown in a terminal, a log or a
// file name must not carry as they are: controls (C0, DEL, C1: ESC starts
// a terminal's escape sequence, CR rewrites the line) and the
// bidirectional formatting characters, which reorder what follows them
// ("invoice\u202egnp.exe" reads as "invoiceexe.png").
func Unprintable(r rune) bool {
	switch {
	case unicode.IsControl(r):
		return true
	case r == '\u061c', r == '\u200e', r == '\u200f', r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069':
		return true
	}
	return false
}

// Escaped returns s with each Unprintable character but keep's written as
// a Go escape (\x1b, \u202e), so that it shows as text instead of acting
// on the terminal.
func Escaped(s string, keep ...rune) string {
	if strings.IndexFunc(s, func(r rune) bool { return Unprintable(r) && !slices.Contains(keep, r) }) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !Unprintable(r) || slices.Contains(keep, r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}
