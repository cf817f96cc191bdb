package testkit

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Use is how an index can use one field of a filter, from weakest to
// strongest: a field named twice (through $and, or with two operators)
// takes the strongest.
type Use int

// Uses of a filter's field by an index.
const (
	// Filter: the predicate bounds no index scan; it is applied to what
	// the scan found ($ne, $nin, $not, $size, $mod, an unanchored $regex,
	// and top-level $nor, $expr, $where, $text).
	Filter Use = iota
	// Exists: {$exists: true}. A regular index holds missing fields as
	// null, so only a sparse index on the field bounds the scan to the
	// documents that have it.
	Exists
	// Range: $lt, $lte, $gt, $gte, $type, $elemMatch, an anchored $regex.
	Range
	// Equal: a value, $eq, $in, $all (a point of a multikey index) and
	// {$exists: false} (the null point).
	Equal
)

// String names u as QueryShape.String does.
func (u Use) String() string {
	switch u {
	case Equal:
		return "eq"
	case Range:
		return "range"
	case Exists:
		return "exists"
	}
	return "filter"
}

// SortKey is one key of a sort: a field path and 1 or -1.
type SortKey struct {
	Field string
	Dir   int
}

// QueryShape is what an index can serve of one statement a client sent
// (each statement of a find, count, distinct, update, delete,
// findAndModify, or an aggregate's leading $match, $sort and $limit): the
// collection, the field paths its filter names with how an index can use
// each, its $or branches, its sort and whether a limit bounds it. Values
// are left out, so the statements of one query made with other values
// share a shape.
type QueryShape struct {
	// Command is the command's name ("find", "update", ...); Collection
	// the collection it names. Both are empty for an $or branch.
	Command, Collection string
	// Fields maps each field path the filter names (outside $or) to its
	// use; top-level operators that no index serves ($nor, $expr, ...)
	// appear under their own name as Filter.
	Fields map[string]Use
	// Or holds each top-level $or (also those inside $and): its branches.
	Or [][]QueryShape
	// Sort is the statement's sort, in order.
	Sort []SortKey
	// Limited is set when a limit bounds the statement: a find with a
	// limit, findAndModify, an update or delete of one document, a $limit.
	Limited bool
}

// String writes s as, e.g., `find jobs {tenant_id: eq, create_time:
// range} sort {create_time: -1, _id: -1} limit`: fields by use (eq,
// range, exists, filter), then by name.
func (s QueryShape) String() string {
	var b strings.Builder
	if s.Command != "" {
		b.WriteString(strings.TrimSpace(s.Command+" "+s.Collection) + " ")
	}
	b.WriteString(s.predicates())
	if len(s.Sort) > 0 {
		b.WriteString(" sort {")
		for i, k := range s.Sort {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s: %d", k.Field, k.Dir)
		}
		b.WriteString("}")
	}
	if s.Limited && s.Command != "" {
		b.WriteString(" limit")
	}
	return b.String()
}

