// Package structured checks model answers against the caller's JSON schema
// and writes the prompts that ask for JSON where a provider has no native
// schema mode, and for a repair when an answer did not validate.
package structured

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentmesh/agentmesh/libs/jsonschemax"
	"github.com/agentmesh/agentmesh/libs/lru"
	"github.com/agentmesh/agentmesh/libs/utf8x"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
)

// Schema is a compiled JSON schema. Safe for concurrent use.
type Schema struct {
	name   string
	schema *jsonschema.Schema
}

// compiled keeps the schemas Compile made, by name and text: an agent
// sends the same response schema with every request of its kind, and
// compiling it cost the model gateway more CPU than the rest of serving a
// synthesis request (3% of a loaded mesh's CPU). A Schema is immutable, so
// callers share it. A compiled schema can take far more memory than its
// text (a subschema is a struct of some 75 fields; a pattern's repeats
// expand), so the cache holds few, and only small ones: what it pins is
// at most compiledCacheEntries times what one request could allocate
// while it is served.
var compiled = struct {
	sync.Mutex
	cache *lru.Cache[*Schema]
}{cache: lru.New[*Schema](compiledCacheEntries)}

// The compile cache's bounds: the schemas it keeps (each costs 1), and
// the longest text of a schema it keeps (longer ones are compiled for
// each request, as before).
const (
	compiledCacheEntries = 64
	compiledCacheMaxText = 16 << 10
)

// Compile compiles raw (JSON schema text; drafts 4 to 2020-12, default
// 2020-12). name labels the schema in messages. A small schema compiled
// before under the same name is returned again.
func Compile(name string, raw []byte) (*Schema, error) {
	if len(raw) > compiledCacheMaxText {
		return compile(name, raw)
	}
	key := name + "\x00" + string(raw)
	compiled.Lock()
	s, ok := compiled.cache.Get(key)
	compiled.Unlock()
	if ok {
		return s, nil
	}
	s, err := compile(name, raw)
	if err != nil {
		return nil, err
	}
	compiled.Lock()
	compiled.cache.Put(key, s, 1)
	compiled.Unlock()
	return s, nil
}

// Check reports why raw does not compile, as Compile would, without
// keeping the compiled schema: for callers that only validate a schema
// (the OpenAI-compatible API's tool parameters, which it remembers by
// hash itself), so that those do not take the response schemas' places.
func Check(name string, raw []byte) error {
	_, err := compile(name, raw)
	return err
}

// compile compiles raw, a schema named name ("response" if none).
func compile(name string, raw []byte) (*Schema, error) {
	if name == "" {
		name = "response"
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("schema is not valid JSON: %w", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		if _, isBool := doc.(bool); !isBool {
			return nil, errors.New("schema must be a JSON object")
		}
	}
	// A caller's schema is resolved in memory only: the default loader
	// reads file:// references from this server's disk (its errors quote
	// what it read) and would block on a FIFO or a device.
	c := jsonschemax.NewCompiler()
	c.AssertFormat()
	sch, err := jsonschemax.Compile(c, "mem://response-schema.json", doc)
	if err != nil {
		return nil, fmt.Errorf("schema does not compile: %w", err)
	}
	return &Schema{name: name, schema: sch}, nil
}

// Name returns the schema's label.
func (s *Schema) Name() string { return s.name }

// Violation is one place where an answer breaks the schema.
type Violation struct {
	// Path is the JSON pointer of the offending value ("" for the root).
	Path string
	// Message says what is wrong.
	Message string
}

// ValidationError lists why an answer does not satisfy the schema: it is not
// JSON at all (NotJSON), or these Violations.
type ValidationError struct {
	NotJSON    string
	Violations []Violation
}

func (e *ValidationError) Error() string {
	if e.NotJSON != "" {
		return "the answer is not valid JSON: " + e.NotJSON
	}
	parts := make([]string, 0, min(len(e.Violations), maxViolationsShown)+1)
	for _, v := range e.Violations[:min(len(e.Violations), maxViolationsShown)] {
		path := v.Path
		if path == "" {
			path = "/"
		}
		parts = append(parts, utf8x.Prefix(fmt.Sprintf("at %s: %s", path, v.Message), maxViolationBytes))
	}
	if more := len(e.Violations) - maxViolationsShown; more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", more))
	}
	return "the answer does not match the schema: " + strings.Join(parts, "; ")
}

