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
