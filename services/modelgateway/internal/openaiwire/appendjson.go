package openaiwire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/agentmesh/agentmesh/libs/jsonstr"
)

// AppendJSON appends the request body to b: exactly what encoding/json
// writes for the struct with HTML escaping off, then the Extra fields the
// struct did not set, in key order.
//
// Every call through the gateway encodes one of these, and reflection-based
// encoding of the nested messages was a tenth of the gateway's CPU at 2,000
// calls/s (and grew the handler goroutine's stack on every call); appending
// field by field costs a fraction of that. TestAppendJSONMatchesEncodingJSON
// and FuzzAppendString hold the output to encoding/json's.
func (r *ChatRequest) AppendJSON(b []byte) ([]byte, error) {
	var err error
	e := objectWriter{b: b, track: len(r.Extra) > 0}
	e.key("model")
	e.b = appendString(e.b, r.Model)
	e.key("messages")
	if r.Messages == nil {
		e.b = append(e.b, "null"...)
	} else {
		e.b = append(e.b, '[')
		for i := range r.Messages {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			if e.b, err = r.Messages[i].appendJSON(e.b); err != nil {
				return nil, err
			}
		}
		e.b = append(e.b, ']')
	}
	if len(r.Tools) > 0 {
		e.key("tools")
		e.b = append(e.b, '[')
		for i := range r.Tools {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			t := &r.Tools[i]
			e.b = append(e.b, `{"type":`...)
			e.b = appendString(e.b, t.Type)
			e.b = append(e.b, `,"function":{"name":`...)
			e.b = appendString(e.b, t.Function.Name)
			if t.Function.Description != "" {
				e.b = append(e.b, `,"description":`...)
				e.b = appendString(e.b, t.Function.Description)
			}
			e.b = append(e.b, `,"parameters":`...)
			if e.b, err = appendRaw(e.b, t.Function.Parameters); err != nil {
				return nil, err
			}
			e.b = append(e.b, "}}"...)
		}
		e.b = append(e.b, ']')
	}
	if r.ToolChoice != nil {
		e.key("tool_choice")
		switch tc := r.ToolChoice.(type) {
		case string:
			e.b = appendString(e.b, tc)
		case NamedToolChoice:
			e.b = append(e.b, `{"type":`...)
			e.b = appendString(e.b, tc.Type)
			e.b = append(e.b, `,"function":{"name":`...)
			e.b = appendString(e.b, tc.Function.Name)
			e.b = append(e.b, "}}"...)
		default:
			if e.b, err = appendMarshal(e.b, tc); err != nil {
				return nil, err
			}
		}
	}
	if rf := r.ResponseFormat; rf != nil {
		e.key("response_format")
		e.b = append(e.b, `{"type":`...)
		e.b = appendString(e.b, rf.Type)
		if js := rf.JSONSchema; js != nil {
			e.b = append(e.b, `,"json_schema":{"name":`...)
			e.b = appendString(e.b, js.Name)
			e.b = append(e.b, `,"schema":`...)
			if e.b, err = appendRaw(e.b, js.Schema); err != nil {
				return nil, err
			}
			e.b = append(e.b, '}')
		}
		e.b = append(e.b, '}')
	}
	if r.Temperature != nil {
		e.key("temperature")
		if e.b, err = appendFloat(e.b, *r.Temperature); err != nil {
			return nil, err
		}
	}
	if r.TopP != nil {
		e.key("top_p")
		if e.b, err = appendFloat(e.b, *r.TopP); err != nil {
			return nil, err
		}
	}
	if r.TopK != nil {
		e.key("top_k")
		e.b = strconv.AppendInt(e.b, int64(*r.TopK), 10)
	}
	if r.MaxTokens != nil {
		e.key("max_tokens")
		e.b = strconv.AppendInt(e.b, int64(*r.MaxTokens), 10)
	}
	if len(r.Stop) > 0 {
		e.key("stop")
		e.b = append(e.b, '[')
		for i, s := range r.Stop {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.b = appendString(e.b, s)
		}
		e.b = append(e.b, ']')
	}
	if r.Seed != nil {
		e.key("seed")
		e.b = strconv.AppendInt(e.b, *r.Seed, 10)
	}
	if r.Stream {
		e.key("stream")
		e.b = append(e.b, "true"...)
	}
	if r.StreamOptions != nil {
		e.key("stream_options")
		e.b = append(e.b, `{"include_usage":`...)
		e.b = strconv.AppendBool(e.b, r.StreamOptions.IncludeUsage)
		e.b = append(e.b, '}')
	}
	if r.Thinking != nil {
		e.key("thinking")
		e.b = append(e.b, `{"type":`...)
		e.b = appendString(e.b, r.Thinking.Type)
		e.b = append(e.b, '}')
	}
	if r.ReasoningEffort != "" {
		e.key("reasoning_effort")
		e.b = appendString(e.b, r.ReasoningEffort)
	}
	if r.EnableThinking != nil {
		e.key("enable_thinking")
		e.b = strconv.AppendBool(e.b, *r.EnableThinking)
	}
	if r.ThinkingBudget != nil {
		e.key("thinking_budget")
		e.b = strconv.AppendInt(e.b, int64(*r.ThinkingBudget), 10)
	}
	if len(r.Extra) > 0 {
		keys := make([]string, 0, len(r.Extra))
		for k := range r.Extra {
			if !slices.Contains(e.keys, k) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			e.key(k)
			if e.b, err = appendMarshal(e.b, r.Extra[k]); err != nil {
				return nil, err
			}
		}
	}
	return append(e.b, '}'), nil
}

