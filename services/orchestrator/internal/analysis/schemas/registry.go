package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Names of the built-in output schemas.
const (
	// StockAnalysis is the output of an analysis of one listed company.
	StockAnalysis = "stock_analysis"
	// GenericAnalysis is the default output: a summary and findings.
	GenericAnalysis = "generic_analysis"
	// Custom names a caller-supplied schema.
	Custom = "custom"
)

// Fields our code, never the model, fills in (see [Output.Merge]).
const (
	// FieldDataSources lists the tools that returned data.
	FieldDataSources = "data_sources"
	// FieldDataGaps lists what could not be retrieved and why.
	FieldDataGaps = "data_gaps"
)

// ErrUnknownSchema means no output schema has the name.
var ErrUnknownSchema = errors.New("unknown output schema")

// stockAnalysisSchema is the stock analysis shape. current_price and
// metrics may be null: when the tools could not provide them, the honest
// answer is null plus an entry in data_gaps.
const stockAnalysisSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "stock_analysis",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "ticker": {"type": "string", "minLength": 1, "description": "Exchange ticker symbol, e.g. BHP"},
    "summary": {"type": "string", "maxLength": 500, "description": "Analysis built only from the tool results"},
    "current_price": {
      "type": ["object", "null"],
      "additionalProperties": false,
      "properties": {
        "value": {"type": "number"},
        "currency": {"type": "string", "minLength": 3, "maxLength": 3},
        "as_of": {"type": "string", "format": "date-time"}
      },
      "required": ["value", "currency", "as_of"]
    },
    "metrics": {
      "type": ["object", "null"],
      "additionalProperties": false,
      "properties": {
        "pe_ratio": {"type": ["number", "null"]},
        "market_cap": {"type": ["number", "null"]},
        "dividend_yield": {"type": ["number", "null"]}
      }
    },
    "data_sources": {"type": "array", "items": {"type": "string"}, "description": "Tools that provided data"},
    "data_gaps": {"type": "array", "items": {"type": "string"}, "description": "Data that could not be retrieved"}
  },
  "required": ["ticker", "summary", "current_price", "metrics", "data_sources", "data_gaps"]
}`

// genericAnalysisSchema answers any question from tool results.
const genericAnalysisSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "generic_analysis",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "summary": {"type": "string", "maxLength": 2000, "description": "Answer built only from the tool results"},
    "findings": {
      "type": "array",
      "items": {
        "type": "object",
        "additionalProperties": false,
        "properties": {
          "statement": {"type": "string"},
          "source": {"type": "string", "description": "Tool the statement comes from"}
        },
        "required": ["statement", "source"]
      }
    },
    "data_sources": {"type": "array", "items": {"type": "string"}},
    "data_gaps": {"type": "array", "items": {"type": "string"}}
  },
  "required": ["summary", "findings", "data_sources", "data_gaps"]
}`

// Registry maps output schema names to compiled schemas. It is safe for
// concurrent use.
type Registry struct {
	mu      sync.RWMutex
	schemas map[string]*Output // guarded by mu
}

// NewRegistry returns a registry holding stock_analysis and
// generic_analysis.
func NewRegistry() *Registry {
	r := &Registry{schemas: map[string]*Output{}}
	for name, text := range map[string]string{StockAnalysis: stockAnalysisSchema, GenericAnalysis: genericAnalysisSchema} {
		if err := r.Register(name, []byte(text)); err != nil {
			panic(fmt.Sprintf("schemas: built-in %s: %v", name, err)) // a defect in this file
		}
	}
	return r
}

// Register adds or replaces the output schema name. The schema must
// describe an object (see [NewOutput]).
func (r *Registry) Register(name string, text []byte) error {
	o, err := NewOutput(name, text)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.schemas[name] = o
	return nil
}

// Get returns the output schema name, or [ErrUnknownSchema].
func (r *Registry) Get(name string) (*Output, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	o, ok := r.schemas[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownSchema, name)
	}
	return o, nil
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.schemas))
	for n := range r.schemas {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Resolve picks the schema of an analysis: a caller-supplied schema text
// wins (compiled as [Custom]); otherwise the registered name, by default
// [GenericAnalysis].
func (r *Registry) Resolve(name string, custom string) (*Output, error) {
	if custom != "" {
		return NewOutput(Custom, []byte(custom))
	}
	if name == "" {
		name = GenericAnalysis
	}
	return r.Get(name)
}

// Output is an output schema: the full schema the final answer must
// satisfy, and the reduced schema the model is asked to fill (without the
// fields our code computes). It is immutable and safe for concurrent use.
type Output struct {
	full  *Compiled
	model string
	// declares records which computed fields the schema declares.
	declares map[string]bool
	// closed is true when additionalProperties is false at the top level.
	closed bool
}

// NewOutput compiles an output schema. It must describe a JSON object
// ("type": "object"), since data_sources and data_gaps are merged into it.
func NewOutput(name string, text []byte) (*Output, error) {
	full, err := Compile(name, text)
	if err != nil {
		return nil, err
	}
	if !full.DescribesObject() {
		return nil, fmt.Errorf(`%w: %s: an output schema must have "type": "object"`, ErrInvalidSchema, name)
	}
	o := &Output{full: full, declares: map[string]bool{}}
	if ap, ok := full.doc["additionalProperties"].(bool); ok && !ap {
		o.closed = true
	}
	props, _ := full.doc["properties"].(map[string]any)
	for _, f := range []string{FieldDataSources, FieldDataGaps} {
		_, o.declares[f] = props[f]
	}
	model, err := modelSchema(full.doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidSchema, name, err)
	}
	o.model = model
	return o, nil
}

// Name returns the schema name.
func (o *Output) Name() string { return o.full.Name() }

// Text returns the full schema text.
func (o *Output) Text() string { return o.full.Text() }

// ModelSchema returns the schema the synthesis model is given: the full
// schema without data_sources and data_gaps, which our code fills in.
func (o *Output) ModelSchema() string { return o.model }

// Validate checks a final answer against the full schema.
func (o *Output) Validate(v any) error { return o.full.Validate(v) }

// Merge sets data_sources and data_gaps in out, replacing whatever the model
// wrote there, unless the schema forbids the field (it is closed with
// additionalProperties false and does not declare it); then the field is
// removed. Nil slices become empty arrays.
func (o *Output) Merge(out map[string]any, sources, gaps []string) {
	for field, vals := range map[string][]string{FieldDataSources: sources, FieldDataGaps: gaps} {
		if o.closed && !o.declares[field] {
			delete(out, field)
			continue
		}
		arr := make([]any, 0, len(vals))
		for _, v := range vals {
			arr = append(arr, v)
		}
		out[field] = arr
	}
}

// modelSchema removes the computed fields from a schema's properties and
// required list, returning the schema text. doc is not modified.
func modelSchema(doc map[string]any) (string, error) {
	cp := make(map[string]any, len(doc))
	for k, v := range doc {
		cp[k] = v
	}
	if props, ok := doc["properties"].(map[string]any); ok {
		np := make(map[string]any, len(props))
		for k, v := range props {
			if k == FieldDataSources || k == FieldDataGaps {
				continue
			}
			np[k] = v
		}
		cp["properties"] = np
	}
	if req, ok := doc["required"].([]any); ok {
		nr := make([]any, 0, len(req))
		for _, v := range req {
			if v == FieldDataSources || v == FieldDataGaps {
				continue
			}
			nr = append(nr, v)
		}
		cp["required"] = nr
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return "", err
	}
	return string(b), nil
}
