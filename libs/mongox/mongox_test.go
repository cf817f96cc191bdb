package mongox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

func TestConnectAndEnsureIndexes(t *testing.T) {
	t.Parallel()
	uri, dbName := testkit.MongoURI(t)
	ctx := context.Background()
	client, db, err := mongox.Connect(ctx, mongox.Config{URI: uri, Database: dbName})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(ctx)
	coll := db.Collection("things")
	ix := mongox.Index{Keys: bson.D{{Key: "tenant", Value: 1}, {Key: "name", Value: 1}}, Unique: true}
	byName := mongox.Index{Keys: bson.D{{Key: "name", Value: 1}}, Name: "by_name"}
	for i := 0; i < 2; i++ { // ensuring twice is a no-op, with several indexes too
		if err := mongox.EnsureIndexes(ctx, coll, ix, byName); err != nil {
			t.Fatalf("ensure #%d: %v", i+1, err)
		}
	}
	if _, err := coll.InsertOne(ctx, bson.M{"tenant": "a", "name": "x"}); err != nil {
		t.Fatal(err)
	}
	_, err = coll.InsertOne(ctx, bson.M{"tenant": "a", "name": "x"})
	if !errors.Is(mongox.Translate(err), mongox.ErrDuplicate) {
		t.Fatalf("duplicate insert: %v", err)
	}
	err = coll.FindOne(ctx, bson.M{"name": "nope"}).Err()
	if !errors.Is(mongox.Translate(err), mongox.ErrNotFound) {
		t.Fatalf("missing find: %v", err)
	}
}

func TestConnectFailureDoesNotLeakURI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, err := mongox.Connect(ctx, mongox.Config{URI: "mongodb://user:s3cret@127.0.0.1:1/?serverSelectionTimeoutMS=200", ConnectTimeout: 300e6})
	if err == nil {
		t.Fatal("connect to a closed port succeeded")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error leaks the password: %v", err)
	}
}

func TestUpdateVersioned(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		coll := db.Collection("runs")
		if _, err := coll.InsertOne(ctx, bson.M{"_id": "r1", "tenant_id": "a", "state": "planning", "version": int64(0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := coll.InsertOne(ctx, bson.M{"_id": "r32", "tenant_id": "a", "version": int32(7)}); err != nil {
			t.Fatal(err)
		}
		filter := bson.D{{Key: "_id", Value: "r1"}, {Key: "tenant_id", Value: "a"}}
		if err := mongox.UpdateVersioned(ctx, coll, filter, 0, bson.M{"$set": bson.M{"state": "fetching"}, "$inc": bson.M{"calls": 1}}); err != nil {
			t.Fatal(err)
		}
		// A writer still holding version 0 lost the race.
		err := mongox.UpdateVersioned(ctx, coll, filter, 0, bson.M{"$set": bson.M{"state": "stale"}})
		if !errors.Is(err, mongox.ErrConflict) {
			t.Fatalf("stale write: %v, want ErrConflict", err)
		}
		err = mongox.UpdateVersioned(ctx, coll, bson.D{{Key: "_id", Value: "nope"}}, 0, bson.M{"$set": bson.M{"state": "x"}})
		if !errors.Is(err, mongox.ErrNotFound) {
			t.Fatalf("missing doc: %v, want ErrNotFound", err)
		}
		// Another tenant's document is not found, whatever the version.
		err = mongox.UpdateVersioned(ctx, coll, bson.D{{Key: "_id", Value: "r1"}, {Key: "tenant_id", Value: "b"}}, 1, bson.M{"$set": bson.M{"state": "x"}})
		if !errors.Is(err, mongox.ErrNotFound) {
			t.Fatalf("other tenant: %v, want ErrNotFound", err)
		}
		// A version stored as int32 is read as well.
		if err := mongox.UpdateVersioned(ctx, coll, bson.D{{Key: "_id", Value: "r32"}}, 7, bson.M{"$set": bson.M{"x": 1}}); err != nil {
			t.Fatalf("int32 version: %v", err)
		}
		var got struct {
			State   string `bson:"state"`
			Calls   int    `bson:"calls"`
			Version int64  `bson:"version"`
		}
		if err := coll.FindOne(ctx, filter).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if got.State != "fetching" || got.Calls != 1 || got.Version != 1 {
			t.Fatalf("got %+v", got)
		}
	})
}

// TestFindByID: the document is found by _id and returned only within its
// scope.
func TestFindByID(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		coll := db.Collection("docs")
		if _, err := coll.InsertOne(ctx, bson.M{"_id": "d1", "tenant_id": "a", "project_id": "", "title": "x"}); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Title string `bson:"title"`
		}
		scope := func(tenant, project string) bson.D {
			return bson.D{{Key: "tenant_id", Value: tenant}, {Key: "project_id", Value: project}}
		}
		if err := mongox.FindByID(ctx, coll, "d1", scope("a", ""), &got); err != nil || got.Title != "x" {
			t.Fatalf("own scope: %v %+v", err, got)
		}
		for _, sc := range []bson.D{scope("b", ""), scope("a", "p"), {{Key: "missing_field", Value: "v"}}} {
			if err := mongox.FindByID(ctx, coll, "d1", sc, &got); !errors.Is(err, mongox.ErrNotFound) {
				t.Fatalf("scope %v: %v, want ErrNotFound", sc, err)
			}
		}
		if err := mongox.FindByID(ctx, coll, "nope", scope("a", ""), &got); !errors.Is(err, mongox.ErrNotFound) {
			t.Fatalf("missing: %v", err)
		}
		if err := mongox.FindByID(ctx, coll, "d1", bson.D{{Key: "tenant_id", Value: bson.M{"$ne": "b"}}}, &got); err == nil {
			t.Fatal("an operator in the scope was accepted")
		}
	})
}