func (m *Message) appendJSON(b []byte) ([]byte, error) {
	var err error
	b = append(b, `{"role":`...)
	b = appendString(b, m.Role)
	b = append(b, `,"content":`...)
	switch c := m.Content.(type) {
	case string:
		b = appendString(b, c)
	case nil:
		b = append(b, "null"...)
	case []ContentPart:
		b = append(b, '[')
		for i := range c {
			if i > 0 {
				b = append(b, ',')
			}
			p := &c[i]
			b = append(b, `{"type":`...)
			b = appendString(b, p.Type)
			if p.Text != "" {
				b = append(b, `,"text":`...)
				b = appendString(b, p.Text)
			}
			if p.ImageURL != nil {
				b = append(b, `,"image_url":{"url":`...)
				b = appendString(b, p.ImageURL.URL)
				b = append(b, '}')
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	default:
		if b, err = appendMarshal(b, c); err != nil {
			return nil, err
		}
	}
	if m.ReasoningContent != "" {
		b = append(b, `,"reasoning_content":`...)
		b = appendString(b, m.ReasoningContent)
	}
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i := range m.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			tc := &m.ToolCalls[i]
			b = append(b, `{"id":`...)
			b = appendString(b, tc.ID)
			b = append(b, `,"type":`...)
			b = appendString(b, tc.Type)
			b = append(b, `,"function":{"name":`...)
			b = appendString(b, tc.Function.Name)
			b = append(b, `,"arguments":`...)
			b = appendString(b, tc.Function.Arguments)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	if m.ToolCallID != "" {
		b = append(b, `,"tool_call_id":`...)
		b = appendString(b, m.ToolCallID)
	}
	return append(b, '}'), nil
}

// objectWriter writes the members of one JSON object and, when track is
// set, remembers their keys (so Extra never duplicates one).
type objectWriter struct {
	b     []byte
	n     int // members written
	track bool
	keys  []string
}

func (o *objectWriter) key(k string) {
	if o.n == 0 {
		o.b = append(o.b, '{')
	} else {
		o.b = append(o.b, ',')
	}
	o.n++
	if o.track {
		o.keys = append(o.keys, k)
	}
	o.b = appendString(o.b, k)
	o.b = append(o.b, ':')
}

// appendMarshal appends v as encoding/json writes it without HTML escaping.
func appendMarshal(b []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	out := buf.Bytes()
	return out[:len(out)-1], nil // Encode's newline
}

// appendRaw appends raw JSON compacted, as encoding/json does with a
// json.RawMessage (validating it); empty is null.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return append(b, "null"...), nil
	}
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return nil, fmt.Errorf("json: error calling MarshalJSON for type json.RawMessage: %w", err)
	}
	return buf.Bytes(), nil
}

// appendFloat formats f as encoding/json does.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, fmt.Errorf("json: unsupported value: %s", strconv.FormatFloat(f, 'g', -1, 64))
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 → e-9, as encoding/json writes it
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

// appendString appends s as a JSON string the way encoding/json does with
// HTML escaping off.
func appendString(b []byte, s string) []byte { return jsonstr.Append(b, s, false) }