// The violations an error message lists, and the bytes of each: an
// answer to a schema of 10,000 properties made a message of 618 KB,
// which went on into error events and job errors.
const (
	maxViolationsShown = 20
	maxViolationBytes  = 1 << 10
)

// Validate checks content (model output) against the schema. It returns nil
// or a *ValidationError.
func (s *Schema) Validate(content string) error {
	inst, err := parse(content)
	if err != nil {
		return err
	}
	err = jsonschemax.Validate(s.schema, inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &ValidationError{Violations: []Violation{{Message: err.Error()}}}
	}
	out := ve.BasicOutput()
	var vs []Violation
	seen := map[Violation]bool{}
	for _, u := range out.Errors {
		if u.Error == nil {
			continue
		}
		v := Violation{Path: u.InstanceLocation, Message: u.Error.String()}
		// The basic output repeats parents ("validation failed", "properties
		// ... do not match"); keep leaves only.
		if strings.HasPrefix(v.Message, "validation failed") || seen[v] {
			continue
		}
		seen[v] = true
		vs = append(vs, v)
	}
	if len(vs) == 0 {
		vs = []Violation{{Message: ve.Error()}}
	}
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].Path < vs[j].Path })
	return &ValidationError{Violations: vs}
}

// ValidateObject checks that content is a JSON object (JSON-object mode).
func ValidateObject(content string) error {
	inst, err := parse(content)
	if err != nil {
		return err
	}
	if _, ok := inst.(map[string]any); !ok {
		return &ValidationError{Violations: []Violation{{Message: "the answer must be a JSON object"}}}
	}
	return nil
}

func parse(content string) (any, error) {
	text := Extract(content)
	if text == "" {
		return nil, &ValidationError{NotJSON: "the answer is empty"}
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, &ValidationError{NotJSON: err.Error()}
	}
	return inst, nil
}

// Extract returns the JSON text of an answer: trimmed, and unwrapped from a
// Markdown code fence if the model added one.
func Extract(content string) string {
	s := strings.TrimSpace(content)
	if rest, ok := strings.CutPrefix(s, "```"); ok {
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			rest = rest[nl+1:]
		}
		if end := strings.LastIndex(rest, "```"); end >= 0 {
			rest = rest[:end]
		}
		s = strings.TrimSpace(rest)
	}
	return s
}

// IsBlank reports whether content holds no answer at all (DeepSeek's JSON
// mode sometimes returns empty content with finish_reason "stop").
func IsBlank(content string) bool { return strings.TrimSpace(content) == "" }

// Instruction is the system prompt that asks for JSON on providers without a
// native schema mode. It always contains the word "json" (DeepSeek rejects
// JSON mode otherwise).
func Instruction(f llm.ResponseFormat) string {
	if f.Type == llm.FormatJSONSchema && len(f.Schema) > 0 {
		var compact bytes.Buffer
		schema := f.Schema
		if json.Compact(&compact, f.Schema) == nil {
			schema = compact.Bytes()
		}
		name := f.Name
		if name == "" {
			name = "response"
		}
		return "Answer with one JSON object only, no prose and no code fences. " +
			"It must be valid against this JSON schema (" + name + "):\n" + string(schema)
	}
	return "Answer with one JSON object only, no prose and no code fences."
}

// RepairPrompt is the user message that shows the model why its previous
// answer was rejected and asks for a corrected one.
func RepairPrompt(f llm.ResponseFormat, verr error) string {
	var b strings.Builder
	b.WriteString("Your previous answer was rejected: ")
	b.WriteString(verr.Error())
	b.WriteString(".\nReply again with only the corrected JSON")
	if f.Type == llm.FormatJSONSchema && len(f.Schema) > 0 {
		b.WriteString(", valid against this JSON schema:\n")
		var compact bytes.Buffer
		if json.Compact(&compact, f.Schema) == nil {
			b.Write(compact.Bytes())
		} else {
			b.Write(f.Schema)
		}
	} else {
		b.WriteString(" object.")
	}
	return b.String()
}
