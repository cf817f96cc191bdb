package pipeline

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
)

// LogFacts are what rules read off a log: its lines' timestamps, levels
// and error codes, and the lines that matter (warnings and worse),
// grouped by message shape.
type LogFacts struct {
	Lines       int
	First, Last time.Time
	Levels      map[string]int
	// Codes are error codes, most frequent first.
	Codes []string
	// Notable are the distinct warning-or-worse messages in order of
	// first appearance, with how often each shape occurred.
	Notable []LogEntry
	// Head and Tail are the first and last lines, for context.
	Head, Tail string
}

// LogEntry is one line of a log, with how many lines had its shape.
type LogEntry struct {
	Time  time.Time
	Level string
	Text  string
	Count int
}

var (
	// logTimestamp is a line's first ISO 8601 date and time: at its start
	// (plain text formats), or inside it ("time":"..." in JSON lines,
	// time=... in logfmt).
	logTimestamp = regexp.MustCompile(`(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?)`)
	// lineStart is the timestamp a plain text line starts with, which its
	// message follows.
	lineStart  = regexp.MustCompile(`^\s*\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?\]?`)
	logLevelRe = regexp.MustCompile(`\b(TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|ERR|SEVERE|FATAL|CRITICAL|CRIT|PANIC)\b|\blevel=("?)(\w+)`)
	// Error codes: "ERR-1042", "PAY_5001", "E1234", "ORA-00060",
	// "code=LEDGER_TIMEOUT", "errno=111", HTTP statuses 4xx/5xx after
	// "status"/"HTTP".
	codeRe = regexp.MustCompile(`\b([A-Z][A-Z0-9]{1,9}[-_]\d{3,6})\b|\b(E\d{3,5})\b|(?i:\b(?:error_code|err_code|errno|code)[=:]\s*"?([A-Za-z0-9_.-]{2,40}))|(?i:\b(?:status|http)[=: /]+([45]\d\d)\b)`)
	// shapeRe masks what varies between lines of one message shape.
	shapeRe = regexp.MustCompile(`\d+|0x[0-9a-f]+|[0-9a-f]{8}-[0-9a-f-]{27,}`)
)

// logTimeLayouts are the timestamp layouts ParseLog reads.
var logTimeLayouts = []string{
	time.RFC3339Nano, "2006-01-02T15:04:05.999999999Z0700", "2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05",
}

// severity ranks levels; warning and worse are notable.
var severity = map[string]int{"TRACE": 0, "DEBUG": 1, "INFO": 2, "NOTICE": 2, "WARN": 3, "ERROR": 4, "FATAL": 5}

// normLevel maps a level's spellings to one name.
func normLevel(l string) string {
	switch l = strings.ToUpper(l); l {
	case "WARNING":
		return "WARN"
	case "ERR", "SEVERE":
		return "ERROR"
	case "CRITICAL", "CRIT", "PANIC":
		return "FATAL"
	}
	return l
}

// ParseLog reads timestamps, levels and error codes off every line.
// Stack-trace lines ("at ...", "Caused by", indented continuation lines)
// count towards the entry they follow.
func ParseLog(text string) LogFacts {
	f := LogFacts{Levels: map[string]int{}}
	codes := map[string]int{}
	byShape := map[string]int{} // shape → index in Notable
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, strings.TrimRight(l, "\r"))
		}
	}
	f.Lines = len(lines)
	if len(lines) > 0 {
		f.Head, f.Tail = clip(lines[0], 300), clip(lines[len(lines)-1], 300)
	}
	for _, l := range lines {
		var ts time.Time
		if m := logTimestamp.FindStringSubmatch(l); m != nil {
			ts = parseLogTime(m[1])
			if !ts.IsZero() {
				if f.First.IsZero() || ts.Before(f.First) {
					f.First = ts
				}
				if ts.After(f.Last) {
					f.Last = ts
				}
			}
		}
		level := ""
		if m := logLevelRe.FindStringSubmatch(l); m != nil {
			level = m[1]
			if level == "" {
				level = m[3]
			}
			level = normLevel(level)
			f.Levels[level]++
		}
		for _, m := range codeRe.FindAllStringSubmatch(l, -1) {
			for _, c := range m[1:] {
				if c != "" {
					codes[c]++
				}
			}
		}
		if severity[level] < severity["WARN"] {
			continue
		}
		msg := l
		if m := lineStart.FindStringIndex(l); m != nil {
			msg = l[m[1]:]
		}
		msg = clip(strings.TrimSpace(msg), 300)
		shape := shapeRe.ReplaceAllString(strings.ToLower(msg), "#")
		if i, ok := byShape[shape]; ok {
			f.Notable[i].Count++
			continue
		}
		byShape[shape] = len(f.Notable)
		f.Notable = append(f.Notable, LogEntry{Time: ts, Level: level, Text: msg, Count: 1})
	}
	for c := range codes {
		f.Codes = append(f.Codes, c)
	}
	sort.Slice(f.Codes, func(i, j int) bool {
		if codes[f.Codes[i]] != codes[f.Codes[j]] {
			return codes[f.Codes[i]] > codes[f.Codes[j]]
		}
		return f.Codes[i] < f.Codes[j]
	})
	return f
}

