// Package chunk splits documents into overlapping chunks for indexing,
// cutting at paragraph boundaries where it can, then at sentence (or, for
// tables, logs and lists, line) boundaries, then between words, and only as
// a last resort inside a word.
package chunk

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Options sizes the chunks, in characters (Unicode code points).
type Options struct {
	// Size is the most characters a chunk holds.
	Size int
	// Overlap is the most characters a chunk repeats from the end of the
	// previous one, in whole sentences or lines, so a fact cut by a chunk
	// boundary is still whole in one chunk.
	Overlap int
}

// Validate reports options that cannot chunk.
func (o Options) Validate() error {
	switch {
	case o.Size < 50:
		return errors.New("chunk: size must be at least 50 characters")
	case o.Overlap < 0:
		return errors.New("chunk: overlap must not be negative")
	case o.Overlap*2 > o.Size:
		return errors.New("chunk: overlap must be at most half the size")
	}
	return nil
}

// Chunk is one piece of a text.
type Chunk struct {
	// Seq numbers the chunks from 0.
	Seq int
	// Text is exactly Source[Start:End].
	Text string
	// Start and End are byte offsets into the source.
	Start, End int
}

// unit is an unbreakable run of text: a paragraph, sentence, line, run of
// words or word fragment, trimmed of surrounding space.
type unit struct {
	start, end int
	runes      int
	paraStart  bool // the first unit of a paragraph
	wholePara  bool // the whole paragraph
}

// Split cuts text into chunks of at most o.Size characters. Consecutive
// chunks share up to o.Overlap characters of whole units. Whitespace-only
// text yields no chunks. o must be valid (see Validate).
func Split(text string, o Options) []Chunk {
	units := segment(text, o.Size)
	var out []Chunk
	i := 0
	for i < len(units) {
		j := i // units[i:j+1] form the chunk
		for j+1 < len(units) && span(text, units[i], units[j+1]) <= o.Size {
			// Short paragraphs share a chunk; a long one starts its own, so
			// its first sentences are not split off into the previous chunk.
			if n := units[j+1]; n.paraStart && !n.wholePara {
				break
			}
			j++
		}
		out = append(out, Chunk{Seq: len(out), Text: text[units[i].start:units[j].end], Start: units[i].start, End: units[j].end})
		if j+1 >= len(units) {
			break
		}
		// Start the next chunk with trailing units of this one, up to the
		// overlap, never at or before i (so every chunk moves forward), and
		// never across a paragraph start (a new paragraph is a new topic).
		next := j + 1
		for k := j; k > i; k-- {
			if span(text, units[k], units[j]) > o.Overlap || units[k+1].paraStart {
				break
			}
			next = k
		}
		i = next
	}
	return out
}

// span is the character length of text from a's start to b's end.
func span(text string, a, b unit) int {
	return utf8.RuneCountInString(text[a.start:b.end])
}

// segment splits text into units of at most size characters.
func segment(text string, size int) []unit {
	var out []unit
	for _, p := range paragraphs(text) {
		if p.runes <= size {
			p.paraStart, p.wholePara = true, true
			out = append(out, p)
			continue
		}
		var parts []unit
		if lineOriented(text[p.start:p.end]) {
			parts = splitLines(text, p)
		} else {
			parts = splitSentences(text, p)
		}
		first := true
		for _, s := range parts {
			for _, piece := range fit(text, s, size) {
				piece.paraStart = first
				first = false
				out = append(out, piece)
			}
		}
	}
	return out
}

// mk builds a unit for text[start:end], trimmed of surrounding space; ok is
// false when nothing but space remains.
func mk(text string, start, end int) (unit, bool) {
	for start < end {
		r, n := utf8.DecodeRuneInString(text[start:end])
		if !unicode.IsSpace(r) {
			break
		}
		start += n
	}
	for end > start {
		r, n := utf8.DecodeLastRuneInString(text[start:end])
		if !unicode.IsSpace(r) {
			break
		}
		end -= n
	}
	if start == end {
		return unit{}, false
	}
	return unit{start: start, end: end, runes: utf8.RuneCountInString(text[start:end])}, true
}

