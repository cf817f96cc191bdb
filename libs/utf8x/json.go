package utf8x

import "strconv"

// LoneSurrogate finds the first \uXXXX escape in a JSON string of body
// that is half of a UTF-16 surrogate pair without the other half: its
// offset (of its string's opening quote) and the escape as written. JSON
// allows the escape, but it stands for no character, and protojson refuses
// it with "unexpected EOF" or a misleading "invalid escape code".
func LoneSurrogate(body []byte) (off int, esc string, ok bool) {
	in, start := false, 0
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 32)
		return rune(n), err == nil
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case !in:
			if c == '"' {
				in, start = true, i
			}
		case c == '"':
			in = false
		case c == '\\':
			r, isU := hex4(i)
			if !isU {
				i++ // a two-byte escape
				continue
			}
			switch {
			case r >= 0xD800 && r <= 0xDBFF:
				if lo, ok := hex4(i + 6); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 11 // the pair
					continue
				}
				return start, string(body[i : i+6]), true
			case r >= 0xDC00 && r <= 0xDFFF:
				return start, string(body[i : i+6]), true
			}
			i += 5
		}
	}
	return 0, "", false
}
