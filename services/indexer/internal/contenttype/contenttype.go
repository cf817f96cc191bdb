// Package contenttype detects what kind of document a text is, by rules:
// the qualifier's content-type step without a model call. Each type has
// weighted signals (e-mail headers, ticket fields and keys, log line
// shapes, financial tables, meeting-note sections, endpoint lines, wiki
// headings); the source type adds a prior; the highest score wins, and
// the reason names the signals that fired.
package contenttype

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
)

// Content types.
const (
	Email           = "email"
	Ticket          = "ticket"
	Wiki            = "wiki"
	Log             = "log"
	Report          = "report"
	FinancialReport = "financial_report"
	MeetingNotes    = extract.TypeMeetingNotes
	APIDoc          = extract.TypeAPIDoc
	Generic         = "generic"
)

// Result is a detection.
type Result struct {
	// Type is the content type.
	Type string
	// Reason lists the signals behind it.
	Reason string
	// Score is the winning type's score.
	Score float64
	// Confident is true when the signals decide on their own: the
	// winner scores at least ConfidentScore (more than a source type's
	// prior alone) and leads the next type by at least ConfidentMargin.
	// Otherwise the qualifier asks a model.
	Confident bool
}

// Confidence thresholds of Result.Confident.
const (
	ConfidentScore  = 2.5
	ConfidentMargin = 1.0
)

// priors is the score a source type gives its natural content type.
var priors = map[indexerv1.SourceType]string{
	indexerv1.SourceType_SOURCE_TYPE_EMAIL:  Email,
	indexerv1.SourceType_SOURCE_TYPE_TICKET: Ticket,
	indexerv1.SourceType_SOURCE_TYPE_WIKI:   Wiki,
	indexerv1.SourceType_SOURCE_TYPE_LOG:    Log,
	indexerv1.SourceType_SOURCE_TYPE_REPORT: Report,
}

const priorWeight = 2.0

type signal struct {
	typ    string
	weight float64
	name   string
	test   func(d *input) bool
}

type input struct {
	title, text, head string
	lines             []string
}

var (
	emailHeader   = regexp.MustCompile(`(?im)^(from|to|cc|subject|sent|date|reply-to):\s+\S`)
	greeting      = regexp.MustCompile(`(?im)^(hi|hello|dear|hey)\b[^\n]{0,40},?\s*$`)
	signOff       = regexp.MustCompile(`(?im)^(regards|best regards|kind regards|thanks|thank you|cheers|best),?\s*$`)
	ticketKey     = regexp.MustCompile(`\b[A-Z][A-Z0-9]{1,9}-\d{1,6}\b`)
	ticketField   = regexp.MustCompile(`(?im)^\s*(status|priority|assignee|reporter|severity|issue type|component|labels|sprint|resolution)\s*:\s*\S`)
	ticketSection = regexp.MustCompile(`(?im)^\W*(steps to reproduce|expected( result| behaviou?r)?|actual( result| behaviou?r)?|acceptance criteria)\W*$`)
	logLine       = regexp.MustCompile(`^\s*(\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|\[?\d{2}:\d{2}:\d{2}|[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2}|\d{10,13}\s|(TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL|CRITICAL)\b)`)
	logLevel      = regexp.MustCompile(`\b(TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL|CRITICAL|level=\w+)\b`)
	meetingHead   = regexp.MustCompile(`(?im)^\W*(attendees|participants|agenda|action items|decisions|minutes|next steps)\W*(:|$)`)
	meetingTitle  = regexp.MustCompile(`(?i)\b(meeting|minutes|standup|stand-up|retro|sync|1:1|kick-?off)\b`)
	endpointLine  = regexp.MustCompile(`\b(GET|POST|PUT|PATCH|DELETE)\s+` + "`?" + `/[\w{}/.:-]*`)
	apiWords      = regexp.MustCompile(`(?i)\b(base url|endpoint|authentication|request body|response|status code|rate limit)s?\b`)
	finWords      = regexp.MustCompile(`(?i)\b(revenue|net income|net profit|earnings per share|eps|dividend|ebitda|market cap|guidance|fiscal|fy\d{2,4})\b`)
	mdHeading     = regexp.MustCompile(`(?m)^#{1,4} \S`)
	wikiWords     = regexp.MustCompile(`(?i)\b(overview|runbook|how to|troubleshooting|see also|table of contents|prerequisites|architecture)\b`)
	reportWords   = regexp.MustCompile(`(?i)\b(executive summary|findings|recommendations|conclusion|methodology|appendix|quarterly report|annual report)\b`)
)