// predicates writes the filter part of String.
func (s QueryShape) predicates() string {
	fields := slices.SortedFunc(maps.Keys(s.Fields), func(a, b string) int {
		if ua, ub := s.Fields[a], s.Fields[b]; ua != ub {
			return int(ub) - int(ua)
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(fields)+len(s.Or))
	for _, f := range fields {
		parts = append(parts, f+": "+s.Fields[f].String())
	}
	for _, branches := range s.Or {
		bs := make([]string, len(branches))
		for i, br := range branches {
			bs[i] = br.predicates()
		}
		parts = append(parts, "$or: ["+strings.Join(bs, ", ")+"]")
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// commandShapes returns the shapes of a command's statements; nil for
// commands without a filter (insert, getMore, ...).
func commandShapes(name, coll string, cmd bson.Raw) []QueryShape {
	one := func(filterKey string, limited bool) []QueryShape {
		s := QueryShape{Command: name, Collection: coll, Fields: map[string]Use{}, Limited: limited}
		if f, ok := cmd.Lookup(filterKey).DocumentOK(); ok {
			s.addFilter(f)
		}
		if sort, ok := cmd.Lookup("sort").DocumentOK(); ok {
			s.Sort = sortKeys(sort)
		}
		return []QueryShape{s}
	}
	statements := func(key, q string, limited func(bson.Raw) bool) []QueryShape {
		arr, ok := cmd.Lookup(key).ArrayOK()
		if !ok {
			return nil
		}
		vals, _ := arr.Values()
		var out []QueryShape
		for _, v := range vals {
			st, ok := v.DocumentOK()
			if !ok {
				continue
			}
			s := QueryShape{Command: name, Collection: coll, Fields: map[string]Use{}, Limited: limited(st)}
			if f, ok := st.Lookup(q).DocumentOK(); ok {
				s.addFilter(f)
			}
			out = append(out, s)
		}
		return out
	}
	switch name {
	case "find":
		limit, _ := cmd.Lookup("limit").AsInt64OK()
		single, _ := cmd.Lookup("singleBatch").BooleanOK()
		return one("filter", limit != 0 || single)
	case "findAndModify":
		return one("query", true)
	case "count", "distinct":
		return one("query", false)
	case "update":
		return statements("updates", "q", func(st bson.Raw) bool {
			multi, _ := st.Lookup("multi").BooleanOK()
			return !multi
		})
	case "delete":
		return statements("deletes", "q", func(st bson.Raw) bool {
			limit, _ := st.Lookup("limit").AsInt64OK()
			return limit == 1
		})
	case "aggregate":
		return []QueryShape{pipelineShape(coll, cmd)}
	}
	return nil
}

// pipelineShape is the shape of an aggregate's leading $match, $sort and
// $limit stages, the part MongoDB can answer from an index.
func pipelineShape(coll string, cmd bson.Raw) QueryShape {
	s := QueryShape{Command: "aggregate", Collection: coll, Fields: map[string]Use{}}
	arr, _ := cmd.Lookup("pipeline").ArrayOK()
	stages, _ := arr.Values()
	for _, v := range stages {
		stage, ok := v.DocumentOK()
		if !ok {
			break
		}
		first, err := stage.IndexErr(0)
		if err != nil {
			break
		}
		switch first.Key() {
		case "$match":
			if f, ok := first.Value().DocumentOK(); ok && len(s.Sort) == 0 && !s.Limited {
				s.addFilter(f)
				continue
			}
		case "$sort":
			if d, ok := first.Value().DocumentOK(); ok && len(s.Sort) == 0 && !s.Limited {
				s.Sort = sortKeys(d)
				continue
			}
		case "$limit":
			s.Limited = true
			continue
		}
		break
	}
	return s
}

// sortKeys reads a sort document; keys that are not 1 or -1 ($meta) are
// left out.
func sortKeys(d bson.Raw) []SortKey {
	elems, _ := d.Elements()
	var out []SortKey
	for _, e := range elems {
		if n, ok := e.Value().AsInt64OK(); ok && (n == 1 || n == -1) {
			out = append(out, SortKey{Field: e.Key(), Dir: int(n)})
		}
	}
	return out
}

// addFilter adds filter f's predicates to s: fields by their use, $and
// flattened, each $or as a set of branches.
func (s *QueryShape) addFilter(f bson.Raw) {
	elems, _ := f.Elements()
	for _, e := range elems {
		switch key := e.Key(); key {
		case "$and":
			for _, sub := range subFilters(e.Value()) {
				s.addFilter(sub)
			}
		case "$or":
			subs := subFilters(e.Value())
			if len(subs) == 1 {
				s.addFilter(subs[0])
				continue
			}
			branches := make([]QueryShape, len(subs))
			for i, sub := range subs {
				branches[i] = QueryShape{Fields: map[string]Use{}}
				branches[i].addFilter(sub)
			}
			s.Or = append(s.Or, branches)
		case "$comment":
		default:
			if strings.HasPrefix(key, "$") {
				s.use(key, Filter)
				continue
			}
			s.use(key, valueUse(e.Value()))
		}
	}
}

// use records field with use u unless it has a stronger use already.
func (s *QueryShape) use(field string, u Use) {
	if old, ok := s.Fields[field]; !ok || u > old {
		s.Fields[field] = u
	}
}

// subFilters returns the documents of an $and or $or array.
func subFilters(v bson.RawValue) []bson.Raw {
	arr, ok := v.ArrayOK()
	if !ok {
		return nil
	}
	vals, _ := arr.Values()
	var out []bson.Raw
	for _, v := range vals {
		if d, ok := v.DocumentOK(); ok {
			out = append(out, d)
		}
	}
	return out
}

// valueUse is how an index can use the condition v on one field.
func valueUse(v bson.RawValue) Use {
	switch v.Type {
	case bson.TypeRegex:
		pattern, _ := v.Regex()
		return regexUse(pattern)
	case bson.TypeEmbeddedDocument:
	default:
		return Equal
	}
	ops, _ := v.Document().Elements()
	if len(ops) == 0 || !strings.HasPrefix(ops[0].Key(), "$") {
		return Equal // an embedded document compared whole
	}
	best := Filter
	for _, op := range ops {
		u := Filter
		switch op.Key() {
		case "$eq", "$in", "$all":
			u = Equal
		case "$lt", "$lte", "$gt", "$gte", "$type", "$elemMatch":
			u = Range
		case "$exists":
			if b, ok := op.Value().BooleanOK(); (ok && !b) || isZero(op.Value()) {
				u = Equal
			} else {
				u = Exists
			}
		case "$regex":
			if p, ok := op.Value().StringValueOK(); ok {
				u = regexUse(p)
			} else if p, _, ok := op.Value().RegexOK(); ok {
				u = regexUse(p)
			}
		}
		best = max(best, u)
	}
	return best
}

// isZero reports whether v is a number equal to 0 ({$exists: 0} means
// false).
func isZero(v bson.RawValue) bool {
	n, ok := v.AsInt64OK()
	if !ok {
		f, isDouble := v.DoubleOK()
		return isDouble && f == 0
	}
	return n == 0
}

// regexUse: a regular expression anchored at the start with a literal
// prefix bounds an index scan; any other is a filter.
func regexUse(pattern string) Use {
	if len(pattern) > 1 && pattern[0] == '^' && !strings.ContainsRune(".*+?()[{|\\$^", rune(pattern[1])) {
		return Range
	}
	return Filter
}
