package extract

import (
	"regexp"
	"strings"
)

// section is a headed part of a document: "## Decisions", "Action items:",
// "**Attendees**", or an inline "Attendees: Ana, Bo" line.
type section struct {
	heading string // lower case, without marks
	items   []item
}

// item is one bullet or line under a heading.
type item struct {
	text       string
	start, end int
}

var (
	mdHeading   = regexp.MustCompile(`^#{1,6}\s+(.+?)\s*#*$`)
	boldHeading = regexp.MustCompile(`^\*\*([^*]+?)\*\*:?$`)
	colonHead   = regexp.MustCompile(`^([A-Za-z][A-Za-z /&-]{1,40}):\s*(.*)$`)
	bullet      = regexp.MustCompile(`^\s*(?:[-*+•]|\d+[.)])\s+(?:\[[ xX]\]\s*)?`)
)

// sections splits text into headed sections. Text before the first
// heading is a section with an empty heading.
func sections(text string) []section {
	out := []section{{}}
	cur := &out[0]
	for _, l := range lines(text) {
		s := strings.TrimSpace(l.text)
		if s == "" {
			continue
		}
		var head, inline string
		if m := mdHeading.FindStringSubmatch(s); m != nil {
			head = m[1]
		} else if m := boldHeading.FindStringSubmatch(s); m != nil {
			head = m[1]
		} else if m := colonHead.FindStringSubmatch(s); m != nil && !bullet.MatchString(l.text) {
			head, inline = m[1], strings.TrimSpace(m[2])
		}
		if head != "" {
			out = append(out, section{heading: strings.ToLower(strings.Trim(head, "*_: "))})
			cur = &out[len(out)-1]
			if inline != "" {
				off := l.start + strings.LastIndex(l.text, inline)
				cur.items = append(cur.items, item{text: inline, start: off, end: off + len(inline)})
			}
			continue
		}
		t := strings.TrimSpace(bullet.ReplaceAllString(l.text, ""))
		if t == "" {
			continue
		}
		off := l.start + strings.Index(l.text, t)
		cur.items = append(cur.items, item{text: t, start: off, end: off + len(t)})
	}
	return out
}

// find returns the items of every section whose heading matches re.
func find(secs []section, re *regexp.Regexp) []item {
	var out []item
	for _, s := range secs {
		if s.heading != "" && re.MatchString(s.heading) {
			out = append(out, s.items...)
		}
	}
	return out
}

func hasSection(secs []section, re *regexp.Regexp) bool {
	for _, s := range secs {
		if s.heading != "" && re.MatchString(s.heading) {
			return true
		}
	}
	return false
}
