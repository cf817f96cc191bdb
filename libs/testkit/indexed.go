package testkit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Scan is a statement shape (QueryShape.String) that a test accepts
// without an index, and why: e.g. a start-up job that reads every
// document anyway.
type Scan struct {
	Shape, Why string
}

// AssertIndexed fails t for every shape rt recorded (RoundTrips.Shapes)
// that no index of its collection in db serves (see IndexFor), unless
// scans names it; and for every entry of scans that names no recorded
// shape, or one an index serves, so exemptions do not outlive their
// reason. It logs which index serves each shape, and the indexes no shape
// used. Call it after the store's operations ran on db, a database of
// MongoDBCounted; its listIndexes commands are counted in rt.
func AssertIndexed(t testing.TB, db *mongo.Database, rt *RoundTrips, scans ...Scan) {
	t.Helper()
	shapes := rt.Shapes()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	indexes, err := listIndexes(ctx, db, shapes)
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	exempt := map[string]string{}
	for _, sc := range scans {
		exempt[sc.Shape] = sc.Why
	}
	used := map[string]bool{}
	for _, s := range shapes {
		name := IndexFor(s, indexes[s.Collection])
		why, exempted := exempt[s.String()]
		delete(exempt, s.String())
		switch {
		case name != "" && exempted:
			t.Errorf("testkit: %s is served by index %s, yet exempted as a scan (%s)", s, name, why)
		case name != "":
			t.Logf("indexed: %s → %s", s, name)
			for _, n := range strings.Split(name, "+") {
				used[s.Collection+"."+n] = true
			}
		case exempted:
			t.Logf("scan accepted: %s (%s)", s, why)
		default:
			t.Errorf("testkit: no index serves %s; indexes of %s: %s", s, s.Collection, describeIndexes(indexes[s.Collection]))
		}
	}
	for shape := range exempt {
		t.Errorf("testkit: exempted scan %q was never sent", shape)
	}
	for _, coll := range slices.Sorted(maps.Keys(indexes)) {
		for _, ix := range indexes[coll] {
			if ix.Name != "_id_" && !used[coll+"."+ix.Name] {
				t.Logf("unused index: %s.%s %s", coll, ix.Name, describeIndexes([]Index{ix}))
			}
		}
	}
}

// Index is an index as IndexFor reads it: its name and keys. Special
// indexes (text, hashed, geospatial) have Special set and serve nothing
// here.
type Index struct {
	Name    string
	Keys    []SortKey
	Special bool
}

// listIndexes returns the indexes of every collection the shapes name. A
// collection that does not exist has none.
func listIndexes(ctx context.Context, db *mongo.Database, shapes []QueryShape) (map[string][]Index, error) {
	out := map[string][]Index{}
	for _, s := range shapes {
		if _, ok := out[s.Collection]; ok {
			continue
		}
		specs, err := db.Collection(s.Collection).Indexes().ListSpecifications(ctx)
		var ce mongo.CommandError
		if errors.As(err, &ce) && ce.Code == namespaceNotFound {
			specs, err = nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list indexes of %s: %w", s.Collection, err)
		}
		ixs := []Index{}
		for _, spec := range specs {
			ixs = append(ixs, indexOf(spec.Name, spec.KeysDocument))
		}
		out[s.Collection] = ixs
	}
	return out, nil
}

// namespaceNotFound is the server's code for a collection that does not
// exist.
const namespaceNotFound = 26

// indexOf reads an index's key document.
func indexOf(name string, keys bson.Raw) Index {
	ix := Index{Name: name}
	elems, _ := keys.Elements()
	for _, e := range elems {
		n, ok := e.Value().AsFloat64OK()
		if !ok || n == 0 {
			ix.Special = true // "text", "hashed", "2dsphere", ...
			continue
		}
		dir := 1
		if n < 0 {
			dir = -1
		}
		ix.Keys = append(ix.Keys, SortKey{Field: e.Key(), Dir: dir})
	}
	return ix
}

