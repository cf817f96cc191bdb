package providersim

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// SimulatedPrefix starts every text the simulator makes up.
const SimulatedPrefix = "[simulated] "

// answer is what a chat request gets, before it is put on the wire.
type answer struct {
	content   string
	reasoning string
	toolCalls []ToolCall
	finish    string // OpenAI-style finish_reason, or Ollama done_reason
	usage     Usage
}

// compose builds the answer to r from rp (nil for the default answer).
func (s *Sim) compose(r *Request, rp *reply) *answer {
	a := &answer{}
	if rp != nil {
		a.reasoning = rp.reasoning
		a.toolCalls = rp.toolCalls
		a.finish = rp.finish
	}
	if rp == nil {
		// A request that must call a tool gets a call with arguments valid
		// against the tool's schema, so forced-tool flows (planning) can be
		// tried end to end on the simulator too.
		if call, ok := forcedToolCall(r); ok {
			a.toolCalls = []ToolCall{call}
		}
	}
	switch {
	case rp != nil && rp.text != nil:
		a.content = *rp.text
	case len(a.toolCalls) > 0:
	case r.JSONMode != "":
		a.content = defaultJSON(r)
	default:
		a.content = SimulatedPrefix + "reply from " + r.Model + " to: " + truncate(r.LastUserText(), 160)
	}
	if r.JSONMode != "" && len(a.toolCalls) == 0 && s.takeBlank() {
		a.content = ""
	}
	if a.reasoning == "" && r.Thinking {
		a.reasoning = SimulatedPrefix + "thinking about: " + truncate(r.LastUserText(), 80)
	}
	if a.finish == "" {
		a.finish = "stop"
		if len(a.toolCalls) > 0 && !r.Native {
			a.finish = "tool_calls"
		}
	}
	if rp != nil && rp.usage != nil {
		a.usage = *rp.usage
	} else {
		a.usage = Usage{
			PromptTokens:     countTokens(r.AllText()) + 8,
			CompletionTokens: countTokens(a.content) + countTokens(a.reasoning) + 4*len(a.toolCalls),
			ReasoningTokens:  countTokens(a.reasoning),
		}
	}
	return a
}

