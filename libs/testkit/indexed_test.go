package testkit_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/testkit"
)

// reports is a testing.TB that keeps what AssertIndexed reports instead
// of failing the test.
type reports struct {
	testing.TB
	errors, logs []string
}

func (r *reports) Helper() {}
func (r *reports) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *reports) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

// TestAssertIndexedFollowsESR: each statement's shape is recorded, and an
// index serves it as MongoDB's manual says one can (the ESR guideline,
// "Use Indexes to Sort Query Results": a sort on a non-prefix subset needs
// equalities on the keys before it; a compound index is walked in one
// direction or the reverse; $exists and a sparse index; $or as an OR of
// index scans).
func TestAssertIndexedFollowsESR(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, rt := testkit.MongoDBCounted(t)
	c := db.Collection("things")
	for _, m := range []mongo.IndexModel{
		{Keys: bson.D{{Key: "a", Value: 1}, {Key: "b", Value: 1}, {Key: "c", Value: 1}}, Options: options.Index().SetName("abc")},
		{Keys: bson.D{{Key: "x", Value: 1}, {Key: "y", Value: -1}}, Options: options.Index().SetName("x_y")},
		{Keys: bson.D{{Key: "z", Value: 1}}, Options: options.Index().SetName("z")},
		{Keys: bson.D{{Key: "outbox.0", Value: 1}}, Options: options.Index().SetName("pending").SetSparse(true)},
	} {
		if _, err := c.Indexes().CreateOne(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "a", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	find := func(filter any, opts ...options.Lister[options.FindOptions]) func() error {
		return func() error { _, err := c.Find(ctx, filter, opts...); return err }
	}
	sorted := func(sort bson.D) *options.FindOptionsBuilder { return options.Find().SetSort(sort) }
	limited := func(sort bson.D) *options.FindOptionsBuilder { return options.Find().SetSort(sort).SetLimit(10) }
	tests := []struct {
		name  string
		run   func() error
		shape string
		index string // "" when none serves the shape
	}{
		{"equalities on a prefix", find(bson.D{{Key: "b", Value: 2}, {Key: "a", Value: 1}}), "find things {a: eq, b: eq}", "abc"},
		{"equality off the prefix", find(bson.D{{Key: "b", Value: 2}}), "find things {b: eq}", ""},
		{"sort after the equality", find(bson.D{{Key: "a", Value: 5}}, sorted(bson.D{{Key: "b", Value: 1}, {Key: "c", Value: 1}})), "find things {a: eq} sort {b: 1, c: 1}", "abc"},
		{"sort on a non-prefix subset with equalities before it", find(bson.D{{Key: "b", Value: 3}, {Key: "a", Value: 4}}, sorted(bson.D{{Key: "c", Value: 1}})), "find things {a: eq, b: eq} sort {c: 1}", "abc"},
		{"sort skipping a key", find(bson.D{{Key: "a", Value: 5}}, sorted(bson.D{{Key: "c", Value: 1}})), "find things {a: eq} sort {c: 1}", ""},
		{"range on the sort key", find(bson.D{{Key: "a", Value: 5}, {Key: "b", Value: bson.D{{Key: "$lt", Value: 3}}}}, sorted(bson.D{{Key: "b", Value: 1}})), "find things {a: eq, b: range} sort {b: 1}", "abc"},
		{"range before the sort", find(bson.D{{Key: "a", Value: bson.D{{Key: "$gt", Value: 2}}}}, sorted(bson.D{{Key: "c", Value: 1}})), "find things {a: range} sort {c: 1}", ""},
		{"equality, range, then sort", find(bson.D{{Key: "a", Value: 1}, {Key: "b", Value: bson.D{{Key: "$gt", Value: 1}}}}, sorted(bson.D{{Key: "c", Value: 1}})), "find things {a: eq, b: range} sort {c: 1}", ""},
		{"equality, sort, then range", find(bson.D{{Key: "a", Value: 1}, {Key: "c", Value: bson.D{{Key: "$gt", Value: 1}}}}, sorted(bson.D{{Key: "b", Value: -1}})), "find things {a: eq, c: range} sort {b: -1}", "abc"},
		{"$in with a sort", find(bson.D{{Key: "a", Value: bson.D{{Key: "$in", Value: bson.A{1, 2}}}}}, sorted(bson.D{{Key: "b", Value: 1}})), "find things {a: eq} sort {b: 1}", "abc"},
		{"sort in the index's order, limited", find(bson.D{}, limited(bson.D{{Key: "x", Value: 1}, {Key: "y", Value: -1}})), "find things {} sort {x: 1, y: -1} limit", "x_y"},
		{"sort in reverse, limited", find(bson.D{}, limited(bson.D{{Key: "x", Value: -1}, {Key: "y", Value: 1}})), "find things {} sort {x: -1, y: 1} limit", "x_y"},
		{"sort in neither order", find(bson.D{}, limited(bson.D{{Key: "x", Value: 1}, {Key: "y", Value: 1}})), "find things {} sort {x: 1, y: 1} limit", ""},
		{"sort walking the whole index", find(bson.D{}, sorted(bson.D{{Key: "x", Value: 1}})), "find things {} sort {x: 1}", ""},
		{"no filter", find(bson.D{}), "find things {}", ""},
		{"_id with more", find(bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 1}}), "find things {_id: eq, n: eq}", "_id_"},
		{"_id $in", find(bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"a", "b"}}}}}), "find things {_id: eq}", "_id_"},
		{"_id range in _id order", find(bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: "a"}}}}, limited(bson.D{{Key: "_id", Value: 1}})), "find things {_id: range} sort {_id: 1} limit", "_id_"},
		{"$ne bounds nothing", find(bson.D{{Key: "a", Value: bson.D{{Key: "$ne", Value: 1}}}}), "find things {a: filter}", ""},
		{"$or of indexed branches", find(bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "a", Value: 1}}, bson.D{{Key: "z", Value: 2}}}}}), "find things {$or: [{a: eq}, {z: eq}]}", "abc+z"},
		{"$or with a branch unindexed", find(bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "a", Value: 1}}, bson.D{{Key: "q", Value: 2}}}}}), "find things {$or: [{a: eq}, {q: eq}]}", ""},
		{"$or of a keyset cursor beside equalities", find(bson.D{
			{Key: "a", Value: 1},
			{Key: "$or", Value: bson.A{
				bson.D{{Key: "b", Value: bson.D{{Key: "$lt", Value: 5}}}},
				bson.D{{Key: "b", Value: 5}, {Key: "c", Value: bson.D{{Key: "$lt", Value: 3}}}},
			}},
		}, limited(bson.D{{Key: "b", Value: -1}, {Key: "c", Value: -1}})), "find things {a: eq, $or: [{b: range}, {b: eq, c: range}]} sort {b: -1, c: -1} limit", "abc"},
		{"$and flattened", find(bson.D{{Key: "$and", Value: bson.A{bson.D{{Key: "a", Value: 1}}, bson.D{{Key: "b", Value: 2}}}}}), "find things {a: eq, b: eq}", "abc"},
		{"anchored regex", find(bson.D{{Key: "a", Value: bson.Regex{Pattern: "^pre"}}}), "find things {a: range}", "abc"},
		{"unanchored regex", find(bson.D{{Key: "a", Value: bson.Regex{Pattern: "mid"}}}), "find things {a: filter}", ""},
		{"$exists: true with a sparse index", find(bson.D{
			{Key: "outbox.0", Value: bson.D{{Key: "$exists", Value: true}}},
			{Key: "_id", Value: bson.D{{Key: "$gt", Value: "a"}}},
		}, limited(bson.D{{Key: "_id", Value: 1}})), "find things {_id: range, outbox.0: exists} sort {_id: 1} limit", "pending"},
		{"$exists: true without one", find(bson.D{{Key: "q", Value: bson.D{{Key: "$exists", Value: true}}}}), "find things {q: exists}", ""},
		{"count", func() error { _, err := c.CountDocuments(ctx, bson.D{{Key: "a", Value: 1}}); return err }, "aggregate things {a: eq}", "abc"},
		{"update many", func() error {
			_, err := c.UpdateMany(ctx, bson.D{{Key: "z", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: 1}}}})
			return err
		}, "update things {z: eq}", "z"},
		{"delete one", func() error { _, err := c.DeleteOne(ctx, bson.D{{Key: "q", Value: 1}}); return err }, "delete things {q: eq} limit", ""},
		{"findAndModify with a sort", func() error {
			err := c.FindOneAndUpdate(ctx, bson.D{{Key: "a", Value: 1}, {Key: "b", Value: 2}}, bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: 2}}}},
				options.FindOneAndUpdate().SetSort(bson.D{{Key: "c", Value: -1}})).Err()
			if err == mongo.ErrNoDocuments {
				return nil
			}
			return err
		}, "findAndModify things {a: eq, b: eq} sort {c: -1} limit", "abc"},
	}
	for _, tc := range tests {
		rt.Reset()
		if err := tc.run(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		shapes := rt.Shapes()
		if len(shapes) != 1 || shapes[0].String() != tc.shape {
			t.Errorf("%s: shapes %q, want [%q]", tc.name, shapes, tc.shape)
			continue
		}
		r := &reports{TB: t}
		testkit.AssertIndexed(r, db, rt)
		served := slices.ContainsFunc(r.logs, func(l string) bool { return strings.HasSuffix(l, "→ "+tc.index) })
		switch {
		case tc.index != "" && (len(r.errors) > 0 || !served):
			t.Errorf("%s: want %s served by %s; errors %q, logs %q", tc.name, tc.shape, tc.index, r.errors, r.logs)
		case tc.index == "" && len(r.errors) != 1:
			t.Errorf("%s: want %s reported unindexed; errors %q, logs %q", tc.name, tc.shape, r.errors, r.logs)
		}
	}
}

