package testkit_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/testkit"
)

// TestRoundTripsClassifiesFilters: each statement's filter is told apart:
// exactly {_id} (FerretDB's indexed lookup), an _id equality with more
// conditions (MongoDB's), and the rest.
func TestRoundTripsClassifiesFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, rt := testkit.MongoDBCounted(t)
	c := db.Collection("things")
	if _, err := c.InsertOne(ctx, bson.M{"_id": "a", "n": 1}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		run           func() error
		exact, keyed  bool
		wantStatement string // a part of the listed statement
	}{
		{"find by _id", func() error { return c.FindOne(ctx, bson.M{"_id": "a"}).Err() }, true, true, ""},
		{"find by _id and version", func() error { return c.FindOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 1}}).Err() }, false, true, `find things {"_id": "a","n"`},
		{"find by _id $in", func() error { return c.FindOne(ctx, bson.M{"_id": bson.M{"$in": bson.A{"a"}}}).Err() }, false, false, "$in"},
		{"find all", func() error { _, err := c.Find(ctx, bson.M{}); return err }, false, false, "find things {}"},
		{"find by another field", func() error { return c.FindOne(ctx, bson.M{"n": 1}).Err() }, false, false, `"n"`},
		{"update by _id", func() error {
			_, err := c.UpdateOne(ctx, bson.M{"_id": "a"}, bson.M{"$set": bson.M{"n": 2}})
			return err
		}, true, true, ""},
		{"update many", func() error { _, err := c.UpdateMany(ctx, bson.M{"n": 2}, bson.M{"$set": bson.M{"n": 3}}); return err }, false, false, "update things"},
		{"delete by _id", func() error { _, err := c.DeleteOne(ctx, bson.M{"_id": "zz"}); return err }, true, true, ""},
		{"bulk deletes, one not by _id", func() error {
			_, err := c.BulkWrite(ctx, []mongo.WriteModel{
				mongo.NewDeleteOneModel().SetFilter(bson.M{"_id": "x"}),
				mongo.NewDeleteOneModel().SetFilter(bson.M{"n": 9}),
			})
			return err
		}, false, false, `delete things {"n"`},
		{"count", func() error { _, err := c.CountDocuments(ctx, bson.M{"_id": "a"}); return err }, false, false, "aggregate things"},
		{"findAndModify by _id", func() error {
			return c.FindOneAndUpdate(ctx, bson.M{"_id": "a"}, bson.M{"$set": bson.M{"n": 4}}).Err()
		}, true, true, ""},
		{"insert", func() error { _, err := c.InsertOne(ctx, bson.M{"_id": "b"}); return err }, true, true, ""},
	}
	for _, tc := range tests {
		rt.Reset()
		if err := tc.run(); err != nil && err != mongo.ErrNoDocuments {
			t.Fatalf("%s: %v", tc.name, err)
		}
		notExact, unkeyed := rt.NotExact(), rt.Unkeyed()
		if (len(notExact) == 0) != tc.exact || (len(unkeyed) == 0) != tc.keyed {
			t.Errorf("%s: not exact %q, unkeyed %q; want exact %v, keyed %v", tc.name, notExact, unkeyed, tc.exact, tc.keyed)
		}
		if tc.wantStatement != "" && !slices.ContainsFunc(notExact, func(s string) bool { return strings.Contains(s, tc.wantStatement) }) {
			t.Errorf("%s: %q names no statement with %q", tc.name, notExact, tc.wantStatement)
		}
	}
}
