// Package plan validates the query a planning model writes over the
// conversations collection, so that a plan can never run an arbitrary
// database command.
//
// A query is a JSON object in MongoDB filter syntax. [Compile] accepts only
// the fields of [Fields] and the operators of [Operators], with typed values
// (RFC 3339 times for time fields, numbers for counts, strings for text),
// bounded size and depth, and RE2-checked regular expressions; everything
// else — $where, $function, $expr, $jsonSchema, $text, unknown fields,
// embedded documents as literals — is refused with an [*Error] naming the
// offending path. The result is a bson.D the conversations store can run
// after adding its own scope filter.
package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Limits on a query's size.
const (
	// MaxDepth bounds the nesting of operators and logical clauses.
	MaxDepth = 6
	// MaxNodes bounds the number of keys and array elements in a query.
	MaxNodes = 200
	// MaxList bounds the values of $in, $nin and $all, and the clauses of
	// $and, $or and $nor.
	MaxList = 100
	// MaxPattern bounds the length of a $regex pattern.
	MaxPattern = 200
	// MaxString bounds the length of a string value.
	MaxString = 500
	// MaxQueryBytes bounds the query's JSON text.
	MaxQueryBytes = 16 << 10
)

// Kind is the value type of a queryable field.
type Kind int

// Field kinds.
const (
	// KindString fields take strings.
	KindString Kind = iota + 1
	// KindNumber fields take numbers.
	KindNumber
	// KindTime fields take RFC 3339 times, stored as BSON dates.
	KindTime
	// KindScalar fields (metadata) take strings, numbers, booleans or null.
	KindScalar
)

// Field is a queryable field of the conversations collection.
type Field struct {
	// Name is the path as a query names it.
	Name string
	// Kind is its value type.
	Kind Kind
	// Doc says what it holds, for the planning prompt.
	Doc string
}

// Fields lists the queryable fields. Any path under "metadata." (letters,
// digits, '_' and '-', up to three levels) is queryable too, as KindScalar.
var Fields = []Field{
	{"id", KindString, "conversation id"},
	{"channel", KindString, `channel, e.g. "chat", "email", "phone"`},
	{"customer", KindString, "customer id"},
	{"message_count", KindNumber, "number of messages"},
	{"started_at", KindTime, "time of the first message"},
	{"ended_at", KindTime, "time of the last message"},
	{"messages.role", KindString, `role of any message: "customer", "agent" or "system"`},
	{"messages.text", KindString, "text of any message (use $regex for words)"},
	{"messages.time", KindTime, "time of any message"},
}

// Operators lists the accepted operators.
var Operators = []string{
	"$and", "$or", "$nor", "$eq", "$ne", "$gt", "$gte", "$lt", "$lte",
	"$in", "$nin", "$exists", "$regex", "$options", "$not", "$all",
}

// Error is a refused query: Path locates the offending part
// ("query.$or[1].channel.$where"), Reason says why.
type Error struct {
	// Path is the offending location, rooted at "query".
	Path string
	// Reason says what is wrong.
	Reason string
}

// Error implements error.
func (e *Error) Error() string { return e.Path + ": " + e.Reason }

// ErrRefused is matched by every *Error with errors.Is.
var ErrRefused = errors.New("query refused")

// Is makes errors.Is(err, ErrRefused) true for an *Error.
func (e *Error) Is(target error) bool { return target == ErrRefused }

var (
	metadataPath = regexp.MustCompile(`^metadata(\.[A-Za-z0-9_-]{1,64}){1,3}$`)
	fieldKinds   = func() map[string]Kind {
		m := map[string]Kind{}
		for _, f := range Fields {
			m[f.Name] = f.Kind
		}
		return m
	}()
)

// Describe returns the allow-list as text for a planning prompt.
func Describe() string {
	var b strings.Builder
	b.WriteString("Queryable fields:\n")
	for _, f := range Fields {
		kind := map[Kind]string{KindString: "string", KindNumber: "number", KindTime: "RFC 3339 time string", KindScalar: "scalar"}[f.Kind]
		fmt.Fprintf(&b, "- %s (%s): %s\n", f.Name, kind, f.Doc)
	}
	b.WriteString("- metadata.<key> (string, number, boolean or null): free-form metadata, e.g. metadata.priority, metadata.tags\n")
	b.WriteString("Operators: " + strings.Join(Operators, ", ") + ". $options accepts only i, m and s. $not takes an operator object.\n")
	b.WriteString("Anything else ($where, $expr, $function, $text, unknown fields, nested documents as values) is refused.\n")
	return b.String()
}

