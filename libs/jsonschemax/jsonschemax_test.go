package jsonschemax_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentmesh/agentmesh/libs/jsonschemax"
)

// base is where the test adds a schema, as the services do.
const base = "mem:///schemas/caller.json"

func compile(t *testing.T, text string) error {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	_, err = jsonschemax.Compile(jsonschemax.NewCompiler(), base, doc)
	return err
}

// TestCompileErrorsReadAsOneLine: a schema that breaks the draft's rules,
// or refers outside itself, is described in one line naming the place or
// the reference, without the library's resource names or Go vocabulary.
func TestCompileErrorsReadAsOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ schema, want string }{
		{`{"type":"wizard"}`, "not a valid JSON schema: at /type: "},
		{`{"properties":{"a":{"minimum":"five"}}}`, "not a valid JSON schema: at /properties/a/minimum: "},
		{`{"$ref":"http://169.254.169.254/latest"}`, `"http://169.254.169.254/latest" is outside the schema: a schema may refer only inside itself`},
		{`{"$ref":"file:///etc/passwd"}`, `"file:///etc/passwd" is outside the schema`},
		{`{"$schema":"file:///etc/passwd","type":"object"}`, `"file:///etc/passwd" is outside the schema`},
		{`{"$ref":"other.json"}`, `"other.json" is outside the schema`},
		{`{"$ref":"#/$defs/missing"}`, `json-pointer in "#/$defs/missing" not found`},
		{`{"$ref":"#foo"}`, `anchor in "#foo" not found`},
	} {
		err := compile(t, tc.schema)
		if err == nil {
			t.Fatalf("%s compiled", tc.schema)
		}
		got := err.Error()
		if !strings.HasPrefix(got, tc.want) || strings.Contains(got, "\n") || strings.Contains(got, "mem:") ||
			strings.Contains(got, "against metaschema") || strings.Contains(got, "URLLoader") {
			t.Errorf("%s: %q, want one line starting %q ", tc.schema, got, tc.want)
		}
	}
}

