package jsonschemax_test

import (
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentmesh/agentmesh/libs/jsonschemax"
)

// FuzzCompileValidate feeds caller-written schemas and values (response
// formats, tool parameters, and the values models send against them)
// through Compile and Validate: neither may panic, and each answers
// quickly, whatever the schema's references and the value's nesting.
func FuzzCompileValidate(f *testing.F) {
	for _, seed := range [][2]string{
		{`{"type":"object","properties":{"status":{"enum":["RESOLVED","UNRESOLVED"]}},"required":["status"]}`, `{"status":"RESOLVED"}`},
		{`{"$ref":"#/definitions/a","definitions":{"a":{"$ref":"#/definitions/a"}}}`, `1`},
		{`{"$defs":{"n":{"type":"object","properties":{"c":{"$ref":"#/$defs/n"},"d":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`, `{"c":{"d":{"c":{}}}}`},
		{`{"allOf":[{"$ref":"#/$defs/a"},{"$ref":"#/$defs/a"}],"$defs":{"a":{"anyOf":[{"minimum":1},{"multipleOf":0.5}]}}}`, `[1,2.5,{"x":null}]`},
		{`{"$schema":"https://json-schema.org/draft/2020-12/schema","$dynamicAnchor":"m","items":{"$dynamicRef":"#m"}}`, `[[[]]]`},
		{`{"multipleOf":1e-300,"maximum":1e300}`, `1e299`},
		{`{"pattern":"^(a+)+$","type":"string"}`, `"aaaaaaaaaaaaaaaaaaaaaaaa!"`},
		{`{"dependentSchemas":{"a":{"required":["b"]}},"if":{"required":["a"]},"then":{"not":{}}}`, `{"a":1}`},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, schema, value string) {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
		if err != nil {
			return
		}
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(value))
		if err != nil {
			return
		}
		start := time.Now()
		s, err := jsonschemax.Compile(jsonschemax.NewCompiler(), "mem://fuzz/schema.json", doc)
		if err == nil {
			_ = jsonschemax.Validate(s, v)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("schema %q, value %q: %v to compile and validate", schema, value, d)
		}
	})
}
