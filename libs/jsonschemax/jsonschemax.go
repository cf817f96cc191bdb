// Package jsonschemax compiles callers' schemas with
// github.com/santhosh-tekuri/jsonschema/v6 without loading anything, and
// renders the library's errors for the callers who wrote the schema or the
// value: one line each, without the library's internal resource names
// ("mem://…"), its metaschema's URL or its loader's Go vocabulary.
package jsonschemax

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// printer renders the library's messages; safe for concurrent use.
var printer = message.NewPrinter(language.English)

const insideOnly = "a schema may refer only inside itself (#/$defs/…) or to a standard draft's metaschema"

// NewCompiler returns a compiler that loads nothing: a caller's schema may
// refer only inside itself or to a standard draft's metaschema (built in),
// so it cannot make a service read its files (or block on a FIFO) or reach
// the network.
func NewCompiler() *jsonschema.Compiler {
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no scheme has a loader
	return c
}

// Compile adds doc (as jsonschema.UnmarshalJSON decodes it) to c under url
// and compiles it. Its error says what is wrong as compileError does, in
// the caller's terms.
func Compile(c *jsonschema.Compiler, url string, doc any) (*jsonschema.Schema, error) {
	if err := c.AddResource(url, doc); err != nil {
		return nil, errors.New(describe(url, err))
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, errors.New(describe(url, err))
	}
	if from, to := refCycle(s); to != nil {
		return nil, fmt.Errorf("not a valid JSON schema: %s refers back to %s without descending into the value (a reference cycle: validating any value would never end)",
			relative(url, from.Location), relative(url, to.Location))
	}
	return s, nil
}

// refCycle finds a reference cycle in s: schemas that apply to the value
// they are given (through $ref, $recursiveRef, $dynamicRef, allOf, anyOf,
// oneOf, not, if/then/else, dependencies or dependentSchemas) and lead back
// to themselves without applying to a part of it. The library compiles
// such a schema and fails every validation with it ("causing reference
// cycle"), so a caller learnt of it only after the work it was for. It
// returns the schema that refers back and the one it refers to, or nils.
// A $dynamicRef (or $recursiveRef) may land on any schema of the same
// dynamic anchor, so it counts as a reference to each of them.
func refCycle(root *jsonschema.Schema) (from, to *jsonschema.Schema) {
	// Every schema root reaches, in a stable order (for the message).
	var all []*jsonschema.Schema
	seen := map[*jsonschema.Schema]bool{}
	add := func(ss ...*jsonschema.Schema) {
		for _, s := range ss {
			if s != nil && !seen[s] {
				seen[s] = true
				all = append(all, s)
			}
		}
	}
	add(root)
	for i := 0; i < len(all); i++ {
		add(inPlace(all[i], nil, nil)...)
		add(descending(all[i])...)
	}
	dynamic := map[string][]*jsonschema.Schema{}
	var recursive []*jsonschema.Schema
	for _, s := range all {
		if s.DynamicAnchor != "" {
			dynamic[s.DynamicAnchor] = append(dynamic[s.DynamicAnchor], s)
		}
		if s.RecursiveAnchor {
			recursive = append(recursive, s)
		}
	}
	// Depth-first over the in-place references only: a schema met again
	// while still on the path closes a cycle.
	const (
		onPath = 1
		done   = 2
	)
	state := map[*jsonschema.Schema]int{}
	var visit func(*jsonschema.Schema) bool
	visit = func(s *jsonschema.Schema) bool {
		state[s] = onPath
		for _, next := range inPlace(s, dynamic, recursive) {
			switch state[next] {
			case onPath:
				from, to = s, next
				return true
			case 0:
				if visit(next) {
					return true
				}
			}
		}
		state[s] = done
		return false
	}
	for _, s := range all {
		if state[s] == 0 && visit(s) {
			return from, to
		}
	}
	return nil, nil
}

// inPlace returns the schemas s applies to the very value it is given.
// With dynamic and recursive (the schemas of each $dynamicAnchor, and
// those with $recursiveAnchor), a dynamic reference also counts as one to
// every schema it may resolve to.
func inPlace(s *jsonschema.Schema, dynamic map[string][]*jsonschema.Schema, recursive []*jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Ref, s.Not, s.If, s.Then, s.Else}
	out = append(out, s.AllOf...)
	out = append(out, s.AnyOf...)
	out = append(out, s.OneOf...)
	if r := s.RecursiveRef; r != nil {
		out = append(out, r)
		if r.RecursiveAnchor {
			out = append(out, recursive...)
		}
	}
	if d := s.DynamicRef; d != nil {
		out = append(out, d.Ref)
		if d.Anchor != "" && d.Ref != nil && d.Ref.DynamicAnchor == d.Anchor {
			out = append(out, dynamic[d.Anchor]...)
		}
	}
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

// describe describes err, from compiling a caller's schema:
//   - a schema that breaks its draft's rules: "not a valid JSON schema:
//     at /properties/x/type: value must be one of ..." (every problem);
//   - a $ref or $schema the compiler may not follow (the services load
//     nothing from files or the network): ""http://…" is outside the
//     schema: a schema may refer only inside itself (#/$defs/…) or to a
//     standard draft's metaschema";
//   - anything else as the library says it.
//
// base is the URL the schema was added to the compiler under: it and its
// directory are left out of the description, so references read as the
// caller wrote them ("#/$defs/missing", "other.json").
func describe(base string, err error) string {
	return relative(base, compileError(err))
}

// relative removes base, and the directory it names the schema in, from
// msg.
func relative(base, msg string) string {
	dir := base[:strings.LastIndex(base, "/")+1]
	return strings.NewReplacer(base+"/", "", base, "", dir, "").Replace(msg)
}

func compileError(err error) string {
	var sve *jsonschema.SchemaValidationError
	if errors.As(err, &sve) {
		var ve *jsonschema.ValidationError
		if errors.As(sve.Err, &ve) {
			return "not a valid JSON schema: " + strings.Join(Leaves(ve), "; ")
		}
		return "not a valid JSON schema: " + sve.Err.Error()
	}
	var le *jsonschema.LoadURLError
	if errors.As(err, &le) {
		return fmt.Sprintf("%q is outside the schema: %s", le.URL, insideOnly)
	}
	var ue *jsonschema.UnsupportedURLSchemeError
	if errors.As(err, &ue) {
		return "a reference is outside the schema: " + insideOnly
	}
	return err.Error()
}

// Leaves renders each innermost cause of ve as "at <JSON pointer of the
// value>: <what is wrong>", in the library's order.
func Leaves(ve *jsonschema.ValidationError) []string {
	var out []string
	var walk func(*jsonschema.ValidationError)
	walk = func(ve *jsonschema.ValidationError) {
		if len(ve.Causes) == 0 {
			out = append(out, fmt.Sprintf("at /%s: %s", strings.Join(ve.InstanceLocation, "/"), ve.ErrorKind.LocalizedString(printer)))
			return
		}
		for _, c := range ve.Causes {
			walk(c)
		}
	}
	walk(ve)
	return out
}