// paragraphs splits at blank lines.
func paragraphs(text string) []unit {
	var out []unit
	start := 0
	lineStart := 0
	blank := true
	flush := func(end int) {
		if u, ok := mk(text, start, end); ok {
			out = append(out, u)
		}
	}
	for i := 0; i <= len(text); i++ {
		if i < len(text) && text[i] != '\n' {
			continue
		}
		line := text[lineStart:i]
		if strings.TrimSpace(line) == "" {
			if !blank {
				flush(lineStart)
				start = i
			}
			blank = true
		} else {
			if blank {
				start = lineStart
			}
			blank = false
		}
		lineStart = i + 1
	}
	if !blank {
		flush(len(text))
	}
	return out
}

// lineOriented reports whether a paragraph is a table, log, list or code
// block, whose lines are its natural units, rather than prose.
func lineOriented(p string) bool {
	lines := strings.Split(p, "\n")
	if len(lines) < 3 {
		return false
	}
	marked := 0
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		switch r, _ := utf8.DecodeRuneInString(l); {
		case strings.ContainsRune("|-*+#[<>", r), unicode.IsDigit(r), strings.Contains(l, "\t"):
			marked++
		}
	}
	return marked*2 >= len(lines)
}

func splitLines(text string, p unit) []unit {
	var out []unit
	start := p.start
	for i := p.start; i <= p.end; i++ {
		if i == p.end || text[i] == '\n' {
			if u, ok := mk(text, start, i); ok {
				out = append(out, u)
			}
			start = i + 1
		}
	}
	return out
}

// splitSentences cuts after '.', '!', '?' (and their closing quotes or
// brackets) followed by space and an upper-case letter, digit or opening
// mark, and at line breaks followed by a list marker. Abbreviations such
// as "e.g. the" do not end a sentence because a lower-case word follows.
func splitSentences(text string, p unit) []unit {
	var out []unit
	start := p.start
	s := text[:p.end]
	for i := p.start; i < p.end; {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		if r != '.' && r != '!' && r != '?' && r != '。' {
			continue
		}
		end := i
		for end < p.end && strings.ContainsRune(`"')]”’`, rune(s[end])) {
			end++
		}
		j := end
		sawSpace := false
		for j < p.end {
			r2, n2 := utf8.DecodeRuneInString(s[j:])
			if !unicode.IsSpace(r2) {
				break
			}
			sawSpace = true
			j += n2
		}
		if !sawSpace && j < p.end {
			continue
		}
		if j < p.end {
			next, _ := utf8.DecodeRuneInString(s[j:])
			if !unicode.IsUpper(next) && !unicode.IsDigit(next) && !strings.ContainsRune(`"'([“‘-*#`, next) {
				continue
			}
		}
		if u, ok := mk(text, start, end); ok {
			out = append(out, u)
		}
		start = end
		i = j
	}
	if u, ok := mk(text, start, p.end); ok {
		out = append(out, u)
	}
	return out
}

// fit cuts a unit longer than size between words, and a word longer than
// size between characters.
func fit(text string, u unit, size int) []unit {
	if u.runes <= size {
		return []unit{u}
	}
	var out []unit
	start := u.start
	for start < u.end {
		// Find the furthest word boundary within size characters.
		end, lastSpace, count := start, -1, 0
		for end < u.end && count < size {
			r, n := utf8.DecodeRuneInString(text[end:u.end])
			if unicode.IsSpace(r) {
				lastSpace = end
			}
			end += n
			count++
		}
		if end < u.end && lastSpace > start {
			end = lastSpace
		}
		if p, ok := mk(text, start, end); ok {
			out = append(out, p)
		}
		start = end
	}
	return out
}