// describeIndexes writes indexes as "name {a: 1, b: -1}, ...".
func describeIndexes(ixs []Index) string {
	if len(ixs) == 0 {
		return "none"
	}
	parts := make([]string, len(ixs))
	for i, ix := range ixs {
		keys := make([]string, len(ix.Keys))
		for j, k := range ix.Keys {
			keys[j] = fmt.Sprintf("%s: %d", k.Field, k.Dir)
		}
		parts[i] = ix.Name + " {" + strings.Join(keys, ", ") + "}"
	}
	return strings.Join(parts, ", ")
}

// IndexFor returns the name of an index among ixs that serves s, or ""
// if none does. An equality on _id is always served (by _id_). Otherwise
// an index serves s when it follows MongoDB's ESR rule: its leading keys
// are s's equality fields (in any order), the next ones its sort keys in
// order (sort keys with an equality are dropped; the directions all as
// the sort's, or all reversed), and its range fields come among the keys
// after those; and the scan is bounded: there is an equality, the first
// key has a range, or the first key is the first sort key and a limit
// stops the walk. A field with {$exists: true} is also served by an index
// on that field alone (sparse on MongoDB, which then holds only the
// documents that have the field; the rest of the filter and the sort
// apply to those, assumed few: pending work). A filter with an $or is
// served by an index for the rest of the filter, or when every branch,
// with the rest added, is served (MongoDB's OR of index scans): the
// names are then joined with "+".
func IndexFor(s QueryShape, ixs []Index) string {
	if s.Fields["_id"] == Equal {
		return "_id_"
	}
	for _, ix := range ixs {
		if !ix.Special && esr(s, ix) {
			return ix.Name
		}
	}
	for f, u := range s.Fields {
		if u != Exists {
			continue
		}
		for _, ix := range ixs {
			if !ix.Special && len(ix.Keys) == 1 && ix.Keys[0].Field == f {
				return ix.Name
			}
		}
	}
	for i, branches := range s.Or {
		rest := s
		rest.Or = slices.Delete(slices.Clone(s.Or), i, i+1)
		names := make([]string, 0, len(branches))
		for _, br := range branches {
			name := IndexFor(merge(rest, br), ixs)
			if name == "" {
				names = nil
				break
			}
			names = append(names, name)
		}
		if len(names) > 0 {
			return strings.Join(slices.Compact(slices.Sorted(slices.Values(names))), "+")
		}
	}
	return ""
}

// merge returns s with the predicates of branch added.
func merge(s, branch QueryShape) QueryShape {
	out := s
	out.Fields = maps.Clone(s.Fields)
	for f, u := range branch.Fields {
		out.use(f, u)
	}
	out.Or = append(slices.Clone(s.Or), branch.Or...)
	return out
}

// esr reports whether ix serves s's fields outside $or and its sort by
// the ESR rule (see IndexFor).
func esr(s QueryShape, ix Index) bool {
	keys := ix.Keys
	equal := 0
	for _, u := range s.Fields {
		if u == Equal {
			equal++
		}
	}
	i := 0
	for i < len(keys) && s.Fields[keys[i].Field] == Equal {
		i++
	}
	if i != equal {
		return false
	}
	var sort []SortKey
	for _, k := range s.Sort {
		if s.Fields[k.Field] != Equal {
			sort = append(sort, k)
		}
	}
	if len(keys)-i < len(sort) {
		return false
	}
	dir := 0
	for j, k := range sort {
		ik := keys[i+j]
		if ik.Field != k.Field {
			return false
		}
		d := ik.Dir * k.Dir
		if dir == 0 {
			dir = d
		} else if d != dir {
			return false
		}
	}
	rest := keys[i:] // the sort keys, then the others
	for f, u := range s.Fields {
		if (u == Range || u == Exists) && !slices.ContainsFunc(rest, func(k SortKey) bool { return k.Field == f }) {
			return false
		}
	}
	switch {
	case equal > 0:
		return true
	case len(keys) > 0 && s.Fields[keys[0].Field] == Range:
		return true
	}
	return len(sort) > 0 && s.Limited
}
