package extract

import (
	"context"
	"regexp"
	"strings"
	"time"
)

// TypeMeetingNotes is the extract type of meeting notes.
const TypeMeetingNotes = "meeting_notes"

// MeetingNotes extracts date, attendees, topics, decisions and action items
// (with owner and due date) from meeting notes laid out with headings or
// "Label:" lines, as most note templates are. Deterministic: confidence 1.0.
type MeetingNotes struct{}

var _ Extractor = MeetingNotes{}

// Name returns "meeting_notes".
func (MeetingNotes) Name() string { return "meeting_notes" }

// SchemaVersion returns 1.
func (MeetingNotes) SchemaVersion() int { return 1 }

var (
	attendeesHead = regexp.MustCompile(`^(attendees|participants|present|attendance|people|who)$`)
	topicsHead    = regexp.MustCompile(`^(agenda|topics?|discussion( points)?|discussed|notes)$`)
	decisionsHead = regexp.MustCompile(`^(decisions?( made)?|decided|agreed|outcomes?|resolutions?)$`)
	actionsHead   = regexp.MustCompile(`^(action items?|actions?|next steps|to-?dos?|follow[ -]?ups?|tasks)$`)
	dateHead      = regexp.MustCompile(`^(date|when|meeting date)$`)
	meetingWords  = regexp.MustCompile(`(?i)\b(meeting|minutes|standup|stand-up|retro(spective)?|sync|1:1|review|kick-?off|planning)\b`)
)

// CanHandle reports whether doc was detected as meeting notes, or has an
// attendee list next to decisions, actions or an agenda, or a meeting-like
// title with decisions or actions.
func (MeetingNotes) CanHandle(doc *Document) bool {
	if doc.ContentType == TypeMeetingNotes {
		return true
	}
	secs := sections(doc.Text)
	structured := hasSection(secs, decisionsHead) || hasSection(secs, actionsHead)
	return (hasSection(secs, attendeesHead) && (structured || hasSection(secs, topicsHead))) ||
		(meetingWords.MatchString(doc.Title) && structured)
}

// Extract returns one meeting_notes extract spanning the notes, or none if
// nothing was found.
func (MeetingNotes) Extract(_ context.Context, doc *Document) ([]Extract, error) {
	secs := sections(doc.Text)
	data := map[string]any{}
	start, end := len(doc.Text), 0
	span := func(its []item) {
		for _, it := range its {
			start, end = min(start, it.start), max(end, it.end)
		}
	}

	if its := find(secs, dateHead); len(its) > 0 {
		data["date"] = normDate(its[0].text)
	} else if d := firstDate(doc.Title + "\n" + firstLines(doc.Text, 6)); d != "" {
		data["date"] = d
	}
	var attendees []any
	for _, it := range find(secs, attendeesHead) {
		span([]item{it})
		for _, name := range splitNames(it.text) {
			attendees = append(attendees, name)
		}
	}
	if attendees != nil {
		data["attendees"] = attendees
	}
	if its := find(secs, topicsHead); len(its) > 0 {
		span(its)
		data["topics"] = texts(its)
	} else {
		// No agenda: the other headings are the topics.
		var topics []any
		for _, s := range secs {
			if s.heading != "" && !attendeesHead.MatchString(s.heading) && !decisionsHead.MatchString(s.heading) &&
				!actionsHead.MatchString(s.heading) && !dateHead.MatchString(s.heading) && !meetingWords.MatchString(s.heading) {
				topics = append(topics, s.heading)
			}
		}
		if topics != nil {
			data["topics"] = topics
		}
	}
	decisions := find(secs, decisionsHead)
	actions := find(secs, actionsHead)
	// Inline markers anywhere: "Decision: ...", "AI: ...", "TODO: ...".
	for _, l := range lines(doc.Text) {
		s := strings.TrimSpace(bullet.ReplaceAllString(l.text, ""))
		if m := inlineDecision.FindStringSubmatch(s); m != nil {
			decisions = append(decisions, item{text: m[1], start: l.start, end: l.end})
		} else if m := inlineAction.FindStringSubmatch(s); m != nil {
			actions = append(actions, item{text: m[1], start: l.start, end: l.end})
		}
	}
	decisions, actions = dedupe(decisions), dedupe(actions)
	if len(decisions) > 0 {
		span(decisions)
		data["decisions"] = texts(decisions)
	}
	if len(actions) > 0 {
		span(actions)
		var ais []any
		for _, it := range actions {
			ais = append(ais, parseAction(it.text))
		}
		data["action_items"] = ais
	}
	if len(data) == 0 || (data["attendees"] == nil && data["decisions"] == nil && data["action_items"] == nil) {
		return nil, nil
	}
	if start > end {
		start, end = 0, len(doc.Text)
	}
	return []Extract{{Type: TypeMeetingNotes, Data: data, Confidence: 1, SpanStart: start, SpanEnd: end}}, nil
}

