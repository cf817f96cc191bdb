package pipeline

import (
	"regexp"
	"strings"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
)

var (
	// fieldLine is a "Name: value" line, markdown emphasis and list
	// markers allowed around the name ("**Status:** Open", "- Assignee: x").
	fieldLine = regexp.MustCompile(`(?m)^[ \t]*(?:[-*+][ \t]+)?[*_]{0,2}([A-Za-z][A-Za-z .]{1,30}?)[*_]{0,2}[ \t]*:[*_]{0,2}[ \t]*(.*?)[ \t]*$`)
	issueKey  = regexp.MustCompile(`\b[A-Z][A-Z0-9]{1,9}-\d{1,6}\b`)
	// Headings: markdown, Confluence wiki markup, HTML.
	mdHeading   = regexp.MustCompile(`(?m)^[ \t]{0,3}#{1,6}[ \t]+(.+?)[ \t#]*$`)
	wikiHeading = regexp.MustCompile(`(?m)^[ \t]*h[1-6]\.[ \t]+(.+?)[ \t]*$`)
	htmlHeading = regexp.MustCompile(`(?is)<h[1-6][^>]*>(.*?)</h[1-6]>`)
	// "Created by Jan Novak on 3 May", "Last updated by Ana, 2024-05-01".
	byLine = regexp.MustCompile(`(?im)^[ \t]*(?:created|written|last (?:updated|edited|modified)|owned|maintained)[ \t]+by[ \t]+([^,\n]+?)(?:[ \t]+on[ \t].*|,.*)?[ \t]*$`)
)

// fields returns the "Name: value" lines of text by lower-case name, the
// first value of each name winning, and the line index where each was.
func fields(text string) map[string]string {
	out := map[string]string{}
	for _, m := range fieldLine.FindAllStringSubmatch(text, -1) {
		name := strings.ToLower(strings.Join(strings.Fields(m[1]), " "))
		if _, ok := out[name]; !ok {
			out[name] = strings.Trim(m[2], "*_ \t")
		}
	}
	return out
}

// first returns the first non-empty value of names in f.
func first(f map[string]string, names ...string) string {
	for _, n := range names {
		if v := f[n]; v != "" {
			return v
		}
	}
	return ""
}

// ticketFieldNames are the field names of a ticket's header block; a
// description section ends at the next of them.
var ticketFieldNames = map[string]bool{
	"key": true, "issue key": true, "issue": true, "summary": true, "status": true, "type": true, "issue type": true,
	"assignee": true, "reporter": true, "epic": true, "epic link": true, "epic name": true, "parent": true, "sprint": true,
	"priority": true, "severity": true, "labels": true, "components": true, "component": true, "fix version": true,
	"fix versions": true, "resolution": true, "created": true, "updated": true, "project": true, "story points": true,
}

// ParseJira reads a Jira-like ticket: its fields ("Status: In Progress"),
// its key (a field, else the first issue key in the title or the text),
// and the change it asks for (the Description section, else the text
// that is not a field).
func ParseJira(title, text string) *indexerv1.JiraExtraction {
	f := fields(text)
	ex := &indexerv1.JiraExtraction{
		Key:      first(f, "key", "issue key", "issue"),
		Summary:  first(f, "summary"),
		Status:   first(f, "status"),
		Type:     first(f, "issue type", "type"),
		Assignee: first(f, "assignee"),
		Reporter: first(f, "reporter"),
		Epic:     first(f, "epic", "epic link", "epic name", "parent"),
		Sprint:   first(f, "sprint"),
		Priority: first(f, "priority", "severity"),
	}
	if k := issueKey.FindString(ex.Key); k != "" {
		ex.Key = k
	} else if k := issueKey.FindString(title); k != "" {
		ex.Key = k
	} else {
		ex.Key = issueKey.FindString(text)
	}
	if ex.Summary == "" {
		ex.Summary = strings.TrimSpace(strings.Trim(strings.TrimSpace(strings.Replace(title, ex.Key, "", 1)), ":-–[]"))
	}
	ex.ChangeDescription = section(text, "description")
	if ex.ChangeDescription == "" {
		var rest []string
		for _, l := range strings.Split(text, "\n") {
			if m := fieldLine.FindStringSubmatch(l); m != nil && ticketFieldNames[strings.ToLower(strings.TrimSpace(m[1]))] {
				continue
			}
			rest = append(rest, l)
		}
		ex.ChangeDescription = strings.TrimSpace(strings.Join(rest, "\n"))
	}
	ex.ChangeDescription = clip(ex.ChangeDescription, 4000)
	return ex
}

