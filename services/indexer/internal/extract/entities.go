package extract

import (
	"strings"
)

// Entity is something an extract names: a company ticker, a person, a
// service. Entities become graph nodes that documents MENTION.
type Entity struct {
	// Kind is "ticker", "organization", "person", "service", "product",
	// "location", "ticket" (an issue key, from the intake pipeline's
	// extraction) or "other".
	Kind string
	// Name is the display name.
	Name string
}

// Key returns the entity's graph node key, "entity:<kind>:<name>" with the
// name lower-cased and its spaces collapsed to '_', so "BHP" in two
// documents is one node.
func (e Entity) Key() string {
	return "entity:" + e.Kind + ":" + strings.ToLower(strings.Join(strings.Fields(e.Name), "_"))
}

// Entities lists the entities an extract names, without duplicates.
func Entities(ex Extract) []Entity {
	var out []Entity
	seen := map[string]bool{}
	add := func(kind string, v any) {
		s, _ := v.(string)
		s = strings.TrimSpace(s)
		if s == "" || len(s) > 100 {
			return
		}
		e := Entity{Kind: kind, Name: s}
		if !seen[e.Key()] {
			seen[e.Key()] = true
			out = append(out, e)
		}
	}
	d := ex.Data
	switch ex.Type {
	case TypeFinancial:
		add("ticker", d["ticker"])
		add("organization", d["company"])
	case TypeMeetingNotes:
		for _, a := range list(d["attendees"]) {
			add("person", a)
		}
		for _, a := range list(d["action_items"]) {
			if m, ok := a.(map[string]any); ok {
				add("person", m["owner"])
			}
		}
	case TypeAPIDoc:
		add("service", d["service_name"])
	case TypeProse:
		for _, e := range list(d["entities"]) {
			if m, ok := e.(map[string]any); ok {
				kind, _ := m["kind"].(string)
				if kind == "" {
					kind = "other"
				}
				add(kind, m["name"])
			}
		}
	}
	return out
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}
