package jsonschemax

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// What validating a value costs. The library applies a schema's parts to a
// value by following every applicator, without memory: a schema whose
// allOf (or anyOf, oneOf, $ref, …) reaches one part along many paths
// applies it once per path. Twenty levels of
// {"allOf":[{"$ref":"#/$defs/lN-1"},{"$ref":"#/$defs/lN-1"}]} (1.3 KB)
// took 2.9 s of CPU to validate 42, twenty-two 14 s, and nothing stops a
// validation once it runs. A schema that turns back on itself without
// descending into the value never ends (the library stops it with an
// error, after the work the schema was for). So Compile refuses both, and
// Validate counts, before it validates, how many times the schema's parts
// would apply to the value's parts, and refuses past a bound linear in the
// value's size (the same schema can still multiply its parts along the
// value's depth: two properties schemas naming the same recursive part).

// MaxInPlace bounds how many of a schema's parts may apply to one value
// (itself, through $ref, allOf, anyOf, oneOf, not, if/then/else and
// dependencies): real schemas apply a handful.
const MaxInPlace = 1000

// ErrTooCostly is returned (wrapped) by Validate for a value the schema
// would take too long to check.
var ErrTooCostly = errors.New("the value is too costly to check against the schema")

// checkShape refuses a schema with a reference cycle or whose parts apply
// more than MaxInPlace times to one value. Its error names schemas by
// their full location (Compile makes them relative).
func checkShape(root *jsonschema.Schema) error {
	g := newGraph(root)
	// Depth-first over the in-place references: a schema met again while
	// on the path closes a cycle; a schema's count is 1 plus its in-place
	// parts' counts (each part counted once per path to it).
	const onPath = -1
	count := map[*jsonschema.Schema]int{}
	var visit func(*jsonschema.Schema) error
	visit = func(s *jsonschema.Schema) error {
		count[s] = onPath
		n := 1
		for _, next := range g.inPlace(s) {
			switch c := count[next]; {
			case c == onPath:
				return fmt.Errorf("not a valid JSON schema: %s refers back to %s without descending into the value (a reference cycle: validating any value would never end)",
					s.Location, next.Location)
			case c == 0:
				if err := visit(next); err != nil {
					return err
				}
			}
			n = min(n+count[next], MaxInPlace+1)
		}
		if n > MaxInPlace {
			return fmt.Errorf("not a valid JSON schema: %s applies more than %d schemas to one value (its $ref, allOf, anyOf, oneOf, … reach the same parts along many paths), which would take too long to check",
				s.Location, MaxInPlace)
		}
		count[s] = n
		return nil
	}
	for _, s := range g.all {
		if count[s] == 0 {
			if err := visit(s); err != nil {
				return err
			}
		}
	}
	return nil
}

// Validate validates v against s (compiled by Compile), after checking
// that doing so applies s's parts to v's parts at most 10,000 + 16 times
// per value in v: past that it returns an error wrapping ErrTooCostly
// without validating.
//
// A number with more than maxDigits digits, or an exponent past
// ±maxDigits, is refused too: the library turns every number into an
// exact fraction (big.Rat), which took 18 ms for 1e999999 and panicked
// (a nil dereference) on 1e9999999, which it cannot represent.
func Validate(s *jsonschema.Schema, v any) error {
	n, err := measure(v, nil)
	if err != nil {
		return err
	}
	w := walker{limit: 10_000 + 16*n, root: s}
	if !w.apply(s, v) {
		return fmt.Errorf("%w: its parts would apply to the value's parts more than %d times", ErrTooCostly, w.limit)
	}
	return s.Validate(v)
}

// maxDigits bounds a number's digits and its exponent's size.
const maxDigits = 1000

// measure counts the JSON values in v (at path), and refuses a number
// Validate cannot check.
func measure(v any, path []string) (int, error) {
	n := 1
	switch v := v.(type) {
	case json.Number:
		if !checkable(string(v)) {
			return 0, fmt.Errorf("at /%s: the number %.40s cannot be checked: it has more than %d digits or an exponent past ±%[3]d",
				strings.Join(path, "/"), v, maxDigits)
		}
	case map[string]any:
		for _, k := range sortedKeys(v) {
			m, err := measure(v[k], append(path, k))
			if err != nil {
				return 0, err
			}
			n += m
		}
	case []any:
		for i, e := range v {
			m, err := measure(e, append(path, strconv.Itoa(i)))
			if err != nil {
				return 0, err
			}
			n += m
		}
	}
	return n, nil
}

// checkable reports whether the JSON number s has at most maxDigits digits
// and an exponent within ±maxDigits.
func checkable(s string) bool {
	mantissa, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	if len(mantissa) > maxDigits && len(strings.Trim(strings.ReplaceAll(mantissa, ".", ""), "-")) > maxDigits {
		return false
	}
	if !hasExp {
		return true
	}
	e, err := strconv.Atoi(exp)
	return err == nil && e >= -maxDigits && e <= maxDigits
}

// walker counts schema applications as validation would make them, or
// more (both branches of if, every applicator whatever its siblings say),
// and stops past limit.
type walker struct {
	n, limit int
	root     *jsonschema.Schema
	g        *graph // built at the first dynamic reference
}

