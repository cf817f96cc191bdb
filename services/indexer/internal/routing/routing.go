// Package routing makes intake's final decision, by rules: DONE when
// indexing was all a document needed (informational content), LIFT_UP when
// someone has to act on it — code to fix, an incident to analyse, a request
// to answer, a decision to make — so it goes to a stronger agent.
package routing

import (
	"fmt"
	"regexp"
	"strings"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
)

// Input is what the decision looks at.
type Input struct {
	// ContentType is the detected content type.
	ContentType string
	// Title and Text are the document's.
	Title, Text string
	// Extracts are the document's extracts.
	Extracts []extract.Extract
}

// Decision is DONE or LIFT_UP with the rule that decided.
type Decision struct {
	// Routing is the decision.
	Routing indexerv1.Routing
	// Reason says which rule decided.
	Reason string
}

var (
	openStatus    = regexp.MustCompile(`(?im)^\s*status\s*:\s*(open|new|to ?do|in progress|reopened|triage|blocked|backlog)\b`)
	urgent        = regexp.MustCompile(`(?im)^\s*(priority|severity)\s*:\s*(p0|p1|sev ?1|sev ?2|critical|blocker|highest|high|urgent)\b`)
	bugType       = regexp.MustCompile(`(?im)^\s*(issue ?type|type)\s*:\s*(bug|incident|defect)\b`)
	errorLine     = regexp.MustCompile(`(?m)\b(ERROR|FATAL|CRITICAL|PANIC|panic:|Exception|Traceback|OOMKilled|segfault)\b`)
	requestPhrase = regexp.MustCompile(`(?i)\b(can you|could you|would you|please (review|approve|confirm|advise|decide|fix|check|send|look)|need (your|you to)|action required|asap|urgent(ly)?|by (eod|end of day|tomorrow)|awaiting your|let me know)\b`)
)

// Decide applies the rules in order; the first that fires decides, and
// DONE is the default.
func Decide(in Input) Decision {
	for _, e := range in.Extracts {
		switch e.Type {
		case extract.TypeMeetingNotes:
			if n := len(list(e.Data["action_items"])); n > 0 {
				return lift(fmt.Sprintf("meeting notes with %d open action item(s)", n))
			}
		case extract.TypeProse:
			if b, _ := e.Data["action_required"].(bool); b {
				return lift("the document asks for an action or a decision (LLM extract)")
			}
		}
	}
	switch in.ContentType {
	case "ticket":
		if openStatus.MatchString(in.Text) && (urgent.MatchString(in.Text) || bugType.MatchString(in.Text)) {
			return lift("open ticket that is urgent or a bug: needs engineering work")
		}
	case "log":
		if n := len(errorLine.FindAllString(in.Text, -1)); n > 0 {
			return lift(fmt.Sprintf("log with %d error line(s): needs analysis", n))
		}
	case "email":
		if m := requestPhrase.FindString(in.Text); m != "" {
			return lift(fmt.Sprintf("e-mail asks the reader to act (%q)", strings.ToLower(m)))
		}
	}
	return Decision{Routing: indexerv1.Routing_ROUTING_DONE, Reason: "informational " + in.ContentType + ": indexed, no action needed"}
}

func lift(reason string) Decision {
	return Decision{Routing: indexerv1.Routing_ROUTING_LIFT_UP, Reason: reason}
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}
