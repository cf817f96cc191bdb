package document

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
)

// termSep separates the parts of an extract term.
const termSep = "\x1f"

// Norm normalises a value for extract matching: numbers (or strings that
// parse as numbers) in shortest form, so "55658000000", "5.5658e10" and
// 55658e6 are equal; other strings trimmed and lower-cased, so "bhp"
// finds "BHP".
func Norm(v any) string {
	switch x := v.(type) {
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case string:
		s := strings.TrimSpace(x)
		if f, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64); err == nil && s != "" {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
		return strings.ToLower(s)
	case nil:
		return ""
	}
	return strings.ToLower(fmt.Sprint(v))
}

// TypeTerm is the term every extract of a type carries.
func TypeTerm(typ string) string { return typ + termSep }

// Term is the index term "type, field path, normalised value".
func Term(typ, path string, v any) string { return typ + termSep + path + termSep + Norm(v) }

// ExtractTerms returns the sorted, distinct index terms of extracts: one
// per extract type, and one per (type, dotted field path, value) leaf.
// Arrays are flattened, so an attendee or an action item owner is
// findable ("action_items.owner" = "ana").
func ExtractTerms(exs []extract.Extract) []string {
	set := map[string]bool{}
	for _, e := range exs {
		set[TypeTerm(e.Type)] = true
		leaves(e.Data, "", func(path string, v any) { set[Term(e.Type, path, v)] = true })
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// leaves calls fn for every scalar under v with its dotted path.
func leaves(v any, path string, fn func(string, any)) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			leaves(c, p, fn)
		}
	case []any:
		for _, c := range x {
			leaves(c, path, fn)
		}
	default:
		if path != "" {
			fn(path, x)
		}
	}
}

// FilterTerms returns the terms a document must carry to match an extract
// type and field filter.
func FilterTerms(typ string, fields map[string]string) []string {
	out := []string{TypeTerm(typ)}
	for path, v := range fields {
		out = append(out, Term(typ, path, v))
	}
	sort.Strings(out)
	return out
}

// Matches reports whether one extract is of typ and has, for every field
// of the filter, a leaf at that path equal (after Norm) to the value. The
// store narrows candidates by terms; Matches then requires all fields to
// hold in the same extract, not spread over two.
func Matches(e extract.Extract, typ string, fields map[string]string) bool {
	if e.Type != typ {
		return false
	}
	for path, want := range fields {
		w := Norm(want)
		found := false
		leaves(e.Data, "", func(p string, v any) {
			if p == path && Norm(v) == w {
				found = true
			}
		})
		if !found {
			return false
		}
	}
	return true
}
