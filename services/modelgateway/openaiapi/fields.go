package openaiapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// paramError is a request field with a wrong value: a 400
// invalid_request_error whose param names the field as OpenAI does
// ("messages[1].content[0].image_url.url").
type paramError struct {
	param string
	msg   string
}

func (e *paramError) Error() string { return e.param + ": " + e.msg }

func badParam(param, format string, args ...any) error {
	return &paramError{param: param, msg: fmt.Sprintf(format, args...)}
}

// object is one JSON object of a request, read field by field so that a
// value of the wrong type is an error naming its parameter. Fields it is
// not asked for are ignored: OpenAI clients send many. Those the README's
// conformance table lists are all asked for, the ones the API drops
// (store, metadata, service_tier, ...) by check, for their type only. A
// field that is null counts as absent, as OpenAI treats it.
type object struct {
	param  string   // this object's own parameter path; "" for the body
	fields []member // in the order written; of a duplicate key the last counts, as with encoding/json
}

// member is one field of an object: its name, and its value as a slice of
// the request body (not a copy).
type member struct {
	name  []byte
	value json.RawMessage
}

// parseObject reads raw as a JSON object at param. It is on the path of
// every request, so valid JSON (checked whole first, without allocating)
// is split into its members in one pass over slices of raw, where
// encoding/json would scan it twice and copy every value into a map: a
// sixth of the REST gateway's CPU per chat completion went there. What is
// not valid JSON gets encoding/json's own error.
func parseObject(raw json.RawMessage, param string) (object, error) {
	if kind := jsonKind(raw); kind != "object" {
		if param == "" && bytes.HasPrefix(bytes.TrimLeft(raw, " \t\r\n"), []byte("\uFEFF")) {
			return object{}, badParam("body", "not valid JSON: it starts with a byte order mark (U+FEFF), which JSON sent over a network must not have")
		}
		return object{}, badParam(paramOr(param, "body"), "want a JSON object, got %s", kind)
	}
	if param == "" && !utf8.Valid(raw) {
		// encoding/json would take it, each bad byte read as U+FFFD: the
		// model would see text other than the caller's.
		return object{}, badParam("body", "not valid JSON: the body is not valid UTF-8")
	}
	if !json.Valid(raw) {
		var fields map[string]json.RawMessage
		err := json.Unmarshal(raw, &fields)
		if err == nil { // cannot happen: Valid and Unmarshal share a scanner
			err = errors.New("invalid JSON")
		}
		return object{}, badParam(paramOr(param, "body"), "not valid JSON: %v", err)
	}
	o := object{param: param, fields: make([]member, 0, 8)}
	i := skipSpace(raw, 0) + 1 // past '{'
	for {
		i = skipSpace(raw, i)
		if raw[i] == '}' {
			return o, nil
		}
		end := skipString(raw, i)
		name := unquote(raw[i:end])
		i = skipSpace(raw, end) + 1 // past ':'
		i = skipSpace(raw, i)
		end = skipValue(raw, i)
		o.fields = append(o.fields, member{name: name, value: raw[i:end:end]})
		i = skipSpace(raw, end)
		if raw[i] == ',' {
			i++
		}
	}
}

// elements splits a valid JSON array into its elements, slices of raw.
func elements(raw json.RawMessage) []json.RawMessage {
	var items []json.RawMessage
	i := skipSpace(raw, 0) + 1 // past '['
	for {
		i = skipSpace(raw, i)
		if raw[i] == ']' {
			return items
		}
		end := skipValue(raw, i)
		items = append(items, raw[i:end:end])
		i = skipSpace(raw, end)
		if raw[i] == ',' {
			i++
		}
	}
}

// The scanning helpers below take valid JSON (json.Valid said so) and an
// index into it: they find where things end and need not check anything.

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index past the string whose opening quote is at i.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index past the value that starts at i.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
		i++
	}
	return i
}