// Compile parses a query's JSON text and validates it (see [Validate]).
// Empty text or "{}" matches every conversation.
func Compile(queryJSON string) (bson.D, error) {
	if strings.TrimSpace(queryJSON) == "" {
		return bson.D{}, nil
	}
	if len(queryJSON) > MaxQueryBytes {
		return nil, &Error{Path: "query", Reason: fmt.Sprintf("longer than %d bytes", MaxQueryBytes)}
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(queryJSON)))
	dec.UseNumber()
	var q any
	if err := dec.Decode(&q); err != nil {
		return nil, &Error{Path: "query", Reason: "not valid JSON: " + err.Error()}
	}
	if dec.More() {
		return nil, &Error{Path: "query", Reason: "trailing data after the JSON object"}
	}
	obj, ok := q.(map[string]any)
	if !ok {
		return nil, &Error{Path: "query", Reason: "must be a JSON object"}
	}
	return Validate(obj)
}

// Validate checks a decoded query (from encoding/json, numbers as float64
// or json.Number) against the allow-list and returns it as a filter with
// keys in sorted order and times converted to BSON dates.
func Validate(q map[string]any) (bson.D, error) {
	v := &validator{}
	return v.query("query", q, 0)
}

type validator struct{ nodes int }

func (v *validator) count(path string) error {
	v.nodes++
	if v.nodes > MaxNodes {
		return &Error{Path: path, Reason: fmt.Sprintf("query has more than %d elements", MaxNodes)}
	}
	return nil
}

// query validates a filter document: field conditions and logical clauses.
func (v *validator) query(path string, q map[string]any, depth int) (bson.D, error) {
	if depth > MaxDepth {
		return nil, &Error{Path: path, Reason: fmt.Sprintf("nested deeper than %d levels", MaxDepth)}
	}
	out := bson.D{}
	for _, k := range sortedKeys(q) {
		p := path + "." + k
		if err := v.count(p); err != nil {
			return nil, err
		}
		val := q[k]
		switch {
		case k == "$and" || k == "$or" || k == "$nor":
			list, ok := val.([]any)
			if !ok || len(list) == 0 {
				return nil, &Error{Path: p, Reason: "must be a non-empty array of queries"}
			}
			if len(list) > MaxList {
				return nil, &Error{Path: p, Reason: fmt.Sprintf("more than %d clauses", MaxList)}
			}
			clauses := bson.A{}
			for i, c := range list {
				cp := fmt.Sprintf("%s[%d]", p, i)
				obj, ok := c.(map[string]any)
				if !ok {
					return nil, &Error{Path: cp, Reason: "must be a query object"}
				}
				sub, err := v.query(cp, obj, depth+1)
				if err != nil {
					return nil, err
				}
				clauses = append(clauses, sub)
			}
			out = append(out, bson.E{Key: k, Value: clauses})
		case strings.HasPrefix(k, "$"):
			return nil, &Error{Path: p, Reason: fmt.Sprintf("operator %s is not allowed at the top level (allowed: $and, $or, $nor)", k)}
		default:
			kind, err := fieldKind(p, k)
			if err != nil {
				return nil, err
			}
			cond, err := v.condition(p, kind, val, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, bson.E{Key: k, Value: cond})
		}
	}
	return out, nil
}

// fieldKind resolves a field name against the allow-list.
func fieldKind(path, name string) (Kind, error) {
	if k, ok := fieldKinds[name]; ok {
		return k, nil
	}
	if metadataPath.MatchString(name) {
		return KindScalar, nil
	}
	return 0, &Error{Path: path, Reason: fmt.Sprintf("unknown field %q (queryable: %s, metadata.<key>)", name, fieldNames())}
}

func fieldNames() string {
	names := make([]string, len(Fields))
	for i, f := range Fields {
		names[i] = f.Name
	}
	return strings.Join(names, ", ")
}