func parseLogTime(s string) time.Time {
	s = strings.Replace(s, ",", ".", 1)
	for _, layout := range logTimeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC()
		}
	}
	return time.Time{}
}

// Extraction returns the parsed facts as a log extraction, with the rules'
// summary, key events and critical details (a model may replace those
// three: see Summarizer).
func (f LogFacts) Extraction() *indexerv1.LogExtraction {
	ex := &indexerv1.LogExtraction{LineCount: int32(f.Lines), LevelCounts: map[string]int32{}, ErrorCodes: f.Codes,
		SummarizedBy: indexerv1.DecidedBy_DECIDED_BY_RULES}
	if len(ex.ErrorCodes) > 20 {
		ex.ErrorCodes = ex.ErrorCodes[:20]
	}
	for l, n := range f.Levels {
		ex.LevelCounts[l] = int32(n)
	}
	if !f.First.IsZero() {
		ex.FirstTime, ex.LastTime = timestamppb.New(f.First), timestamppb.New(f.Last)
	}
	ex.Summary = f.summary()
	for _, e := range f.Notable {
		if len(ex.KeyEvents) == 15 {
			break
		}
		ex.KeyEvents = append(ex.KeyEvents, e.line())
	}
	if len(ex.KeyEvents) == 0 {
		ex.KeyEvents = []string{"first: " + f.Head, "last: " + f.Tail}
	}
	for _, e := range f.Notable {
		if severity[e.Level] >= severity["ERROR"] && len(ex.CriticalDetails) < 15 {
			ex.CriticalDetails = append(ex.CriticalDetails, e.line())
		}
	}
	if len(f.Codes) > 0 {
		ex.CriticalDetails = append(ex.CriticalDetails, "error codes: "+strings.Join(ex.ErrorCodes, ", "))
	}
	if len(ex.CriticalDetails) == 0 {
		ex.CriticalDetails = []string{"no errors or error codes in the log"}
	}
	return ex
}

func (e LogEntry) line() string {
	s := e.Level + " " + e.Text
	if !e.Time.IsZero() {
		s = e.Time.Format(time.RFC3339) + " " + s
	}
	if e.Count > 1 {
		s += fmt.Sprintf(" (×%d)", e.Count)
	}
	return s
}

// summary says what the log covers in a sentence or two.
func (f LogFacts) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Log of %d lines", f.Lines)
	if !f.First.IsZero() {
		fmt.Fprintf(&b, " from %s to %s (%s)", f.First.Format(time.RFC3339), f.Last.Format(time.RFC3339), f.Last.Sub(f.First).Round(time.Second))
	}
	var levels []string
	for _, l := range []string{"FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "NOTICE"} {
		if n := f.Levels[l]; n > 0 {
			levels = append(levels, fmt.Sprintf("%d %s", n, l))
		}
	}
	if len(levels) > 0 {
		b.WriteString(": " + strings.Join(levels, ", "))
	}
	b.WriteString(".")
	var worst *LogEntry
	for i := range f.Notable {
		e := &f.Notable[i]
		if worst == nil || severity[e.Level] > severity[worst.Level] || severity[e.Level] == severity[worst.Level] && e.Count > worst.Count {
			worst = e
		}
	}
	if worst != nil {
		fmt.Fprintf(&b, " Most significant: %s %s", worst.Level, worst.Text)
		if worst.Count > 1 {
			fmt.Fprintf(&b, " (%d times)", worst.Count)
		}
		b.WriteString(".")
	}
	return b.String()
}

// Digest is what a model is shown of a long log: the facts, the notable
// lines, the head and the tail, within about maxChars.
func (f LogFacts) Digest(text string, maxChars int) string {
	if len(text) <= maxChars {
		return text
	}
	var b strings.Builder
	b.WriteString(f.summary() + "\n\nNotable lines:\n")
	for _, e := range f.Notable {
		if b.Len() > maxChars*3/4 {
			break
		}
		b.WriteString(e.line() + "\n")
	}
	fmt.Fprintf(&b, "\nFirst line: %s\nLast line: %s\n", f.Head, f.Tail)
	return clip(b.String(), maxChars)
}
