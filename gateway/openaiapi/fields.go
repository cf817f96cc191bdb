package openaiapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
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
// not asked for are ignored: OpenAI clients send many (store, metadata,
// service_tier, ...). A field that is null counts as absent, as OpenAI
// treats it.
type object struct {
	param  string // this object's own parameter path; "" for the body
	fields map[string]json.RawMessage
}

// parseObject reads raw as a JSON object at param.
func parseObject(raw json.RawMessage, param string) (object, error) {
	var fields map[string]json.RawMessage
	if kind := jsonKind(raw); kind != "object" {
		return object{}, badParam(paramOr(param, "body"), "want a JSON object, got %s", kind)
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return object{}, badParam(paramOr(param, "body"), "not valid JSON: %v", err)
	}
	return object{param: param, fields: fields}, nil
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

// raw returns field name's value; ok is false when it is absent or null.
func (o object) raw(name string) (json.RawMessage, bool) {
	v, ok := o.fields[name]
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
	var s string
	if jsonKind(v) != "string" || json.Unmarshal(v, &s) != nil {
		return "", false, badParam(o.path(name), "want a string, got %s", jsonKind(v))
	}
	return s, true, nil
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
	f, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
	if jsonKind(v) != "number" || err != nil {
		return nil, badParam(o.path(name), "want a number, got %s", jsonKind(v))
	}
	return &f, nil
}

// integer reads an integer field (a number with no fraction, as JSON
// clients write 1 or 1.0) into a new int64; nil when absent.
func (o object) integer(name string) (*int64, error) {
	f, err := o.number(name)
	if err != nil || f == nil {
		if err != nil {
			return nil, badParam(o.path(name), "want an integer, got %s", jsonKind(o.fields[name]))
		}
		return nil, nil
	}
	if *f != math.Trunc(*f) || math.Abs(*f) > 1<<53 {
		return nil, badParam(o.path(name), "want an integer, got %v", *f)
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
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return nil, false, badParam(o.path(name), "not valid JSON: %v", err)
	}
	return items, true, nil
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
		var s string
		if jsonKind(it) != "string" || json.Unmarshal(it, &s) != nil {
			return nil, false, badParam(o.index(name, i), "want a string, got %s%s", jsonKind(it), what)
		}
		out = append(out, s)
	}
	return out, true, nil
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