// condition validates a field's condition: a literal (implicit $eq) or an
// operator document.
func (v *validator) condition(path string, kind Kind, val any, depth int) (any, error) {
	if depth > MaxDepth {
		return nil, &Error{Path: path, Reason: fmt.Sprintf("nested deeper than %d levels", MaxDepth)}
	}
	obj, ok := val.(map[string]any)
	if !ok {
		return v.literal(path, kind, val)
	}
	if len(obj) == 0 {
		return nil, &Error{Path: path, Reason: "empty operator object"}
	}
	out := bson.D{}
	_, hasRegex := obj["$regex"]
	for _, op := range sortedKeys(obj) {
		p := path + "." + op
		if err := v.count(p); err != nil {
			return nil, err
		}
		arg := obj[op]
		switch op {
		case "$eq", "$ne", "$gt", "$gte", "$lt", "$lte":
			lit, err := v.literal(p, kind, arg)
			if err != nil {
				return nil, err
			}
			out = append(out, bson.E{Key: op, Value: lit})
		case "$in", "$nin", "$all":
			list, ok := arg.([]any)
			if !ok {
				return nil, &Error{Path: p, Reason: "must be an array"}
			}
			if len(list) > MaxList {
				return nil, &Error{Path: p, Reason: fmt.Sprintf("more than %d values", MaxList)}
			}
			vals := bson.A{}
			for i, e := range list {
				ep := fmt.Sprintf("%s[%d]", p, i)
				if err := v.count(ep); err != nil {
					return nil, err
				}
				lit, err := v.literal(ep, kind, e)
				if err != nil {
					return nil, err
				}
				vals = append(vals, lit)
			}
			out = append(out, bson.E{Key: op, Value: vals})
		case "$exists":
			b, ok := arg.(bool)
			if !ok {
				return nil, &Error{Path: p, Reason: "must be true or false"}
			}
			out = append(out, bson.E{Key: op, Value: b})
		case "$regex":
			if kind != KindString && kind != KindScalar {
				return nil, &Error{Path: p, Reason: "applies only to text fields"}
			}
			s, ok := arg.(string)
			if !ok {
				return nil, &Error{Path: p, Reason: "must be a string"}
			}
			if len(s) > MaxPattern {
				return nil, &Error{Path: p, Reason: fmt.Sprintf("pattern longer than %d characters", MaxPattern)}
			}
			// RE2 syntax only: no backreferences or lookarounds, whose
			// backtracking can hang a database.
			if _, err := regexp.Compile(s); err != nil {
				return nil, &Error{Path: p, Reason: "not a valid RE2 regular expression: " + err.Error()}
			}
			out = append(out, bson.E{Key: op, Value: s})
		case "$options":
			if !hasRegex {
				return nil, &Error{Path: p, Reason: "only allowed next to $regex"}
			}
			s, ok := arg.(string)
			if !ok || strings.Trim(s, "ims") != "" || len(s) > 3 {
				return nil, &Error{Path: p, Reason: `must be made of the flags "i", "m" and "s"`}
			}
			out = append(out, bson.E{Key: op, Value: s})
		case "$not":
			inner, ok := arg.(map[string]any)
			if !ok {
				return nil, &Error{Path: p, Reason: "must be an operator object"}
			}
			sub, err := v.condition(p, kind, inner, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, bson.E{Key: op, Value: sub})
		default:
			if !strings.HasPrefix(op, "$") {
				return nil, &Error{Path: p, Reason: "nested documents are not allowed as values; use an operator such as $eq"}
			}
			return nil, &Error{Path: p, Reason: fmt.Sprintf("operator %s is not allowed (allowed: %s)", op, strings.Join(Operators, ", "))}
		}
	}
	return out, nil
}

// literal validates a value compared with a field of the given kind.
func (v *validator) literal(path string, kind Kind, val any) (any, error) {
	switch x := val.(type) {
	case map[string]any:
		return nil, &Error{Path: path, Reason: "nested documents are not allowed as values"}
	case []any:
		return nil, &Error{Path: path, Reason: "arrays are only allowed as arguments of $in, $nin and $all"}
	case string:
		if len(x) > MaxString {
			return nil, &Error{Path: path, Reason: fmt.Sprintf("string longer than %d characters", MaxString)}
		}
		switch kind {
		case KindString, KindScalar:
			return x, nil
		case KindTime:
			t, err := time.Parse(time.RFC3339, x)
			if err != nil {
				return nil, &Error{Path: path, Reason: fmt.Sprintf("%q is not an RFC 3339 time (e.g. 2024-05-01T00:00:00Z)", x)}
			}
			return t.UTC(), nil
		default:
			return nil, &Error{Path: path, Reason: "must be a number"}
		}
	case json.Number, float64, int, int64:
		if kind != KindNumber && kind != KindScalar {
			return nil, &Error{Path: path, Reason: map[Kind]string{KindString: "must be a string", KindTime: "must be an RFC 3339 time string"}[kind]}
		}
		return number(path, x)
	case bool:
		if kind != KindScalar {
			return nil, &Error{Path: path, Reason: "booleans are only allowed for metadata fields"}
		}
		return x, nil
	case nil:
		if kind != KindScalar {
			return nil, &Error{Path: path, Reason: "null is only allowed for metadata fields; use $exists"}
		}
		return nil, nil
	default:
		return nil, &Error{Path: path, Reason: fmt.Sprintf("unsupported value of type %T", val)}
	}
}

// number converts a JSON number to int64 when integral, else float64.
func number(path string, x any) (any, error) {
	var f float64
	switch n := x.(type) {
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return i, nil
		}
		var err error
		if f, err = n.Float64(); err != nil {
			return nil, &Error{Path: path, Reason: "not a number"}
		}
	case float64:
		f = n
	case int:
		return int64(n), nil
	case int64:
		return n, nil
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, &Error{Path: path, Reason: "not a finite number"}
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return int64(f), nil
	}
	return f, nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
