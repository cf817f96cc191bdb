package mongox_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// TestUpdateIf: the update applies only when every condition holds, then
// runs only after a matching write, and bad conditions are refused in both
// modes alike.
func TestUpdateIf(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		coll := db.Collection("docs")
		if _, err := coll.InsertOne(ctx, bson.M{"_id": "d", "hash": "h1", "deleting": false, "status": int32(2), "n": 0}); err != nil {
			t.Fatal(err)
		}
		inc := bson.M{"$inc": bson.M{"n": 1}}
		tests := []struct {
			name  string
			id    string
			cond  bson.D
			match bool
		}{
			{"all conditions hold", "d", bson.D{{Key: "hash", Value: "h1"}, {Key: "deleting", Value: false}, {Key: "status", Value: int32(2)}}, true},
			{"no condition", "d", nil, true},
			{"another value", "d", bson.D{{Key: "hash", Value: "h2"}}, false},
			{"one of two differs", "d", bson.D{{Key: "hash", Value: "h1"}, {Key: "deleting", Value: true}}, false},
			{"a field the document lacks", "d", bson.D{{Key: "owner", Value: "x"}}, false},
			{"no such document", "nope", bson.D{{Key: "hash", Value: "h1"}}, false},
			{"no such document, no condition", "nope", nil, false},
		}
		want := 0
		for _, tc := range tests {
			called := false
			ok, err := mongox.UpdateIf(ctx, coll, tc.id, tc.cond, inc, func() { called = true })
			if err != nil || ok != tc.match || called != tc.match {
				t.Errorf("%s: UpdateIf = %v, %v (then called %v); want %v", tc.name, ok, err, called, tc.match)
			}
			if tc.match {
				want++
			}
		}
		var got struct{ N int }
		if err := coll.FindOne(ctx, bson.M{"_id": "d"}).Decode(&got); err != nil || got.N != want {
			t.Fatalf("n = %d, %v; want %d", got.N, err, want)
		}
		// A write the server refuses after the conditions held is an
		// error (a single writer's lost its error once, and the nil
		// result then took the whole process down: a claim's renewal
		// timing out under load).
		if ok, err := mongox.UpdateIf(ctx, coll, "d", nil, bson.M{"$bogus": bson.M{"n": 1}}, nil); err == nil || ok {
			t.Errorf("a refused update: UpdateIf = %v, %v; want an error", ok, err)
		}
		for _, cond := range []bson.D{
			{{Key: "status", Value: bson.M{"$ne": int32(3)}}},
			{{Key: "$or", Value: bson.A{}}},
			{{Key: "_id", Value: "d"}},
		} {
			if _, err := mongox.UpdateIf(ctx, coll, "d", cond, inc, nil); err == nil {
				t.Errorf("condition %v was accepted", cond)
			}
			if _, err := mongox.DeleteIf(ctx, coll, "d", cond); err == nil {
				t.Errorf("delete condition %v was accepted", cond)
			}
		}
	})
}

// TestUpdateIfRace: writers racing from the same state in one process:
// exactly one finds its condition true.
func TestUpdateIfRace(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		coll := db.Collection("jobs")
		if _, err := coll.InsertOne(ctx, bson.M{"_id": "j", "status": "queued"}); err != nil {
			t.Fatal(err)
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				ok, err := mongox.UpdateIf(ctx, coll, "j", bson.D{{Key: "status", Value: "queued"}}, bson.M{"$set": bson.M{"status": "running"}}, nil)
				if err != nil {
					t.Error(err)
				}
				if ok {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d writers won, want 1", wins.Load())
		}
	})
}

// TestDeleteIf: a document goes only when its condition holds.
func TestDeleteIf(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		coll := db.Collection("nodes")
		for _, d := range []bson.M{{"_id": "orphan", "doc_ids": bson.A{}}, {"_id": "shared", "doc_ids": bson.A{"d1"}}} {
			if _, err := coll.InsertOne(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		empty := bson.D{{Key: "doc_ids", Value: bson.A{}}}
		for _, tc := range []struct {
			id      string
			deleted bool
		}{{"shared", false}, {"orphan", true}, {"orphan", false}, {"nope", false}} {
			if ok, err := mongox.DeleteIf(ctx, coll, tc.id, empty); err != nil || ok != tc.deleted {
				t.Errorf("DeleteIf(%s) = %v, %v; want %v", tc.id, ok, err, tc.deleted)
			}
		}
		if n, err := coll.CountDocuments(ctx, bson.M{}); err != nil || n != 1 {
			t.Fatalf("%d documents left, %v; want the shared one", n, err)
		}
	})
}

// TestLockDocumentsNeverDeadlock: goroutines locking overlapping sets,
// named in opposite orders, all get through, and each set is exclusive.
func TestLockDocumentsNeverDeadlock(t *testing.T) {
	t.Parallel()
	coll := testkit.MongoDB(t).Collection("nodes")
	sets := [][]any{{"a", "b", "c"}, {"c", "b", "a"}, {"b", "d", "b"}, {"d", "a"}}
	holders := map[string]*atomic.Int32{"a": {}, "b": {}, "c": {}, "d": {}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for i := range 200 {
			ids := sets[i%len(sets)]
			wg.Go(func() {
				unlock := mongox.LockDocuments(coll, ids...)
				defer unlock()
				seen := map[any]bool{}
				for _, id := range ids {
					if !seen[id] {
						seen[id] = true
						if n := holders[id.(string)].Add(1); n != 1 {
							t.Errorf("%d holders of %v", n, id)
						}
					}
				}
				for range 50 {
					runtime.Gosched() // hold the locks a while, so lockers queue up
				}
				for id := range seen {
					holders[id.(string)].Add(-1)
				}
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("deadlock: lockers still waiting after 20s")
	}
}
