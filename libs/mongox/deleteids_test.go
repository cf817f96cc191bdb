package mongox_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// TestDeleteIDs: with many writers DeleteIDs is one command of deletes by
// _id; the only writer's client deletes the ids its server's deleter keys
// (the embedded FerretDB's) in one statement beneath the driver, and the
// others (an int32 _id) through the driver; both report what they
// deleted, missing ids included. A single writer's DeleteIf deletes the
// same way.
func TestDeleteIDs(t *testing.T) {
	t.Parallel()
	testkit.EachWriterModeCounted(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips) {
		ctx := context.Background()
		single := mongox.SingleWriter(db)
		coll := db.Collection("things")
		if _, err := coll.InsertMany(ctx, []any{bson.M{"_id": "a"}, bson.M{"_id": "b"}, bson.M{"_id": "c"}, bson.M{"_id": int32(7)}, bson.M{"_id": "d", "k": 1}}); err != nil {
			t.Fatal(err)
		}
		rt.Reset()
		if n, err := mongox.DeleteIDs(ctx, coll, []any{"a", "b", "missing"}); err != nil || n != 2 {
			t.Fatalf("DeleteIDs(a, b, missing) = %d, %v; want 2", n, err)
		}
		wantDirect, wantDriver := 0, 1
		if single {
			wantDirect, wantDriver = 1, 0
		}
		if d, c := rt.Count("delete things (sqlite)"), rt.Count("delete things"); d != wantDirect || c != wantDriver {
			t.Fatalf("statements beneath the driver %d, delete commands %d; want %d and %d (%s)", d, c, wantDirect, wantDriver, rt)
		}
		rt.Reset()
		if n, err := mongox.DeleteIDs(ctx, coll, []any{int32(7)}); err != nil || n != 1 {
			t.Fatalf("DeleteIDs(7) = %d, %v; want 1", n, err)
		}
		if c := rt.Count("delete things"); c != 1 {
			t.Fatalf("an int32 _id: %d delete commands, want 1 (%s)", c, rt)
		}
		rt.Reset()
		if ok, err := mongox.DeleteIf(ctx, coll, "d", bson.D{{Key: "k", Value: 1}}); err != nil || !ok {
			t.Fatalf("DeleteIf(d) = %v, %v", ok, err)
		}
		if d := rt.Count("delete things (sqlite)"); d != wantDirect {
			t.Fatalf("DeleteIf: %d statements beneath the driver, want %d (%s)", d, wantDirect, rt)
		}
		var left []bson.M
		cur, err := coll.Find(ctx, bson.D{})
		if err == nil {
			err = cur.All(ctx, &left)
		}
		if err != nil || len(left) != 1 || left[0]["_id"] != "c" {
			t.Fatalf("left %v (%v), want only c", left, err)
		}
	})
}

// TestReplaceByID: ReplaceByID writes the whole document over the one with
// its _id and reports whether there was one, writing nothing if not; the
// only writer's client writes beneath the driver (the embedded FerretDB's
// replacer), except what that cannot write as the server would (an int32
// _id, a key FerretDB would refuse), which goes through the driver; a
// unique index's refusal is ErrDuplicate in both modes.
func TestReplaceByID(t *testing.T) {
	t.Parallel()
	testkit.EachWriterModeCounted(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips) {
		ctx := context.Background()
		single := mongox.SingleWriter(db)
		coll := db.Collection("things")
		oid := bson.NewObjectID()
		if _, err := coll.InsertMany(ctx, []any{
			bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 1}, {Key: "gone", Value: true}},
			bson.D{{Key: "_id", Value: oid}, {Key: "n", Value: 1}},
			bson.D{{Key: "_id", Value: int32(7)}, {Key: "n", Value: 1}},
			bson.D{{Key: "_id", Value: "u"}, {Key: "u", Value: "x"}},
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "u", Value: 1}}, Options: options.Index().SetUnique(true).SetSparse(true)}); err != nil {
			t.Fatal(err)
		}
		wantDirect, wantDriver := 0, 1
		if single {
			wantDirect, wantDriver = 1, 0
		}
		replace := func(id any, doc bson.D, wantMatched bool, direct, driver int) {
			t.Helper()
			rt.Reset()
			matched, err := mongox.ReplaceByID(ctx, coll, id, doc)
			if err != nil || matched != wantMatched {
				t.Fatalf("ReplaceByID(%v) = %v, %v; want %v", id, matched, err, wantMatched)
			}
			if d, c := rt.Count("update things (sqlite)"), rt.Count("update things"); d != direct || c != driver {
				t.Fatalf("ReplaceByID(%v): %d writes beneath the driver, %d update commands; want %d and %d (%s)", id, d, c, direct, driver, rt)
			}
		}
		replace("a", bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 2}, {Key: "s", Value: "é<"}}, true, wantDirect, wantDriver)
		// A string that spells the ObjectID is another _id.
		replace(oid.Hex(), bson.D{{Key: "_id", Value: oid.Hex()}, {Key: "n", Value: 5}}, false, wantDirect, wantDriver)
		replace(oid, bson.D{{Key: "_id", Value: oid}, {Key: "n", Value: 3}}, true, wantDirect, wantDriver)
		replace("missing", bson.D{{Key: "_id", Value: "missing"}, {Key: "n", Value: 9}}, false, wantDirect, wantDriver)
		replace(int32(7), bson.D{{Key: "_id", Value: int32(7)}, {Key: "n", Value: 4}}, true, 0, 1)
		// -0 FerretDB would store as 0: through the driver.
		replace("a", bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 2}, {Key: "s", Value: "é<"}, {Key: "z", Value: math.Copysign(0, -1)}}, true, 0, 1)
		replace("a", bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 2}, {Key: "s", Value: "é<"}}, true, wantDirect, wantDriver)
		// FerretDB's own update reports the refusal as an internal error.
		rt.Reset()
		if _, err := mongox.ReplaceByID(ctx, coll, "a", bson.D{{Key: "_id", Value: "a"}, {Key: "u", Value: "x"}}); err == nil || single && !errors.Is(err, mongox.ErrDuplicate) {
			t.Fatalf("a unique index's refusal: %v, want an error (ErrDuplicate beneath the driver)", err)
		}

		want := []string{
			`{"_id":"a","n":{"$numberInt":"2"},"s":"é<"}`,
			fmt.Sprintf(`{"_id":{"$oid":"%s"},"n":{"$numberInt":"3"}}`, oid.Hex()),
			`{"_id":{"$numberInt":"7"},"n":{"$numberInt":"4"}}`,
			`{"_id":"u","u":"x"}`,
		}
		cur, err := coll.Find(ctx, bson.D{})
		var docs []bson.D
		if err == nil {
			err = cur.All(ctx, &docs)
		}
		var got []string
		for _, d := range docs {
			got = append(got, fmt.Sprint(d))
		}
		slices.Sort(got)
		slices.Sort(want)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("the collection holds %q (%v), want %q", got, err, want)
		}
	})
}