// TestUpdateVersionedRace has many writers race from the same version:
// exactly one wins.
func TestUpdateVersionedRace(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testUpdateVersionedRace)
}

func testUpdateVersionedRace(t *testing.T, db *mongo.Database) {
	ctx := context.Background()
	coll := db.Collection("runs")
	if _, err := coll.InsertOne(ctx, bson.M{"_id": "r", "n": 0, "version": int64(5)}); err != nil {
		t.Fatal(err)
	}
	var wins, conflicts atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			err := mongox.UpdateVersioned(ctx, coll, bson.D{{Key: "_id", Value: "r"}}, 5, bson.M{"$set": bson.M{"n": i}})
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, mongox.ErrConflict):
				conflicts.Add(1)
			default:
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	if wins.Load() != 1 || conflicts.Load() != 7 {
		t.Fatalf("wins=%d conflicts=%d, want 1 and 7", wins.Load(), conflicts.Load())
	}
}

// TestSingleWriterConcurrentWrites: a client connected as the single writer
// (its writes take turns) serves many concurrent writers and readers.
func TestSingleWriterConcurrentWrites(t *testing.T) {
	t.Parallel()
	uri, dbName := testkit.MongoURI(t)
	ctx := context.Background()
	client, db, err := mongox.Connect(ctx, mongox.Config{URI: uri, Database: dbName, SingleWriter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(ctx)
	if !mongox.SingleWriter(db) {
		t.Fatal("Connect did not record the single writer")
	}
	coll := db.Collection("things")
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			id := fmt.Sprint(i % 10)
			_, err := coll.UpdateOne(ctx, bson.M{"_id": id}, bson.M{"$inc": bson.M{"n": 1}}, options.UpdateOne().SetUpsert(true))
			if err != nil && !errors.Is(mongox.Translate(err), mongox.ErrDuplicate) {
				t.Error(err)
			}
			_ = coll.FindOne(ctx, bson.M{"_id": id}).Err()
		})
	}
	wg.Wait()
	n, err := coll.CountDocuments(ctx, bson.M{})
	if err != nil || n != 10 {
		t.Fatalf("%d documents (%v), want 10", n, err)
	}
}
