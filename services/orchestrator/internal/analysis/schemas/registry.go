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
          "source": {"type": "string", "description": "Where the statement comes from: a tool name, the heading of its result, or a document_id in that result"}
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
// satisfy and the schema the model is asked to fill. It is immutable and
// safe for concurrent use.
//
// Whatever the caller's schema says, both declare the fields our code owns:
// data_sources and data_gaps at the top level, and supported and
// unsupported_reason beside every "source" property (see [FieldSupported]).
// The full schema requires data_sources and data_gaps; the model's schema
// requires none of them, and describes each as set by the service.
type Output struct {
	source *Compiled // the schema as registered or supplied
	full   *Compiled
	model  string
}

// NewOutput compiles an output schema. It must describe a JSON object
// ("type": "object"), since data_sources and data_gaps are merged into it.
func NewOutput(name string, text []byte) (*Output, error) {
	source, err := Compile(name, text)
	if err != nil {
		return nil, err
	}
	if !source.DescribesObject() {
		return nil, fmt.Errorf(`%w: %s: an output schema must have "type": "object"`, ErrInvalidSchema, name)
	}
	fullDoc, modelDoc := own(source.doc)
	fullText, err := json.Marshal(fullDoc)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidSchema, name, err)
	}
	full, err := Compile(name, fullText)
	if err != nil {
		return nil, err
	}
	model, err := json.Marshal(modelDoc)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidSchema, name, err)
	}
	return &Output{source: source, full: full, model: string(model)}, nil
}

// Name returns the schema name.
func (o *Output) Name() string { return o.full.Name() }

// Text returns the schema text as registered or supplied.
func (o *Output) Text() string { return o.source.Text() }

// FullText returns the schema every final answer satisfies: Text with the
// fields our code owns declared.
func (o *Output) FullText() string { return o.full.Text() }

// ModelSchema returns the schema the synthesis model is given.
func (o *Output) ModelSchema() string { return o.model }

// Validate checks a final answer against the full schema.
func (o *Output) Validate(v any) error { return o.full.Validate(v) }

// Merge sets data_sources and data_gaps in out, replacing whatever the model
// wrote there. Nil slices become empty arrays.
func (o *Output) Merge(out map[string]any, sources, gaps []string) {
	for field, vals := range map[string][]string{FieldDataSources: sources, FieldDataGaps: gaps} {
		arr := make([]any, 0, len(vals))
		for _, v := range vals {
			arr = append(arr, v)
		}
		out[field] = arr
	}
}