// gateSpy is a direct writer that notes whether the writers' gate was
// held while it wrote.
type gateSpy struct {
	*testkit.Mongo
	uri  string
	held []bool
}

func (s *gateSpy) DeleteIDs(ctx context.Context, db, coll string, ids []any) (int64, bool, error) {
	s.held = append(s.held, mongox.WriteGateBusy(s.uri))
	return s.Mongo.DeleteIDs(ctx, db, coll, ids)
}

func (s *gateSpy) ReplaceDoc(ctx context.Context, db, coll string, doc bson.Raw) (bool, bool, error) {
	s.held = append(s.held, mongox.WriteGateBusy(s.uri))
	return s.Mongo.ReplaceDoc(ctx, db, coll, doc)
}

func (s *gateSpy) InsertDocs(ctx context.Context, db, coll string, docs []bson.Raw) ([]error, bool, error) {
	s.held = append(s.held, mongox.WriteGateBusy(s.uri))
	return s.Mongo.InsertDocs(ctx, db, coll, docs)
}

// TestDeleteIDsTakesTheWriteTurn: a client Connect made as the only writer
// deletes and inserts through the direct writer registered for its URI, in
// a write turn of its own, as its write commands do (SQLite takes one
// writer at a time); a client connected before the registration, or after
// it was undone, does not.
func TestDeleteIDsTakesTheWriteTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := testkit.NewMongo(t)
	before, db0, err := mongox.Connect(ctx, mongox.Config{URI: m.URI(), Database: "gate", SingleWriter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer before.Disconnect(ctx)
	spy := &gateSpy{Mongo: m, uri: m.URI()}
	unregister := mongox.RegisterDirect(m.URI(), spy)
	client, db, err := mongox.Connect(ctx, mongox.Config{URI: m.URI(), Database: "gate", SingleWriter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(ctx)
	unregister()
	after, db2, err := mongox.Connect(ctx, mongox.Config{URI: m.URI(), Database: "gate", SingleWriter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer after.Disconnect(ctx)

	coll := db.Collection("things")
	if _, err := coll.InsertMany(ctx, []any{bson.M{"_id": "a"}, bson.M{"_id": "b"}, bson.M{"_id": "c"}}); err != nil {
		t.Fatal(err)
	}
	if n, err := mongox.DeleteIDs(ctx, coll, []any{"a"}); err != nil || n != 1 {
		t.Fatalf("DeleteIDs = %d, %v", n, err)
	}
	if errs := mongox.InsertEach(ctx, coll, []bson.M{{"_id": "d"}}); errs[0] != nil {
		t.Fatalf("InsertEach: %v", errs[0])
	}
	if ok, err := mongox.ReplaceByID(ctx, coll, "d", bson.D{{Key: "_id", Value: "d"}, {Key: "n", Value: 1}}); err != nil || !ok {
		t.Fatalf("ReplaceByID: %v, %v", ok, err)
	}
	if len(spy.held) != 3 || !spy.held[0] || !spy.held[1] || !spy.held[2] {
		t.Fatalf("the direct writer ran %d times, with the gate held %v; want three times, held", len(spy.held), spy.held)
	}
	spy.held = spy.held[:1]
	if mongox.WriteGateBusy(m.URI()) {
		t.Fatal("the gate is still held after the delete")
	}
	for _, d := range []*mongo.Database{db0, db2} {
		if n, err := mongox.DeleteIDs(ctx, d.Collection("things"), []any{"b"}); err != nil || n != 1 {
			t.Fatalf("DeleteIDs = %d, %v", n, err)
		}
		if len(spy.held) != 1 {
			t.Fatal("a client connected before the registration or after it was undone used the deleter")
		}
		if _, err := d.Collection("things").InsertOne(ctx, bson.M{"_id": "b"}); err != nil {
			t.Fatal(err)
		}
	}
}
