package mongox_test

import (
	"context"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// indexNames lists coll's indexes by name.
func indexNames(t *testing.T, coll *mongo.Collection) []string {
	t.Helper()
	specs, err := coll.Indexes().ListSpecifications(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names
}

// A sparse index on an array position (the outbox relay's) is accepted,
// again at every start, and leaves out the documents without the field
// where the server keeps sparse indexes (MongoDB; FerretDB v1 accepts the
// option and ignores it).
func TestEnsureSparseIndexOnArrayPosition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.MongoDB(t)
	coll := db.Collection("things")
	ix := mongox.Index{Name: "pending", Keys: bson.D{{Key: "outbox.0", Value: 1}}, Sparse: true}
	for i := range 2 {
		if err := mongox.EnsureIndexes(ctx, coll, ix); err != nil {
			t.Fatalf("ensure #%d: %v", i+1, err)
		}
	}
	if got := indexNames(t, coll); !slices.Equal(got, []string{"_id_", "pending"}) {
		t.Fatalf("indexes %v", got)
	}
	for _, doc := range []bson.D{
		{{Key: "_id", Value: "pending"}, {Key: "outbox", Value: bson.A{bson.D{{Key: "id", Value: "e1"}}}}},
		{{Key: "_id", Value: "empty"}, {Key: "outbox", Value: bson.A{}}},
		{{Key: "_id", Value: "none"}},
	} {
		if _, err := coll.InsertOne(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	n, err := coll.CountDocuments(ctx, bson.D{{Key: "outbox.0", Value: bson.D{{Key: "$exists", Value: true}}}})
	if err != nil || n != 1 {
		t.Fatalf("documents with a pending outbox: %d, %v; want 1", n, err)
	}
}

// DropIndexes drops what is there and lets pass what is not: an index
// never made, one another process dropped first, a collection that does
// not exist.
func TestDropIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.MongoDB(t)
	coll := db.Collection("things")
	if err := mongox.EnsureIndexes(ctx, coll,
		mongox.Index{Name: "old", Keys: bson.D{{Key: "a", Value: 1}}},
		mongox.Index{Name: "new", Keys: bson.D{{Key: "a", Value: 1}, {Key: "b", Value: 1}}},
	); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the second time "old" is gone
		if err := mongox.DropIndexes(ctx, coll, "old", "never"); err != nil {
			t.Fatalf("drop #%d: %v", i+1, err)
		}
	}
	if got := indexNames(t, coll); !slices.Equal(got, []string{"_id_", "new"}) {
		t.Fatalf("indexes after the drop: %v, want _id_ and new", got)
	}
	if err := mongox.DropIndexes(ctx, db.Collection("absent"), "old"); err != nil {
		t.Fatalf("drop on a collection that does not exist: %v", err)
	}
	if err := mongox.DropIndexes(ctx, coll, "_id_"); err == nil {
		t.Fatal("dropping _id_ succeeded; the server refuses it, and so must DropIndexes")
	}
}
