package jsonschemax

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
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
	n, err := measure(v)
	if err != nil {
		return err
	}
	limit := 10_000 + 16*n
	c := coster{root: s, limit: limit, maxWork: 8 * limit}
	if c.cost(s, v) > c.limit {
		return fmt.Errorf("%w: its parts would apply to the value's parts more than %d times", ErrTooCostly, c.limit)
	}
	return s.Validate(v)
}

// maxDigits bounds a number's digits and its exponent's size.
const maxDigits = 1000

// measure counts the JSON values in v, and refuses a number Validate
// cannot check, naming where it is.
func measure(v any) (int, error) {
	n, bad := count(v)
	if bad != nil {
		slices.Reverse(bad.path)
		return 0, fmt.Errorf("at /%s: the number %.40s cannot be checked: it has more than %d digits or an exponent past ±%[3]d",
			strings.Join(bad.path, "/"), bad.number, maxDigits)
	}
	return n, nil
}

// badNumber is a number that cannot be checked, and its path from the
// innermost part out.
type badNumber struct {
	number json.Number
	path   []string
}

func count(v any) (int, *badNumber) {
	n := 1
	switch v := v.(type) {
	case json.Number:
		if !checkable(string(v)) {
			return 0, &badNumber{number: v}
		}
	case map[string]any:
		for k, e := range v {
			m, bad := count(e)
			if bad != nil {
				bad.path = append(bad.path, k)
				return 0, bad
			}
			n += m
		}
	case []any:
		for i, e := range v {
			m, bad := count(e)
			if bad != nil {
				bad.path = append(bad.path, strconv.Itoa(i))
				return 0, bad
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

// coster counts the schema applications validating a value makes, or
// more: both branches of if, every applicator whatever its siblings say,
// and for a $dynamicRef (or $recursiveRef) the most any schema it may
// resolve to would make (the library picks one, by the dynamic scope). It
// stops counting past limit, so without dynamic references its work is
// the count. With them, it would walk every schema a reference may land
// on, so from the first one on, what a schema costs on a part of the
// value is remembered (it does not depend on how the schema was reached)
// and each pair is counted once; maxWork bounds the work whatever the
// count.
type coster struct {
	root           *jsonschema.Schema
	g              *graph          // built at the first dynamic reference
	memo           map[costKey]int // from the first dynamic reference on
	limit, maxWork int
	work           int
}

// costKey is a schema and a part of the value: a map or an array by
// identity, any other value (no parts) as one.
type costKey struct {
	s *jsonschema.Schema
	v uintptr
}

const costing = -1 // memo mark of a pair being counted

func (c *coster) cost(s *jsonschema.Schema, v any) int {
	var key costKey
	if c.memo != nil {
		key.s = s
		switch v.(type) {
		case map[string]any, []any:
			key.v = reflect.ValueOf(v).Pointer()
		}
		switch n, ok := c.memo[key]; {
		case ok && n == costing:
			return c.limit + 1 // a cycle through dynamic references
		case ok:
			return n
		}
		c.memo[key] = costing
	}
	n := c.count(s, v)
	if c.memo != nil {
		c.memo[key] = n
	}
	return n
}

// count is cost without the memo.
func (c *coster) count(s *jsonschema.Schema, v any) int {
	over := c.limit + 1
	if c.work++; c.work > c.maxWork {
		return over
	}
	n := 1
	// add adds what p costs on e, and reports whether the count is still
	// within the limit.
	add := func(p *jsonschema.Schema, e any) bool {
		if p != nil {
			n = min(n+c.cost(p, e), over)
		}
		return n < over
	}
	ok := forInPlace(s, func(p *jsonschema.Schema) bool { return add(p, v) })
	if ok && (s.DynamicRef != nil || s.RecursiveRef != nil) {
		if c.g == nil {
			c.g = newGraph(c.root)
			c.memo = map[costKey]int{}
		}
		most := 0
		for _, p := range c.g.dynamicTargets(s) {
			most = max(most, c.cost(p, v))
		}
		n = min(n+most, over)
		ok = n < over
	}
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if !ok {
				break
			}
			ok = s.PropertyNames == nil || add(s.PropertyNames, k) // boxing k allocates
			matched := s.Properties[k] != nil
			ok = ok && add(s.Properties[k], e)
			for re, p := range s.PatternProperties {
				if ok && re.MatchString(k) {
					matched = true
					ok = add(p, e)
				}
			}
			if ap, isSchema := s.AdditionalProperties.(*jsonschema.Schema); isSchema && !matched {
				ok = ok && add(ap, e)
			}
			ok = ok && add(s.UnevaluatedProperties, e)
		}
	case []any:
		for i, e := range v {
			if !ok {
				break
			}
			ok = add(s.Contains, e) && add(s.UnevaluatedItems, e)
			switch items := s.Items.(type) {
			case *jsonschema.Schema:
				ok = ok && add(items, e)
			case []*jsonschema.Schema:
				if i < len(items) {
					ok = ok && add(items[i], e)
				} else if ai, isSchema := s.AdditionalItems.(*jsonschema.Schema); isSchema {
					ok = ok && add(ai, e)
				}
			}
			if i < len(s.PrefixItems) {
				ok = ok && add(s.PrefixItems[i], e)
			} else {
				ok = ok && add(s.Items2020, e)
			}
		}
	}
	return n
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

// inPlace returns the schemas s applies to the very value it is given,
// counting a dynamic reference as one to each schema it may resolve to.
func (g *graph) inPlace(s *jsonschema.Schema) []*jsonschema.Schema {
	return append(staticInPlace(s), g.dynamicTargets(s)...)
}

// dynamicTargets returns the schemas a $dynamicRef (or $recursiveRef) of
// s may land on, besides the static target of $recursiveRef: its initial
// target, and every schema of the same dynamic anchor.
func (g *graph) dynamicTargets(s *jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
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
	var out []*jsonschema.Schema
	forInPlace(s, func(p *jsonschema.Schema) bool { out = append(out, p); return true })
	return out
}

// forInPlace calls fn with each schema of staticInPlace(s), in its order,
// until fn returns false; it reports whether none did.
func forInPlace(s *jsonschema.Schema, fn func(*jsonschema.Schema) bool) bool {
	for _, p := range [...]*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else} {
		if p != nil && !fn(p) {
			return false
		}
	}
	for _, ps := range [...][]*jsonschema.Schema{s.AllOf, s.AnyOf, s.OneOf} {
		for _, p := range ps {
			if !fn(p) {
				return false
			}
		}
	}
	if len(s.Dependencies) > 0 {
		for _, k := range sortedKeys(s.Dependencies) {
			if d, ok := s.Dependencies[k].(*jsonschema.Schema); ok && !fn(d) {
				return false
			}
		}
	}
	if len(s.DependentSchemas) > 0 {
		for _, k := range sortedKeys(s.DependentSchemas) {
			if !fn(s.DependentSchemas[k]) {
				return false
			}
		}
	}
	return true
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