func (w *walker) apply(s *jsonschema.Schema, v any) bool {
	if w.n++; w.n > w.limit {
		return false
	}
	var inPlace []*jsonschema.Schema
	if s.DynamicRef != nil || s.RecursiveRef != nil {
		if w.g == nil {
			w.g = newGraph(w.root)
		}
		inPlace = w.g.inPlace(s)
	} else {
		inPlace = staticInPlace(s)
	}
	for _, p := range inPlace {
		if !w.apply(p, v) {
			return false
		}
	}
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if s.PropertyNames != nil && !w.apply(s.PropertyNames, k) {
				return false
			}
			matched := false
			if p := s.Properties[k]; p != nil {
				matched = true
				if !w.apply(p, e) {
					return false
				}
			}
			for re, p := range s.PatternProperties {
				if re.MatchString(k) {
					matched = true
					if !w.apply(p, e) {
						return false
					}
				}
			}
			if ap, ok := s.AdditionalProperties.(*jsonschema.Schema); ok && !matched && !w.apply(ap, e) {
				return false
			}
			if s.UnevaluatedProperties != nil && !w.apply(s.UnevaluatedProperties, e) {
				return false
			}
		}
	case []any:
		for i, e := range v {
			for _, p := range itemSchemas(s, i) {
				if !w.apply(p, e) {
					return false
				}
			}
		}
	}
	return true
}

// itemSchemas returns the schemas s applies to item i of an array.
func itemSchemas(s *jsonschema.Schema, i int) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Contains, s.UnevaluatedItems}
	switch items := s.Items.(type) {
	case *jsonschema.Schema:
		out = append(out, items)
	case []*jsonschema.Schema:
		if i < len(items) {
			out = append(out, items[i])
		} else if ai, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
			out = append(out, ai)
		}
	}
	if i < len(s.PrefixItems) {
		out = append(out, s.PrefixItems[i])
	} else {
		out = append(out, s.Items2020)
	}
	return slices.DeleteFunc(out, func(s *jsonschema.Schema) bool { return s == nil })
}

// graph is every schema a root reaches, with the targets a dynamic
// reference may resolve to.
type graph struct {
	all       []*jsonschema.Schema // in a stable order (for messages)
	dynamic   map[string][]*jsonschema.Schema
	recursive []*jsonschema.Schema
}

func newGraph(root *jsonschema.Schema) *graph {
	g := &graph{dynamic: map[string][]*jsonschema.Schema{}}
	seen := map[*jsonschema.Schema]bool{}
	add := func(ss ...*jsonschema.Schema) {
		for _, s := range ss {
			if s != nil && !seen[s] {
				seen[s] = true
				g.all = append(g.all, s)
			}
		}
	}
	add(root)
	for i := 0; i < len(g.all); i++ {
		s := g.all[i]
		add(staticInPlace(s)...)
		if s.DynamicRef != nil {
			add(s.DynamicRef.Ref)
		}
		add(descending(s)...)
		if s.DynamicAnchor != "" {
			g.dynamic[s.DynamicAnchor] = append(g.dynamic[s.DynamicAnchor], s)
		}
		if s.RecursiveAnchor {
			g.recursive = append(g.recursive, s)
		}
	}
	return g
}

// inPlace returns the schemas s applies to the very value it is given. A
// $dynamicRef (or $recursiveRef) may land on any schema of the same
// dynamic anchor, so it counts as a reference to each of them.
func (g *graph) inPlace(s *jsonschema.Schema) []*jsonschema.Schema {
	out := staticInPlace(s)
	if r := s.RecursiveRef; r != nil && r.RecursiveAnchor {
		out = append(out, g.recursive...)
	}
	if d := s.DynamicRef; d != nil && d.Ref != nil {
		out = append(out, d.Ref)
		if d.Anchor != "" && d.Ref.DynamicAnchor == d.Anchor {
			out = append(out, g.dynamic[d.Anchor]...)
		}
	}
	return out
}

// staticInPlace is inPlace without the targets of a $dynamicRef.
func staticInPlace(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else}
	out = append(out, s.AllOf...)
	out = append(out, s.AnyOf...)
	out = append(out, s.OneOf...)
	for _, k := range sortedKeys(s.Dependencies) {
		if d, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
			out = append(out, d)
		}
	}
	for _, k := range sortedKeys(s.DependentSchemas) {
		out = append(out, s.DependentSchemas[k])
	}
	return slices.DeleteFunc(out, func(s *jsonschema.Schema) bool { return s == nil })
}

// descending returns the schemas s applies to parts of its value: its
// properties, items, property names and decoded content.
func descending(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.PropertyNames, s.UnevaluatedProperties, s.Contains, s.Items2020, s.UnevaluatedItems, s.ContentSchema}
	for _, k := range sortedKeys(s.Properties) {
		out = append(out, s.Properties[k])
	}
	patterns := slices.Collect(maps.Keys(s.PatternProperties))
	slices.SortFunc(patterns, func(a, b jsonschema.Regexp) int { return strings.Compare(a.String(), b.String()) })
	for _, p := range patterns {
		out = append(out, s.PatternProperties[p])
	}
	for _, v := range []any{s.AdditionalProperties, s.AdditionalItems, s.Items} {
		switch v := v.(type) {
		case *jsonschema.Schema:
			out = append(out, v)
		case []*jsonschema.Schema:
			out = append(out, v...)
		}
	}
	out = append(out, s.PrefixItems...)
	return slices.DeleteFunc(out, func(s *jsonschema.Schema) bool { return s == nil })
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
