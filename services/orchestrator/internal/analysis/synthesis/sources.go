package synthesis

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/schemas"
)

// provenance is what the tool jobs of an analysis returned: the names a
// claim may cite as its source.
type provenance struct {
	// cited holds, for every call that returned data, its tool name, its
	// title (the heading of its result in the prompt) and every
	// "document_id" string in its data.
	cited map[string]bool
	// noData maps the tool name and title of each call that returned no
	// data to its data_gaps line, for calls whose tool never returned data.
	noData map[string]string
	// sources are the tools that returned data, for messages.
	sources []string
}

func newProvenance(outcomes []Outcome) *provenance {
	p := &provenance{cited: map[string]bool{}, noData: map[string]string{}}
	p.sources, _ = Coverage(outcomes)
	for _, o := range outcomes {
		if !o.gotData() {
			continue
		}
		p.cited[o.Tool], p.cited[o.Title] = true, true
		var data any
		if json.Unmarshal(o.Data, &data) == nil {
			documentIDs(data, p.cited)
		}
	}
	for _, o := range outcomes {
		if o.gotData() {
			continue
		}
		_, gaps := Coverage([]Outcome{o})
		for _, name := range []string{o.Tool, o.Title} {
			if _, seen := p.noData[name]; !seen && !p.cited[name] {
				p.noData[name] = gaps[0]
			}
		}
	}
	return p
}

// documentIDs adds every string value of a "document_id" key in v to ids:
// the documents a search or extract result returned.
func documentIDs(v any, ids map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, sub := range x {
			if id, ok := sub.(string); ok && k == "document_id" && id != "" {
				ids[id] = true
			}
			documentIDs(sub, ids)
		}
	case []any:
		for _, sub := range x {
			documentIDs(sub, ids)
		}
	}
}

// CheckSources checks the source of every claim in answer (every object,
// at any depth, that has a "source" key) against what the tool jobs
// returned, and marks it: "supported": true when the source is exactly the
// name of a tool that returned data, the title of such a call (its heading
// in the synthesis prompt), or a document_id found in such a call's data,
// or a list of such names; otherwise "supported": false with
// "unsupported_reason". Marks the model wrote are replaced. It returns how
// many claims it checked and how many are unsupported. An answer without
// any "source" has no claim to check: then only data_sources and data_gaps,
// which our code sets, speak for where the data came from.
func CheckSources(answer map[string]any, outcomes []Outcome) (checked, unsupported int) {
	p := newProvenance(outcomes)
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if src, ok := x[schemas.FieldSource]; ok {
				checked++
				delete(x, schemas.FieldUnsupportedReason)
				reason := p.check(src)
				x[schemas.FieldSupported] = reason == ""
				if reason != "" {
					unsupported++
					x[schemas.FieldUnsupportedReason] = reason
				}
			}
			for _, sub := range x {
				walk(sub)
			}
		case []any:
			for _, sub := range x {
				walk(sub)
			}
		}
	}
	walk(answer)
	return checked, unsupported
}

// check returns why src is not an accepted source, or "" when it is.
func (p *provenance) check(src any) string {
	switch x := src.(type) {
	case string:
		return p.checkOne(x)
	case []any:
		if len(x) == 0 {
			return "no source given"
		}
		for _, item := range x {
			s, ok := item.(string)
			if !ok {
				return fmt.Sprintf("source list holds %s, not a name", jsonText(item))
			}
			if reason := p.checkOne(s); reason != "" {
				return reason
			}
		}
		return ""
	case nil:
		return "no source given"
	}
	return fmt.Sprintf("source %s is not a name", jsonText(src))
}

func (p *provenance) checkOne(src string) string {
	s := strings.TrimSpace(src)
	switch {
	case s == "":
		return "no source given"
	case p.cited[s]:
		return ""
	}
	if gap, ok := p.noData[s]; ok {
		return fmt.Sprintf("source %q returned no data (%s)", s, gap)
	}
	with := "no tool returned data"
	if len(p.sources) > 0 {
		with = "tools with data: " + strings.Join(p.sources, ", ")
	}
	return fmt.Sprintf("source %q is not a tool that returned data, the heading of such a result, or a document_id it holds (%s)", s, with)
}

// jsonText renders a decoded JSON value for messages.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