var (
	inlineDecision = regexp.MustCompile(`(?i)^(?:decision|decided|agreed)\s*:\s*(.+)$`)
	inlineAction   = regexp.MustCompile(`(?i)^(?:ai|action|action item|todo|to-do)\s*:\s*(.+)$`)
	splitter       = regexp.MustCompile(`\s*(?:[,;]|\band\b|&)\s*`)
	roleSuffix     = regexp.MustCompile(`\s*[(\[].*?[)\]]\s*$`)
)

func splitNames(s string) []string {
	var out []string
	for _, p := range splitter.Split(s, -1) {
		p = strings.TrimSpace(roleSuffix.ReplaceAllString(p, ""))
		p = strings.Trim(p, ".*_ ")
		if p != "" && len(p) <= 60 {
			out = append(out, p)
		}
	}
	return out
}

func texts(its []item) []any {
	out := make([]any, len(its))
	for i, it := range its {
		out[i] = it.text
	}
	return out
}

func dedupe(its []item) []item {
	seen := map[string]bool{}
	var out []item
	for _, it := range its {
		k := strings.ToLower(it.text)
		if !seen[k] {
			seen[k] = true
			out = append(out, it)
		}
	}
	return out
}

var (
	atOwner     = regexp.MustCompile(`@([A-Za-z][\w.-]*)`)
	labelOwner  = regexp.MustCompile(`(?i)\b(?:owner|assignee|assigned to)\s*[:=]?\s*([A-Z][\w.-]*(?: [A-Z][\w.-]*)?)`)
	leadOwner   = regexp.MustCompile(`^([A-Z][a-z]+(?: [A-Z][a-z]+)?)(?:\s*:\s+|\s+(?:to|will)\s+)`)
	trailOwner  = regexp.MustCompile(`\s+(?:—|–|-)\s+([A-Z][a-z]+(?: [A-Z][a-z]+)?)\s*$|\(([A-Z][a-z]+(?: [A-Z][a-z]+)?)\)\s*$`)
	dueRe       = regexp.MustCompile(`(?i)\b(?:by|due(?: date)?|before|deadline)\s*:?\s*((?:\d{4}-\d{2}-\d{2})|(?:\d{1,2} [A-Z][a-z]+(?: \d{4})?)|(?:[A-Z][a-z]+ \d{1,2}(?:,? \d{4})?)|(?:mon|tues|wednes|thurs|fri|satur|sun)day|tomorrow|eod|eow|end of (?:day|week|month|sprint|quarter)|next week)\b`)
	isoDateOnly = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)
)

// parseAction reads owner and due date out of an action item.
func parseAction(s string) map[string]any {
	a := map[string]any{"description": s}
	switch {
	case atOwner.MatchString(s):
		a["owner"] = atOwner.FindStringSubmatch(s)[1]
	case labelOwner.MatchString(s):
		a["owner"] = labelOwner.FindStringSubmatch(s)[1]
	case trailOwner.MatchString(s):
		m := trailOwner.FindStringSubmatch(s)
		a["owner"] = m[1] + m[2]
	case leadOwner.MatchString(s):
		a["owner"] = leadOwner.FindStringSubmatch(s)[1]
	}
	if m := dueRe.FindStringSubmatch(s); m != nil {
		a["due_date"] = normDate(m[1])
	}
	return a
}

// normDate turns a recognisable date into YYYY-MM-DD and leaves anything
// else as written.
func normDate(s string) string {
	s = strings.TrimSpace(s)
	if isoDateOnly.MatchString(s) {
		return s
	}
	if p := periodIn(s); p.date != "" && isoDateOnly.MatchString(p.date) {
		return p.date
	}
	for _, layout := range []string{"2006/01/02", "02/01/2006", "Monday, 2 January 2006", "Monday 2 January 2006", "Mon 2 Jan 2006"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.Format("2006-01-02")
		}
	}
	return s
}

func firstDate(s string) string {
	if p := periodIn(s); p.date != "" && isoDateOnly.MatchString(p.date) {
		return p.date
	}
	return ""
}