var signals = []signal{
	{Email, 1.5, "e-mail headers", func(d *input) bool { return len(emailHeader.FindAllString(d.head, -1)) >= 2 }},
	{Email, 1, "greeting and sign-off", func(d *input) bool { return greeting.MatchString(d.text) && signOff.MatchString(d.text) }},
	{Ticket, 1.5, "ticket fields", func(d *input) bool { return len(ticketField.FindAllString(d.text, -1)) >= 2 }},
	{Ticket, 1, "issue key", func(d *input) bool { return ticketKey.MatchString(d.title) || ticketKey.MatchString(d.head) }},
	{Ticket, 1, "reproduction sections", func(d *input) bool { return ticketSection.MatchString(d.text) }},
	{Log, 3, "timestamped log lines", func(d *input) bool { return share(d.lines, logLine) >= 0.5 }},
	{Log, 1, "log levels", func(d *input) bool { return share(d.lines, logLevel) >= 0.4 }},
	{FinancialReport, 3, "financial table", func(d *input) bool { return hasFinancialTable(d) }},
	{FinancialReport, 1, "financial terms", func(d *input) bool { return len(finWords.FindAllString(d.text, -1)) >= 4 }},
	{MeetingNotes, 2, "meeting sections", func(d *input) bool { return len(meetingHead.FindAllString(d.text, -1)) >= 2 }},
	{MeetingNotes, 1, "meeting title", func(d *input) bool { return meetingTitle.MatchString(d.title) }},
	{APIDoc, 3, "endpoint lines", func(d *input) bool { return len(endpointLine.FindAllString(d.text, -1)) >= 2 }},
	{APIDoc, 1, "API vocabulary", func(d *input) bool { return len(apiWords.FindAllString(d.text, -1)) >= 2 }},
	{Wiki, 1, "headings", func(d *input) bool { return len(mdHeading.FindAllString(d.text, -1)) >= 2 }},
	{Wiki, 1, "wiki vocabulary", func(d *input) bool { return wikiWords.MatchString(d.text) }},
	{Report, 1.5, "report sections", func(d *input) bool { return len(reportWords.FindAllString(d.text, -1)) >= 2 }},
}

// minScore is what a type needs to beat Generic.
const minScore = 1.5

// Detect classifies a document. Specific structure (a financial table,
// endpoints, meeting sections, log lines) outweighs the source type, so a
// wiki page of meeting notes is "meeting_notes"; without any signal the
// source type decides, and without that, "generic".
func Detect(title, text string, source indexerv1.SourceType) Result {
	ls := strings.Split(text, "\n")
	var nonEmpty []string
	for _, l := range ls {
		if strings.TrimSpace(l) != "" {
			nonEmpty = append(nonEmpty, l)
		}
	}
	d := &input{title: title, text: text, head: strings.Join(nonEmpty[:min(12, len(nonEmpty))], "\n"), lines: nonEmpty}
	scores := map[string]float64{}
	why := map[string][]string{}
	if t, ok := priors[source]; ok {
		scores[t] += priorWeight
		why[t] = append(why[t], "source type "+strings.ToLower(strings.TrimPrefix(source.String(), "SOURCE_TYPE_")))
	}
	for _, s := range signals {
		if s.test(d) {
			scores[s.typ] += s.weight
			why[s.typ] = append(why[s.typ], s.name)
		}
	}
	type cand struct {
		typ   string
		score float64
	}
	var cs []cand
	for t, s := range scores {
		cs = append(cs, cand{t, s})
	}
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].score != cs[j].score {
			return cs[i].score > cs[j].score
		}
		return cs[i].typ < cs[j].typ
	})
	if len(cs) == 0 || cs[0].score < minScore {
		return Result{Type: Generic, Reason: "no content-type signal"}
	}
	best := cs[0]
	margin := best.score
	if len(cs) > 1 {
		margin -= cs[1].score
	}
	return Result{Type: best.typ, Reason: fmt.Sprintf("%s (score %.1f)", strings.Join(why[best.typ], ", "), best.score),
		Score: best.score, Confident: best.score >= ConfidentScore && margin >= ConfidentMargin}
}

func share(lines []string, re *regexp.Regexp) float64 {
	if len(lines) < 3 {
		return 0
	}
	n := 0
	for _, l := range lines {
		if re.MatchString(l) {
			n++
		}
	}
	return float64(n) / float64(len(lines))
}

func hasFinancialTable(d *input) bool {
	if !strings.Contains(d.text, "|") && !strings.Contains(strings.ToLower(d.text), "<table") {
		return false
	}
	exs, _ := extract.Financial{}.Extract(context.Background(), &extract.Document{Title: d.title, Text: d.text})
	return len(exs) > 0
}