// section returns the text of the section named name: from its "Name:"
// line (or heading) to the next ticket field, heading or end.
func section(text, name string) string {
	lines := strings.Split(text, "\n")
	start := -1
	var b []string
	for i, l := range lines {
		t := strings.Trim(strings.TrimSpace(l), "#*_ \t")
		low := strings.ToLower(t)
		if start < 0 {
			if low == name || low == name+":" || strings.HasPrefix(low, name+":") {
				start = i
				if rest := strings.TrimSpace(t[len(name):]); strings.HasPrefix(rest, ":") {
					if v := strings.TrimSpace(rest[1:]); v != "" {
						b = append(b, v)
					}
				}
			}
			continue
		}
		if mdHeading.MatchString(l) || wikiHeading.MatchString(l) {
			break
		}
		if m := fieldLine.FindStringSubmatch(l); m != nil && ticketFieldNames[strings.ToLower(strings.TrimSpace(m[1]))] {
			break
		}
		b = append(b, l)
	}
	return strings.TrimSpace(strings.Join(b, "\n"))
}

// ParseConfluence reads a Confluence-like page: author (an "Author:"
// field or a "Created by" line), title (the document's, else the first
// heading), topic (a "Space:" or "Topic:" field, else the first sentence
// of the first paragraph), and the headings in page order.
func ParseConfluence(title, text string) *indexerv1.ConfluenceExtraction {
	f := fields(text)
	ex := &indexerv1.ConfluenceExtraction{
		Author: first(f, "author", "owner", "page owner"),
		Title:  strings.TrimSpace(title),
		Topic:  first(f, "topic", "space"),
	}
	if ex.Author == "" {
		if m := byLine.FindStringSubmatch(text); m != nil {
			ex.Author = strings.TrimSpace(m[1])
		}
	}
	type at struct {
		pos  int
		text string
	}
	var hs []at
	for _, re := range []*regexp.Regexp{mdHeading, wikiHeading, htmlHeading} {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			h := strings.TrimSpace(stripTags(text[m[2]:m[3]]))
			if h != "" {
				hs = append(hs, at{m[0], h})
			}
		}
	}
	// In page order, whatever the markup.
	for i := 1; i < len(hs); i++ {
		for j := i; j > 0 && hs[j].pos < hs[j-1].pos; j-- {
			hs[j], hs[j-1] = hs[j-1], hs[j]
		}
	}
	for _, h := range hs {
		ex.Headings = append(ex.Headings, h.text)
	}
	if ex.Title == "" && len(ex.Headings) > 0 {
		ex.Title = ex.Headings[0]
	}
	if ex.Topic == "" {
		ex.Topic = firstSentence(text)
	}
	return ex
}

// firstSentence is the first sentence of the first paragraph of prose: not
// a heading, a field or markup.
func firstSentence(text string) string {
	for _, para := range strings.Split(text, "\n\n") {
		p := strings.TrimSpace(para)
		if p == "" || mdHeading.MatchString(p) && !strings.Contains(p, "\n") || wikiHeading.MatchString(p) && !strings.Contains(p, "\n") {
			continue
		}
		var prose []string
		for _, l := range strings.Split(p, "\n") {
			if mdHeading.MatchString(l) || wikiHeading.MatchString(l) || fieldLine.MatchString(l) || byLine.MatchString(l) {
				continue
			}
			prose = append(prose, strings.TrimSpace(l))
		}
		s := strings.TrimSpace(stripTags(strings.Join(prose, " ")))
		if s == "" {
			continue
		}
		if i := strings.IndexAny(s, ".!?"); i > 0 {
			s = s[:i+1]
		}
		return clip(s, 200)
	}
	return ""
}

// clip cuts s to at most n runes.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