// defaultJSON is the made-up JSON answer: an instance of the request's
// schema when one travelled, else a small object.
func defaultJSON(r *Request) string {
	var v any
	if r.Schema != nil {
		v = Instance(r.Schema)
	} else {
		v = map[string]any{"simulated": true, "answer": SimulatedPrefix + truncate(r.LastUserText(), 80)}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// countTokens approximates a token count: about four bytes a token.
func countTokens(s string) int {
	if s == "" {
		return 0
	}
	return (len(s) + 3) / 4
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// split cuts s into pieces of at most n runes.
func split(s string, n int) []string {
	if s == "" {
		return nil
	}
	var out []string
	r := []rune(s)
	for len(r) > 0 {
		k := min(n, len(r))
		out = append(out, string(r[:k]))
		r = r[k:]
	}
	return out
}

// Instance returns a JSON value valid against schema (a decoded JSON Schema)
// for the keywords simulated answers need: type, enum, const, properties,
// required, items, min/max items and lengths, minimum/maximum, local $ref,
// anyOf/oneOf/allOf. Strings say they are simulated. The items of an array
// take successive enum values (item i the i-th, wrapping around), so a list
// whose items must name distinct allowed values gets them.
func Instance(schema map[string]any) any {
	return instance(schema, schema, "value", 0, 0)
}

// instance is Instance for the subschema s of root, named name; item is
// the index of the array item s is (part of), 0 outside arrays.
func instance(root, s map[string]any, name string, depth, item int) any {
	if depth > 16 || s == nil {
		return nil
	}
	if ref, ok := s["$ref"].(string); ok {
		if target := resolveRef(root, ref); target != nil {
			return instance(root, target, name, depth+1, item)
		}
	}
	if c, ok := s["const"]; ok {
		return c
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[item%len(e)]
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[key].([]any); ok && len(alts) > 0 {
			alt, _ := alts[0].(map[string]any)
			return instance(root, alt, name, depth+1, item)
		}
	}
	if all, ok := s["allOf"].([]any); ok && len(all) > 0 {
		merged := map[string]any{}
		for _, part := range all {
			p, _ := part.(map[string]any)
			for k, v := range p {
				if k == "properties" || k == "required" {
					continue
				}
				merged[k] = v
			}
		}
		props := map[string]any{}
		var req []any
		for _, part := range all {
			p, _ := part.(map[string]any)
			if pp, ok := p["properties"].(map[string]any); ok {
				for k, v := range pp {
					props[k] = v
				}
			}
			if rr, ok := p["required"].([]any); ok {
				req = append(req, rr...)
			}
		}
		if len(props) > 0 {
			merged["properties"] = props
			merged["type"] = "object"
		}
		if len(req) > 0 {
			merged["required"] = req
		}
		return instance(root, merged, name, depth+1, item)
	}
	typ := schemaType(s)
	switch typ {
	case "object":
		out := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		for k, v := range props {
			ps, _ := v.(map[string]any)
			out[k] = instance(root, ps, k, depth+1, item)
		}
		return out
	case "array":
		n := 1
		if mi, ok := s["minItems"].(float64); ok && int(mi) > n {
			n = int(mi)
		}
		if ma, ok := s["maxItems"].(float64); ok && int(ma) < n {
			n = int(ma)
		}
		items, _ := s["items"].(map[string]any)
		out := make([]any, 0, n)
		for i := 0; i < n; i++ {
			out = append(out, instance(root, items, name, depth+1, i))
		}
		return out
	case "integer", "number":
		v := 0.0
		if m, ok := s["minimum"].(float64); ok {
			v = m
		}
		if m, ok := s["exclusiveMinimum"].(float64); ok {
			v = m + 1
		}
		if m, ok := s["maximum"].(float64); ok && v > m {
			v = m
		}
		if typ == "integer" {
			return int64(v)
		}
		return v
	case "boolean":
		return false
	case "null":
		return nil
	default:
		str := SimulatedPrefix + name
		switch s["format"] {
		case "date-time":
			str = "2024-01-01T00:00:00Z"
		case "date":
			str = "2024-01-01"
		case "email":
			str = "simulated@example.com"
		case "uri":
			str = "https://example.com/simulated"
		case "uuid":
			str = "00000000-0000-4000-8000-000000000000"
		}
		if mx, ok := s["maxLength"].(float64); ok && utf8.RuneCountInString(str) > int(mx) {
			str = string([]rune(str)[:int(mx)])
		}
		if mn, ok := s["minLength"].(float64); ok {
			for utf8.RuneCountInString(str) < int(mn) {
				str += "~"
			}
		}
		return str
	}
}

func schemaType(s map[string]any) string {
	switch t := s["type"].(type) {
	case string:
		return t
	case []any:
		for _, v := range t {
			if str, ok := v.(string); ok && str != "null" {
				return str
			}
		}
		return "null"
	}
	if _, ok := s["properties"]; ok {
		return "object"
	}
	if _, ok := s["items"]; ok {
		return "array"
	}
	return "string"
}

func resolveRef(root map[string]any, ref string) map[string]any {
	path, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	var cur any = root
	for _, part := range strings.Split(path, "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	m, _ := cur.(map[string]any)
	return m
}

// forcedToolCall is the default call for a request whose tool_choice is
// "required" (the first tool) or names a function (that tool): its arguments
// are an instance of the tool's parameters schema.
func forcedToolCall(r *Request) (ToolCall, bool) {
	var name string
	switch tc := r.ToolChoice.(type) {
	case string:
		if tc != "required" || len(r.Tools) == 0 {
			return ToolCall{}, false
		}
		name = r.Tools[0]
	case map[string]any:
		fn, _ := tc["function"].(map[string]any)
		name, _ = fn["name"].(string)
	}
	if name == "" {
		return ToolCall{}, false
	}
	params := map[string]any{"type": "object"}
	tools, _ := r.Body["tools"].([]any)
	for _, tv := range tools {
		t, _ := tv.(map[string]any)
		fn, _ := t["function"].(map[string]any)
		if fn["name"] == name {
			if p, ok := fn["parameters"].(map[string]any); ok {
				params = p
			}
		}
	}
	args, err := json.Marshal(Instance(params))
	if err != nil {
		return ToolCall{}, false
	}
	return ToolCall{Name: name, Arguments: string(args)}, true
}