// TestReferenceCyclesAreRefusedAtCompile: a schema that applies itself to
// the same value again (the JSON Schema spec leaves its meaning undefined;
// the library fails every validation with it) is refused when it is
// compiled, naming where it turns back, through every keyword that keeps
// the value; recursion that descends into the value compiles.
func TestReferenceCyclesAreRefusedAtCompile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ schema, want string }{
		{`{"$ref":"#"}`, "# refers back to #"},
		{`{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, "#/$defs/a refers back to #/$defs/a"},
		{`{"definitions":{"a":{"$ref":"#/definitions/a"}},"$ref":"#/definitions/a"}`, "#/definitions/a refers back to #/definitions/a"},
		{`{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"anyOf":[{"type":"string"},{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"}`, "refers back to #/$defs/a"},
		{`{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"$defs":{"a":{"oneOf":[{"$ref":"#/$defs/a"}]}}}`, "refers back to #/$defs/a"},
		{`{"not":{"$ref":"#"}}`, "refers back to #"},
		{`{"if":{"$ref":"#"}}`, "refers back to #"},
		{`{"if":true,"then":{"$ref":"#"}}`, "refers back to #"},
		{`{"if":false,"else":{"$ref":"#"}}`, "refers back to #"},
		{`{"dependentSchemas":{"a":{"$ref":"#"}}}`, "refers back to #"},
		{`{"$schema":"http://json-schema.org/draft-07/schema#","dependencies":{"a":{"$ref":"#"}}}`, "refers back to #"},
		{`{"$dynamicAnchor":"n","allOf":[{"$dynamicRef":"#n"}]}`, "refers back to #"},
		{`{"$schema":"https://json-schema.org/draft/2019-09/schema","$recursiveAnchor":true,"anyOf":[{"$recursiveRef":"#"}]}`, "refers back to #"},
	} {
		err := compile(t, tc.schema)
		if err == nil {
			t.Errorf("%s compiled", tc.schema)
			continue
		}
		if got := err.Error(); !strings.Contains(got, tc.want) || !strings.Contains(got, "reference cycle") || strings.Contains(got, "mem:") {
			t.Errorf("%s: %q, want %q and the words reference cycle", tc.schema, got, tc.want)
		}
	}
	// Recursive data (a tree, a list) descends into the value each time.
	for _, schema := range []string{
		`{"$defs":{"node":{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#/$defs/node"}}}}},"$ref":"#/$defs/node"}`,
		`{"type":"object","properties":{"next":{"anyOf":[{"type":"null"},{"$ref":"#"}]}}}`,
		`{"$dynamicAnchor":"n","type":"object","additionalProperties":{"$dynamicRef":"#n"}}`,
		`{"$schema":"https://json-schema.org/draft/2019-09/schema","$recursiveAnchor":true,"type":"array","items":{"$recursiveRef":"#"}}`,
		`{"$defs":{"a":{"type":"string"}},"allOf":[{"$ref":"#/$defs/a"},{"$ref":"#/$defs/a"}],"not":{"$ref":"#/$defs/a"}}`,
		`{"$ref":"https://json-schema.org/draft/2020-12/schema"}`,
		`{"$ref":"http://json-schema.org/draft-07/schema#"}`,
		`{"patternProperties":{"^a":{"$ref":"#"}},"propertyNames":{"$ref":"#/$defs/s"},"$defs":{"s":{"type":"string"}}}`,
	} {
		if err := compile(t, schema); err != nil {
			t.Errorf("%s: %v", schema, err)
		}
	}
}

// fanout returns a schema whose root reaches a string schema along 2^depth
// paths (each level an allOf of two references to the level below).
func fanout(depth int) string {
	var b strings.Builder
	b.WriteString(`{"$defs":{"l0":{"type":"string"}`)
	for i := 1; i <= depth; i++ {
		fmt.Fprintf(&b, `,"l%d":{"allOf":[{"$ref":"#/$defs/l%d"},{"$ref":"#/$defs/l%d"}]}`, i, i-1, i-1)
	}
	fmt.Fprintf(&b, `},"$ref":"#/$defs/l%d"}`, depth)
	return b.String()
}

// TestManyPathsToOnePartAreRefusedAtCompile: the library applies a part
// once per path to it, so a 1.4 KB schema of 22 levels of allOf took 14 s
// of CPU to validate 42 (and nothing stops a validation). Past MaxInPlace
// applications to one value the schema is refused when compiled; a schema
// that applies a part a few times compiles.
func TestManyPathsToOnePartAreRefusedAtCompile(t *testing.T) {
	t.Parallel()
	for _, depth := range []int{10, 22, 60} {
		start := time.Now()
		err := compile(t, fanout(depth))
		if err == nil || !strings.Contains(err.Error(), "applies more than 1000 schemas to one value") || strings.Contains(err.Error(), "mem:") {
			t.Errorf("depth %d: %v", depth, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("depth %d: compiling took %v", depth, d)
		}
	}
	if err := compile(t, fanout(7)); err != nil { // 509 applications (each reference is one)
		t.Errorf("depth 7: %v", err)
	}
}

// TestValidateBoundsTheWorkByTheValue: parts that apply to the same part of
// the value along several paths multiply along the value's depth (each
// level here applies node twice to the next), which no bound on the
// schema alone catches. Validate refuses, without validating, a value that
// would take more than 10,000 + 16 per value of applications, and
// validates the rest as the library does.
func TestValidateBoundsTheWorkByTheValue(t *testing.T) {
	t.Parallel()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(`{"$defs":{"node":{"type":"object",
		"allOf":[{"properties":{"x":{"$ref":"#/$defs/node"}}},{"properties":{"x":{"$ref":"#/$defs/node"}}}]}},"$ref":"#/$defs/node"}`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := jsonschemax.Compile(jsonschemax.NewCompiler(), base, doc)
	if err != nil {
		t.Fatal(err)
	}
	nested := func(depth int) any {
		var v any = map[string]any{}
		for range depth {
			v = map[string]any{"x": v}
		}
		return v
	}
	if err := jsonschemax.Validate(s, nested(5)); err != nil {
		t.Errorf("depth 5: %v", err)
	}
	if err := jsonschemax.Validate(s, map[string]any{"x": "not an object"}); err == nil || errors.Is(err, jsonschemax.ErrTooCostly) {
		t.Errorf("an invalid value: %v", err)
	}
	start := time.Now()
	err = jsonschemax.Validate(s, nested(40)) // 2^40 applications
	if !errors.Is(err, jsonschemax.ErrTooCostly) {
		t.Errorf("depth 40: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("depth 40: refusing took %v", d)
	}
	// A schema that is itself a value, checked against the draft's
	// metaschema, 40 levels deep: each "#meta" $dynamicRef may land on
	// any of nine schemas; counted as the costliest, not as all nine
	// (which refused eight levels).
	meta, err := jsonschemax.Compile(jsonschemax.NewCompiler(), base, mustDoc(t, `{"$ref":"https://json-schema.org/draft/2020-12/schema"}`))
	if err != nil {
		t.Fatal(err)
	}
	deep := `{"type":"string"}`
	for range 40 {
		deep = `{"type":"object","properties":{"a":` + deep + `},"anyOf":[{"required":["a"]},{"type":"null"}]}`
	}
	if err := jsonschemax.Validate(meta, mustDoc(t, deep)); err != nil {
		t.Errorf("a 40-level schema against the metaschema: %v", err)
	}
	if err := jsonschemax.Validate(meta, mustDoc(t, `{"type":"object","properties":{"a":{"type":12}}}`)); err == nil || errors.Is(err, jsonschemax.ErrTooCostly) {
		t.Errorf("an invalid schema against the metaschema: %v", err)
	}
	// A large value of an ordinary schema is well within the bound.
	s2, err := jsonschemax.Compile(jsonschemax.NewCompiler(), base, mustDoc(t, `{"type":"array","items":{"type":"object",
		"properties":{"a":{"type":"string"},"b":{"anyOf":[{"type":"integer"},{"type":"null"}]}},"required":["a"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	var items []any
	for i := range 20_000 {
		items = append(items, map[string]any{"a": "x", "b": json.Number(strconv.Itoa(i))})
	}
	if err := jsonschemax.Validate(s2, items); err != nil {
		t.Errorf("20,000 items: %v", err)
	}
}

func mustDoc(t *testing.T, text string) any {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestNumbersTheLibraryCannotHoldAreRefused: the library turns numbers into
// exact fractions (big.Rat): 1e999999 took 18 ms, and 1e9999999, which
// big.Rat refuses, was a nil dereference: a panic in Validate (a value
// against "maximum") and in Compile (the schema checked against its
// metaschema). Both are refused, naming the place.
func TestNumbersTheLibraryCannotHoldAreRefused(t *testing.T) {
	t.Parallel()
	for _, schema := range []string{`{"multipleOf":1e-9999999}`, `{"maximum":1e9999999}`, `{"enum":[1, 1e999999]}`, `{"minimum":` + strings.Repeat("9", 1001) + `}`} {
		err := compile(t, schema)
		if err == nil || !strings.HasPrefix(err.Error(), "not a valid JSON schema: at /") || !strings.Contains(err.Error(), "cannot be checked") {
			t.Errorf("%s: %v", schema, err)
		}
	}
	s, err := jsonschemax.Compile(jsonschemax.NewCompiler(), base, mustDoc(t, `{"type":"object","properties":{"n":{"type":"array","items":{"type":"number","maximum":5,"multipleOf":0.5}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, value := range []string{`{"n":[1e9999999]}`, `{"n":[1, -1.5e-9999999]}`, `{"n":[1e1001]}`, `{"n":[` + strings.Repeat("1", 1001) + `]}`} {
		err := jsonschemax.Validate(s, mustDoc(t, value))
		if err == nil || !strings.HasPrefix(err.Error(), "at /n/") || !strings.Contains(err.Error(), "cannot be checked") {
			t.Errorf("%s: %v", value, err)
		}
	}
	for value, valid := range map[string]bool{`{"n":[-1e2, 4.5, 0.5e1, 1e-0]}`: true, `{"n":[1e300]}`: false, `{"n":[2.25]}`: false} {
		if err := jsonschemax.Validate(s, mustDoc(t, value)); (err == nil) != valid {
			t.Errorf("%s: %v", value, err)
		}
	}
}

// TestLargeSchemasAreRefusedBeforeCompiling: a schema of more than
// MaxSchemaValues JSON values is refused at once, saying how many it
// holds; one at the bound compiles within a second (the library's compile
// time grows with the square of the schema's parts: 60,000 properties
// took 32 s, with nothing to stop it).
func TestLargeSchemasAreRefusedBeforeCompiling(t *testing.T) {
	t.Parallel()
	props := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"type":"object","properties":{`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"p%d":{"type":"string"}`, i)
		}
		b.WriteString(`}}`)
		return b.String()
	}
	// 3 + 2 values a property.
	atBound := (jsonschemax.MaxSchemaValues - 3) / 2
	start := time.Now()
	if err := compile(t, props(atBound)); err != nil {
		t.Fatalf("%d properties: %v", atBound, err)
	}
	took := time.Since(start)
	t.Logf("%d properties (%d JSON values) compiled in %v", atBound, 3+2*atBound, took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("a schema at the bound took %v to compile", took)
	}
	start = time.Now()
	err := compile(t, props(60000))
	if want := fmt.Sprintf("the schema holds 120003 JSON values; at most %d are taken", jsonschemax.MaxSchemaValues); err == nil || err.Error() != want {
		t.Fatalf("60,000 properties: %v, want %q", err, want)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("refusing 60,000 properties took %v", took)
	}
}
