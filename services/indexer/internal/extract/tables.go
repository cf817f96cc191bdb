package extract

import (
	"regexp"
	"slices"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// Table is a table found in a document.
type Table struct {
	// Start and End are the byte span of the table in the text.
	Start, End int
	// Context is the nearest heading or text line above the table, which
	// often names the company or period.
	Context string
	// Header holds the column names.
	Header []string
	// Rows holds the body cells, each row as long as Header (padded).
	Rows [][]string
}

// Tables returns the markdown (GitHub pipe) tables and HTML tables in text,
// in order of appearance.
func Tables(text string) []Table {
	ts := markdownTables(text)
	ts = append(ts, htmlTables(text)...)
	// Order by position; the two kinds never overlap.
	slices.SortStableFunc(ts, func(a, b Table) int { return a.Start - b.Start })
	return ts
}

var mdSeparator = regexp.MustCompile(`^\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?$`)

// lineSpan is a line and its byte offsets.
type lineSpan struct {
	text       string
	start, end int
}

func lines(text string) []lineSpan {
	var out []lineSpan
	start := 0
	for i := 0; i <= len(text); i++ {
		if i == len(text) || text[i] == '\n' {
			out = append(out, lineSpan{text: strings.TrimRight(text[start:i], "\r"), start: start, end: i})
			start = i + 1
		}
	}
	return out
}

// markdownTables finds header row, separator row (|---|:--:|) and body rows.
func markdownTables(text string) []Table {
	ls := lines(text)
	var out []Table
	for i := 0; i+1 < len(ls); i++ {
		head := strings.TrimSpace(ls[i].text)
		if !strings.Contains(head, "|") || !mdSeparator.MatchString(strings.TrimSpace(ls[i+1].text)) {
			continue
		}
		t := Table{Start: ls[i].start, Header: splitRow(head), Context: contextAbove(ls, i)}
		j := i + 2
		for ; j < len(ls); j++ {
			row := strings.TrimSpace(ls[j].text)
			if row == "" || !strings.Contains(row, "|") {
				break
			}
			t.Rows = append(t.Rows, pad(splitRow(row), len(t.Header)))
		}
		t.End = ls[j-1].end
		out = append(out, t)
		i = j - 1
	}
	return out
}

// contextAbove returns the closest non-empty line above line i, without
// markdown heading marks or emphasis.
func contextAbove(ls []lineSpan, i int) string {
	for k := i - 1; k >= 0 && k >= i-4; k-- {
		if s := strings.TrimSpace(ls[k].text); s != "" {
			return strings.Trim(strings.TrimLeft(s, "# "), "*_: ")
		}
	}
	return ""
}

func splitRow(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(row, "|")
	row = strings.TrimSuffix(row, "|")
	cells := strings.Split(row, "|")
	for i, c := range cells {
		cells[i] = strings.Trim(strings.TrimSpace(c), "*_`")
	}
	return cells
}

func pad(cells []string, n int) []string {
	for len(cells) < n {
		cells = append(cells, "")
	}
	return cells[:max(n, 0)]
}

// htmlTables parses <table> elements with the HTML5 tokenizer. The first
// row with <th> cells (or the first row) is the header.
func htmlTables(text string) []Table {
	lower := strings.ToLower(text)
	var out []Table
	for off := 0; ; {
		i := strings.Index(lower[off:], "<table")
		if i < 0 {
			return out
		}
		start := off + i
		j := strings.Index(lower[start:], "</table>")
		if j < 0 {
			return out
		}
		end := start + j + len("</table>")
		if t, ok := parseHTMLTable(text[start:end]); ok {
			t.Start, t.End = start, end
			t.Context = htmlContext(text[:start])
			out = append(out, t)
		}
		off = end
	}
}

func parseHTMLTable(src string) (Table, bool) {
	z := html.NewTokenizer(strings.NewReader(src))
	var (
		t       Table
		row     []string
		cell    strings.Builder
		inCell  bool
		headRow bool
		caption strings.Builder
		inCap   bool
	)
	endRow := func() {
		if row == nil {
			return
		}
		if t.Header == nil && (headRow || len(t.Rows) == 0) {
			t.Header = row
		} else {
			t.Rows = append(t.Rows, row)
		}
		row, headRow = nil, false
	}
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			endRow()
			if t.Header == nil {
				return t, false
			}
			for i := range t.Rows {
				t.Rows[i] = pad(t.Rows[i], len(t.Header))
			}
			if c := strings.TrimSpace(caption.String()); c != "" {
				t.Context = c
			}
			return t, true
		case html.StartTagToken:
			name, _ := z.TagName()
			switch atom.Lookup(name) {
			case atom.Tr:
				endRow()
				row = []string{}
			case atom.Th, atom.Td:
				if atom.Lookup(name) == atom.Th {
					headRow = true
				}
				inCell = true
				cell.Reset()
			case atom.Caption:
				inCap = true
			case atom.Br:
				cell.WriteByte(' ')
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			switch atom.Lookup(name) {
			case atom.Th, atom.Td:
				if inCell {
					row = append(row, strings.Join(strings.Fields(cell.String()), " "))
				}
				inCell = false
			case atom.Tr:
				endRow()
			case atom.Caption:
				inCap = false
			}
		case html.TextToken:
			switch {
			case inCell:
				cell.Write(z.Text())
			case inCap:
				caption.Write(z.Text())
			}
		}
	}
}

var htmlTag = regexp.MustCompile(`<[^>]*>`)

// htmlContextWindow is how much of the text before a table htmlContext
// reads: the lines it looks at are near the table, and reading all of it
// for every table took minutes for a document of many small tables.
const htmlContextWindow = 1 << 10

// htmlContext returns the last line of text before a table, tags removed,
// from the last htmlContextWindow bytes of it.
func htmlContext(before string) string {
	if len(before) > htmlContextWindow {
		before = utf8x.Suffix(before, htmlContextWindow)
		// Start after a tag the window cut.
		if gt, lt := strings.IndexByte(before, '>'), strings.IndexByte(before, '<'); gt >= 0 && (lt < 0 || gt < lt) {
			before = before[gt+1:]
		}
	}
	plain := htmlTag.ReplaceAllString(before, "\n")
	ls := strings.Split(plain, "\n")
	for k := len(ls) - 1; k >= 0 && k >= len(ls)-8; k-- {
		if s := strings.TrimSpace(html.UnescapeString(ls[k])); s != "" {
			return strings.Trim(strings.TrimLeft(s, "# "), "*_: ")
		}
	}
	return ""
}