// TestAssertIndexedHoldsExemptionsToTheirShapes: an accepted scan must
// name a shape that was sent and that no index serves.
func TestAssertIndexedHoldsExemptionsToTheirShapes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, rt := testkit.MongoDBCounted(t)
	c := db.Collection("things")
	if _, err := c.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "a", Value: 1}}, Options: options.Index().SetName("a")}); err != nil {
		t.Fatal(err)
	}
	rt.Reset()
	if _, err := c.Find(ctx, bson.D{{Key: "a", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Find(ctx, bson.D{{Key: "b", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		scans []testkit.Scan
		want  []string // patterns of the errors, in order
	}{
		{"nothing accepted", nil, []string{`no index serves find things \{b: eq\}`}},
		{"the scan accepted", []testkit.Scan{{Shape: "find things {b: eq}", Why: "rare"}}, nil},
		{"an indexed shape accepted", []testkit.Scan{{Shape: "find things {a: eq}", Why: "stale"}, {Shape: "find things {b: eq}", Why: "rare"}},
			[]string{`find things \{a: eq\} is served by index a, yet exempted`}},
		{"a shape never sent", []testkit.Scan{{Shape: "find things {b: eq}", Why: "rare"}, {Shape: "find things {c: eq}", Why: "gone"}},
			[]string{`exempted scan "find things \{c: eq\}" was never sent`}},
	}
	for _, tc := range tests {
		r := &reports{TB: t}
		testkit.AssertIndexed(r, db, rt, tc.scans...)
		if len(r.errors) != len(tc.want) {
			t.Errorf("%s: errors %q, want %d", tc.name, r.errors, len(tc.want))
			continue
		}
		for i, pat := range tc.want {
			if !regexp.MustCompile(pat).MatchString(r.errors[i]) {
				t.Errorf("%s: error %q does not match %q", tc.name, r.errors[i], pat)
			}
		}
	}
}
