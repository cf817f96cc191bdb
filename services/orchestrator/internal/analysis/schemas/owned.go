package schemas

import "slices"

// Fields of claims: any object of an answer that has a "source" says where
// its statement comes from, and our code checks it (see package synthesis).
const (
	// FieldSource names where a claim comes from; the model writes it.
	FieldSource = "source"
	// FieldSupported is set by our code on every object that has a source:
	// true when the source is a tool call that returned data.
	FieldSupported = "supported"
	// FieldUnsupportedReason is set by our code, next to supported false,
	// saying why the source was not accepted.
	FieldUnsupportedReason = "unsupported_reason"
)

// The definitions our code gives the fields it owns, whatever a
// caller-supplied schema says about them: it writes these values itself.
var (
	dataSourcesDef = map[string]any{
		"type": "array", "items": map[string]any{"type": "string"},
		"description": "Set by the service, not the model: the tools that returned data. Any value given here is replaced.",
	}
	dataGapsDef = map[string]any{
		"type": "array", "items": map[string]any{"type": "string"},
		"description": "Set by the service, not the model: each tool call that failed, was cancelled or returned nothing, and why. Any value given here is replaced.",
	}
	supportedDef = map[string]any{
		"type": "boolean",
		"description": "Set by the service, not the model: true when source names a tool that returned data, the heading of such a result, " +
			"or a document_id such a result holds; false otherwise, with unsupported_reason saying why.",
	}
	unsupportedReasonDef = map[string]any{
		"type":        "string",
		"description": "Set by the service when supported is false: why the source was not accepted.",
	}
)

// own returns the full schema and the model's schema for doc, a decoded
// object schema, which it does not modify. Both declare data_sources and
// data_gaps at the top level with our definitions, and supported and
// unsupported_reason beside every "source" property; the full schema
// requires data_sources and data_gaps, the model's schema requires none of
// the four, which it is told our code sets.
func own(doc map[string]any) (full, model map[string]any) {
	full = clone(doc).(map[string]any)
	props, _ := full["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
		full["properties"] = props
	}
	props[FieldDataSources], props[FieldDataGaps] = clone(dataSourcesDef), clone(dataGapsDef)
	req, _ := full["required"].([]any)
	for _, f := range []string{FieldDataSources, FieldDataGaps} {
		if !slices.Contains(req, any(f)) {
			req = append(req, f)
		}
	}
	full["required"] = req
	markClaims(full)

	model = clone(full).(map[string]any)
	model["required"] = slices.DeleteFunc(model["required"].([]any), func(v any) bool {
		return v == FieldDataSources || v == FieldDataGaps
	})
	return full, model
}

// markClaims declares supported and unsupported_reason in every subschema
// whose properties include source, wherever it sits (properties, items,
// $defs, anyOf, ...). Values that are data, not schemas (const, enum,
// default, examples), are left alone.
func markClaims(v any) {
	switch x := v.(type) {
	case map[string]any:
		if props, ok := x["properties"].(map[string]any); ok {
			if _, ok := props[FieldSource]; ok {
				props[FieldSupported], props[FieldUnsupportedReason] = clone(supportedDef), clone(unsupportedReasonDef)
			}
		}
		for k, sub := range x {
			switch k {
			case "const", "enum", "default", "examples":
				continue
			}
			markClaims(sub)
		}
	case []any:
		for _, sub := range x {
			markClaims(sub)
		}
	}
}

// clone deep-copies a decoded JSON value.
func clone(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, sub := range x {
			m[k] = clone(sub)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, sub := range x {
			s[i] = clone(sub)
		}
		return s
	}
	return v
}