// unquote returns the text of a valid JSON string as encoding/json reads
// it: without escapes or bytes that are not UTF-8 it is the bytes between
// the quotes; otherwise encoding/json decodes it (escapes resolved,
// invalid UTF-8 replaced by U+FFFD).
func unquote(q []byte) []byte {
	in := q[1 : len(q)-1]
	plain := true
	for _, c := range in {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain || (utf8.Valid(in) && bytes.IndexByte(in, '\\') < 0) {
		return in
	}
	var s string
	_ = json.Unmarshal(q, &s) // valid: it cannot fail
	return []byte(s)
}

func paramOr(p, def string) string {
	if p == "" {
		return def
	}
	return p
}

// path returns the parameter path of field name.
func (o object) path(name string) string {
	if o.param == "" {
		return name
	}
	return o.param + "." + name
}

// field returns field name's value, null included; ok is false when it
// is absent.
func (o object) field(name string) (json.RawMessage, bool) {
	for i := len(o.fields) - 1; i >= 0; i-- {
		if string(o.fields[i].name) == name {
			return o.fields[i].value, true
		}
	}
	return nil, false
}

// raw returns field name's value; ok is false when it is absent or null.
func (o object) raw(name string) (json.RawMessage, bool) {
	v, ok := o.field(name)
	if !ok || jsonKind(v) == "null" {
		return nil, false
	}
	return v, true
}

// has reports whether field name is present and not null.
func (o object) has(name string) bool {
	_, ok := o.raw(name)
	return ok
}

// str reads a string field.
func (o object) str(name string) (string, bool, error) {
	v, ok := o.raw(name)
	if !ok {
		return "", false, nil
	}
	if jsonKind(v) != "string" {
		return "", false, badParam(o.path(name), "want a string, got %s", jsonKind(v))
	}
	return string(unquote(v)), true, nil
}

// boolean reads a boolean field.
func (o object) boolean(name string) (value, present bool, err error) {
	v, ok := o.raw(name)
	if !ok {
		return false, false, nil
	}
	switch string(v) {
	case "true":
		return true, true, nil
	case "false":
		return false, true, nil
	}
	return false, false, badParam(o.path(name), "want a boolean, got %s", jsonKind(v))
}

// number reads a numeric field into a new float64; nil when absent.
func (o object) number(name string) (*float64, error) {
	v, ok := o.raw(name)
	if !ok {
		return nil, nil
	}
	if jsonKind(v) != "number" {
		return nil, badParam(o.path(name), "want a number, got %s", jsonKind(v))
	}
	f, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
	if err != nil {
		return nil, badParam(o.path(name), "%s is out of range for a number", bytes.TrimSpace(v))
	}
	return &f, nil
}

// integer reads an integer field (a number with no fraction, as JSON
// clients write 1 or 1.0) into a new int64; nil when absent. Written in
// digits it may be any int64 (a seed drawn from 2^63); written otherwise
// (1.0, 1e3) it must be exact as a float64, up to 2^53.
func (o object) integer(name string) (*int64, error) {
	f, err := o.number(name)
	if err != nil || f == nil {
		if err != nil {
			v, _ := o.field(name)
			return nil, badParam(o.path(name), "want an integer, got %s", jsonKind(v))
		}
		return nil, nil
	}
	if *f != math.Trunc(*f) {
		return nil, badParam(o.path(name), "want an integer, got %v", *f)
	}
	v, _ := o.raw(name)
	if n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64); err == nil {
		return &n, nil
	}
	if math.Abs(*f) > 1<<53 {
		return nil, badParam(o.path(name), "%s is out of range: want an integer from -2^63 to 2^63-1, in digits", bytes.TrimSpace(v))
	}
	n := int64(*f)
	return &n, nil
}

// object reads a nested object field; ok is false when it is absent.
func (o object) object(name string) (object, bool, error) {
	v, ok := o.raw(name)
	if !ok {
		return object{}, false, nil
	}
	sub, err := parseObject(v, o.path(name))
	return sub, err == nil, err
}

// array reads an array field's elements; ok is false when it is absent.
func (o object) array(name string) ([]json.RawMessage, bool, error) {
	v, ok := o.raw(name)
	if !ok {
		return nil, false, nil
	}
	if jsonKind(v) != "array" {
		return nil, false, badParam(o.path(name), "want an array, got %s", jsonKind(v))
	}
	// v is a slice of an object that was valid JSON.
	return elements(v), true, nil
}

// strings reads a field that OpenAI lets be a string or an array of
// strings (stop, input) as a list; ok is false when it is absent. what
// says, in errors, what an element is.
func (o object) strings(name, what string) ([]string, bool, error) {
	raw, ok := o.raw(name)
	if !ok {
		return nil, false, nil
	}
	switch jsonKind(raw) {
	case "string":
		s, _, err := o.str(name)
		return []string{s}, true, err
	case "array":
	default:
		return nil, false, badParam(o.path(name), "want a string or an array of strings, got %s", jsonKind(raw))
	}
	items, _, err := o.array(name)
	if err != nil {
		return nil, false, err
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		if jsonKind(it) != "string" {
			return nil, false, badParam(o.index(name, i), "want a string, got %s%s", jsonKind(it), what)
		}
		out = append(out, string(unquote(it)))
	}
	return out, true, nil
}

// jsonType is the JSON type OpenAI's API gives a field.
type jsonType int

const (
	aString jsonType = iota
	aBoolean
	aNumber
	anInteger
	anObject
	anArray
)

// typed is a field the API accepts and drops, with the type OpenAI gives it.
type typed struct {
	name string
	typ  jsonType
}

// check reads each field with the reader of its type, and drops its value:
// a field the API ignores is held to its type as one it uses, a 400 naming
// it ("metadata: want an object, got number").
func (o object) check(fields ...typed) error {
	for _, f := range fields {
		var err error
		switch f.typ {
		case aString:
			_, _, err = o.str(f.name)
		case aBoolean:
			_, _, err = o.boolean(f.name)
		case aNumber:
			_, err = o.number(f.name)
		case anInteger:
			_, err = o.integer(f.name)
		case anObject:
			_, _, err = o.object(f.name)
		case anArray:
			_, _, err = o.array(f.name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// index returns the parameter path of element i of array field name.
func (o object) index(name string, i int) string {
	return o.path(name) + "[" + strconv.Itoa(i) + "]"
}

// jsonKind names the kind of a JSON value by its first byte, for errors.
func jsonKind(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}
