package chunk

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSplitRespectsBoundariesSizeAndOverlap(t *testing.T) {
	t.Parallel()
	para1 := "The quarterly review covered revenue. Margins improved in every region. The board approved the dividend."
	para2 := strings.Repeat("Mining output rose again this quarter. ", 12) + "Iron ore prices stayed firm."
	table := "| metric | FY24 |\n|---|---|\n| revenue | 55.7 |\n| net income | 7.9 |\n| eps | 1.55 |"
	text := para1 + "\n\n" + para2 + "\n\n" + table + "\n"
	o := Options{Size: 200, Overlap: 60}
	chunks := Split(text, o)
	if len(chunks) < 4 {
		t.Fatalf("%d chunks, want at least 4", len(chunks))
	}
	for i, c := range chunks {
		if c.Seq != i {
			t.Fatalf("chunk %d has seq %d", i, c.Seq)
		}
		if text[c.Start:c.End] != c.Text {
			t.Fatalf("chunk %d span does not match its text", i)
		}
		if n := utf8.RuneCountInString(c.Text); n > o.Size {
			t.Fatalf("chunk %d has %d characters, max %d", i, n, o.Size)
		}
		// Prose chunks end at a sentence end; table chunks at a row end.
		last := c.Text[len(c.Text)-1]
		if last != '.' && last != '|' {
			t.Fatalf("chunk %d ends mid-sentence: %q", i, c.Text)
		}
	}
	// The first paragraph fits: it is a chunk on its own.
	if chunks[0].Text != para1 {
		t.Fatalf("first chunk = %q, want the first paragraph", chunks[0].Text)
	}
	// Chunks inside the long paragraph overlap by whole sentences.
	overlapped := false
	for i := 1; i < len(chunks); i++ {
		if chunks[i].Start < chunks[i-1].End {
			overlapped = true
			if n := utf8.RuneCountInString(text[chunks[i].Start:chunks[i-1].End]); n > o.Overlap {
				t.Fatalf("chunks %d and %d overlap by %d characters, max %d", i-1, i, n, o.Overlap)
			}
		}
		if chunks[i].Start <= chunks[i-1].Start {
			t.Fatalf("chunk %d does not move forward", i)
		}
	}
	if !overlapped {
		t.Fatal("no chunks overlap")
	}
	// Every non-space character is in some chunk.
	covered := make([]bool, len(text))
	for _, c := range chunks {
		for i := c.Start; i < c.End; i++ {
			covered[i] = true
		}
	}
	for i := range text {
		if !covered[i] && !strings.ContainsRune(" \n\t", rune(text[i])) {
			t.Fatalf("byte %d (%q) is in no chunk", i, text[i])
		}
	}
	// The table stays whole: it fits in one chunk.
	if last := chunks[len(chunks)-1]; last.Text != table {
		t.Fatalf("last chunk = %q, want the table", last.Text)
	}
}

func TestSplitEdgeCases(t *testing.T) {
	t.Parallel()
	o := Options{Size: 60, Overlap: 10}
	tests := []struct {
		name     string
		text     string
		wantN    int
		maxRunes int
	}{
		{"empty", "", 0, 0},
		{"whitespace only", " \n\n\t ", 0, 0},
		{"one short line", "hello world", 1, 60},
		{"a word longer than a chunk", strings.Repeat("x", 150), 3, 60},
		{"no sentence ends", strings.Repeat("word ", 40), 4, 60},
		{"multibyte characters", strings.Repeat("Ünïcødé — 日本語 text. ", 10), 4, 60},
		{"log lines", strings.Repeat("2024-05-01T10:00:00Z ERROR payment-api timeout calling ledger\n", 6), 6, 60},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			chunks := Split(tc.text, o)
			if tc.wantN > 0 && len(chunks) < tc.wantN || tc.wantN == 0 && len(chunks) != 0 {
				t.Fatalf("%d chunks, want %d or more", len(chunks), tc.wantN)
			}
			for _, c := range chunks {
				if n := utf8.RuneCountInString(c.Text); n > tc.maxRunes || n == 0 {
					t.Fatalf("chunk of %d characters: %q", n, c.Text)
				}
				if !utf8.ValidString(c.Text) {
					t.Fatalf("chunk cuts a character: %q", c.Text)
				}
			}
		})
	}
}

func TestSentenceSplitKeepsAbbreviations(t *testing.T) {
	t.Parallel()
	text := "We use e.g. the ledger service. Then we call Dr. Smith about v1.2 of it. Done!"
	got := splitSentences(text, unit{start: 0, end: len(text)})
	var parts []string
	for _, u := range got {
		parts = append(parts, text[u.start:u.end])
	}
	want := []string{"We use e.g. the ledger service.", "Then we call Dr.", "Smith about v1.2 of it.", "Done!"}
	if strings.Join(parts, "|") != strings.Join(want, "|") {
		t.Fatalf("sentences = %q, want %q", parts, want)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{{Size: 10}, {Size: 100, Overlap: -1}, {Size: 100, Overlap: 60}} {
		if o.Validate() == nil {
			t.Errorf("%+v is accepted", o)
		}
	}
	if err := (Options{Size: 1000, Overlap: 150}).Validate(); err != nil {
		t.Fatal(err)
	}
}
