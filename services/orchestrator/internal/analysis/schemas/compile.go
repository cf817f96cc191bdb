// Package schemas holds JSON schemas for analyses: compiling a schema
// without ever loading anything from a file or the network, validating JSON
// against it with readable explanations, and the registry of output schemas
// the synthesis step is constrained by (stock_analysis, generic_analysis,
// and caller-supplied ones).
package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentmesh/agentmesh/libs/jsonschemax"
)

// MaxSchemaBytes bounds the text of a caller-supplied schema.
const MaxSchemaBytes = 64 << 10

// ErrInvalidSchema means a schema text is not a usable JSON schema.
var ErrInvalidSchema = errors.New("invalid JSON schema")

// Compiled is a compiled JSON schema with its source text. It is immutable
// and safe for concurrent use.
type Compiled struct {
	name   string
	text   string
	doc    map[string]any // the decoded schema (never mutated)
	schema *jsonschema.Schema
}

// Compile compiles text as a JSON schema named name (used in errors). Draft
// 2020-12 applies when the schema names none; "format" is asserted. $ref
// may only point inside the schema: file and network references fail with
// [ErrInvalidSchema], so a caller-supplied schema cannot read local files.
func Compile(name string, text []byte) (*Compiled, error) {
	if len(bytes.TrimSpace(text)) == 0 {
		return nil, fmt.Errorf("%w: %s: empty", ErrInvalidSchema, name)
	}
	if len(text) > MaxSchemaBytes {
		return nil, fmt.Errorf("%w: %s: larger than %d bytes", ErrInvalidSchema, name, MaxSchemaBytes)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidSchema, name, err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s: a schema must be a JSON object", ErrInvalidSchema, name)
	}
	c := jsonschemax.NewCompiler() // no file://, no http://
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	sch, err := jsonschemax.Compile(c, "mem:///"+name+".json", doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidSchema, name, err)
	}
	return &Compiled{name: name, text: string(text), doc: obj, schema: sch}, nil
}

// Name returns the schema's name.
func (c *Compiled) Name() string { return c.name }

// Text returns the schema's source text.
func (c *Compiled) Text() string { return c.text }

// DescribesObject reports whether the schema's top level says "type": "object".
func (c *Compiled) DescribesObject() bool { return c.doc["type"] == "object" }

// ValidateJSON validates one JSON value held in data. It returns an
// [*InvalidError] listing every problem, or an error if data is not JSON.
func (c *Compiled) ValidateJSON(data []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not valid JSON: %w", err)
	}
	return c.validate(inst)
}

// Validate validates v, a value as encoding/json decodes it (maps, slices,
// strings, float64 or json.Number, bools, nil). It round-trips v through
// JSON so numbers compare exactly.
func (c *Compiled) Validate(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode value: %w", err)
	}
	return c.ValidateJSON(data)
}

func (c *Compiled) validate(inst any) error {
	err := jsonschemax.Validate(c.schema, inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	return &InvalidError{Schema: c.name, Problems: jsonschemax.Leaves(ve)}
}

// InvalidError says why a value does not satisfy a schema.
type InvalidError struct {
	// Schema is the schema's name.
	Schema string
	// Problems holds one "at <JSON pointer>: <reason>" per violation.
	Problems []string
}

func (e *InvalidError) Error() string {
	return "does not match schema " + e.Schema + ": " + strings.Join(e.Problems, "; ")
}
