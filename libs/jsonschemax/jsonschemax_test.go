package jsonschemax_test

import (
	"strings"
	"testing"

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
