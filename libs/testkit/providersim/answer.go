package providersim

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
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

// compose builds the answer to r from rp (nil for the default answer). It
// fails when the default answer would be an instance of a schema larger
// than MaxInstanceBytes; the caller answers 400.
func (s *Sim) compose(r *Request, rp *reply) (*answer, error) {
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
		call, ok, err := forcedToolCall(r)
		if err != nil {
			return nil, err
		}
		if ok {
			a.toolCalls = []ToolCall{call}
		}
	}
	switch {
	case rp != nil && rp.text != nil:
		a.content = *rp.text
	case len(a.toolCalls) > 0:
	case r.JSONMode != "":
		content, err := defaultJSON(r)
		if err != nil {
			return nil, err
		}
		a.content = content
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
	return a, nil
}

// defaultJSON is the made-up JSON answer: an instance of the request's
// schema when one travelled, else a small object.
func defaultJSON(r *Request) (string, error) {
	var v any
	if r.Schema != nil {
		inst, err := Instance(r.Schema)
		if err != nil {
			return "", fmt.Errorf("response format: %w", err)
		}
		v = inst
	} else {
		v = map[string]any{"simulated": true, "answer": SimulatedPrefix + truncate(r.LastUserText(), 80)}
	}
	b, _ := json.Marshal(v)
	return string(b), nil
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

// MaxInstanceBytes caps the JSON value the simulator generates from a
// schema: about 1 MiB once encoded. A schema whose instance would be larger
// (a minLength or minItems above it, or nesting and $refs that multiply
// smaller ones) gets a 400 invalid_request_error instead of an answer, the
// way other impossible requests do: no test needs megabytes of filler, and
// building it would hold a core and memory long after the client left. The
// bookkeeping a schema causes (resolving $ref paths, merging allOf parts)
// counts towards the same budget, so building an instance is linear in it.
const MaxInstanceBytes = 1 << 20

// Instance returns a JSON value valid against schema (a decoded JSON Schema)
// for the keywords simulated answers need: type, enum, const, properties,
// required, items, min/max items and lengths, minimum/maximum, local $ref,
// anyOf/oneOf/allOf. Strings say they are simulated. The items of an array
// take successive enum values (item i the i-th, wrapping around), so a list
// whose items must name distinct allowed values gets them. It fails, without
// building it, when the value would exceed MaxInstanceBytes.
func Instance(schema map[string]any) (any, error) {
	b := &instanceBuilder{root: schema, left: MaxInstanceBytes}
	return b.instance(schema, "value", 0, 0)
}

// instanceBuilder builds an instance of root within a budget of left
// (about bytes of encoded JSON).
type instanceBuilder struct {
	root map[string]any
	left int
}

// spend takes n from the budget; it fails once the budget is exhausted.
func (b *instanceBuilder) spend(n int, name string) error {
	b.left -= n
	if b.left < 0 {
		return b.tooLarge(name, "", 0)
	}
	return nil
}

// tooLarge is the error for an instance that does not fit the budget at
// name: keyword (minLength, minItems) asking for n when that alone is over
// MaxInstanceBytes, else the answer as a whole.
func (b *instanceBuilder) tooLarge(name, keyword string, n float64) error {
	if keyword != "" && n > MaxInstanceBytes {
		return fmt.Errorf("invalid schema: %s %.0f at %q is more than the simulator's limit of %d bytes for an answer",
			keyword, n, name, MaxInstanceBytes)
	}
	return fmt.Errorf("invalid schema: an instance of it is larger than the simulator's limit of %d bytes for an answer (the limit is reached at %q)",
		MaxInstanceBytes, name)
}

// instance is Instance for the subschema s of root, named name; item is
// the index of the array item s is (part of), 0 outside arrays.
func (b *instanceBuilder) instance(s map[string]any, name string, depth, item int) (any, error) {
	if depth > 16 || s == nil {
		return nil, b.spend(len("null"), name)
	}
	if ref, ok := s["$ref"].(string); ok {
		if err := b.spend(len(ref), name); err != nil {
			return nil, err
		}
		if target := resolveRef(b.root, ref); target != nil {
			return b.instance(target, name, depth+1, item)
		}
	}
	if c, ok := s["const"]; ok {
		return c, b.spend(jsonSize(c), name)
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		v := e[item%len(e)]
		return v, b.spend(jsonSize(v), name)
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[key].([]any); ok && len(alts) > 0 {
			alt, _ := alts[0].(map[string]any)
			return b.instance(alt, name, depth+1, item)
		}
	}
	if all, ok := s["allOf"].([]any); ok && len(all) > 0 {
		merged := map[string]any{}
		props := map[string]any{}
		var req []any
		for _, part := range all {
			p, _ := part.(map[string]any)
			if err := b.spend(1+len(p), name); err != nil {
				return nil, err
			}
			for k, v := range p {
				if k == "properties" || k == "required" {
					continue
				}
				merged[k] = v
			}
			if pp, ok := p["properties"].(map[string]any); ok {
				if err := b.spend(len(pp), name); err != nil {
					return nil, err
				}
				for k, v := range pp {
					props[k] = v
				}
			}
			if rr, ok := p["required"].([]any); ok {
				if err := b.spend(len(rr), name); err != nil {
					return nil, err
				}
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
		return b.instance(merged, name, depth+1, item)
	}
	typ := schemaType(s)
	switch typ {
	case "object":
		if err := b.spend(len("{}"), name); err != nil {
			return nil, err
		}
		out := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		for k, v := range props {
			if err := b.spend(len(k)+len(`"":,`), k); err != nil {
				return nil, err
			}
			ps, _ := v.(map[string]any)
			pv, err := b.instance(ps, k, depth+1, item)
			if err != nil {
				return nil, err
			}
			out[k] = pv
		}
		return out, nil
	case "array":
		n := 1.0
		if mi, ok := s["minItems"].(float64); ok && mi > n {
			n = math.Ceil(mi)
		}
		if ma, ok := s["maxItems"].(float64); ok && ma >= 0 && ma < n {
			n = math.Floor(ma)
		}
		// Each item takes at least a byte and its comma: refuse before
		// allocating what the budget cannot hold anyway.
		if n > float64(b.left)/2 {
			return nil, b.tooLarge(name, "minItems", n)
		}
		if err := b.spend(len("[]"), name); err != nil {
			return nil, err
		}
		items, _ := s["items"].(map[string]any)
		out := make([]any, 0, int(n))
		for i := 0; i < int(n); i++ {
			if err := b.spend(len(","), name); err != nil {
				return nil, err
			}
			v, err := b.instance(items, name, depth+1, i)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
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
			return int64(v), b.spend(jsonSize(float64(int64(v))), name)
		}
		return v, b.spend(jsonSize(v), name)
	case "boolean":
		return false, b.spend(len("false"), name)
	case "null":
		return nil, b.spend(len("null"), name)
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
		if mx, ok := s["maxLength"].(float64); ok && mx >= 0 {
			if r := []rune(str); float64(len(r)) > mx {
				str = string(r[:int(mx)])
			}
		}
		if mn, ok := s["minLength"].(float64); ok {
			// The filler is one byte a rune: a string of mn runes takes
			// at least mn bytes.
			if mn > float64(b.left) {
				return nil, b.tooLarge(name, "minLength", mn)
			}
			if have := utf8.RuneCountInString(str); float64(have) < mn {
				str += strings.Repeat("~", int(math.Ceil(mn))-have)
			}
		}
		return str, b.spend(len(str)+len(`""`), name)
	}
}

// jsonSize is about the encoded size of v, a decoded JSON value.
func jsonSize(v any) int {
	switch x := v.(type) {
	case nil:
		return len("null")
	case bool:
		return len("false")
	case float64:
		return len(strconv.FormatFloat(x, 'g', -1, 64))
	case string:
		return len(x) + len(`""`)
	case []any:
		n := len("[]")
		for _, e := range x {
			n += jsonSize(e) + len(",")
		}
		return n
	case map[string]any:
		n := len("{}")
		for k, e := range x {
			n += len(k) + len(`"":,`) + jsonSize(e)
		}
		return n
	}
	return 1
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
// are an instance of the tool's parameters schema. It fails when that
// instance would exceed MaxInstanceBytes.
func forcedToolCall(r *Request) (ToolCall, bool, error) {
	var name string
	switch tc := r.ToolChoice.(type) {
	case string:
		if tc != "required" || len(r.Tools) == 0 {
			return ToolCall{}, false, nil
		}
		name = r.Tools[0]
	case map[string]any:
		fn, _ := tc["function"].(map[string]any)
		name, _ = fn["name"].(string)
	}
	if name == "" {
		return ToolCall{}, false, nil
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
	inst, err := Instance(params)
	if err != nil {
		return ToolCall{}, false, fmt.Errorf("tool %q parameters: %w", name, err)
	}
	args, err := json.Marshal(inst)
	if err != nil {
		return ToolCall{}, false, nil
	}
	return ToolCall{Name: name, Arguments: string(args)}, true, nil
}
