package testkit_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/outage"
)

// TestEmbeddedMongoDeletesIDs: the embedded server deletes documents by
// _id from its SQLite file exactly as FerretDB would: ids that need JSON
// escaping (HTML characters, quotes, a line separator, non-ASCII), an
// ObjectID, a string that spells a document's ObjectID (kept: the types
// differ), missing ids (no error), more ids than one statement
// takes; other id types are not served and delete nothing; a missing
// collection or database deletes nothing and creates nothing. FerretDB
// reads what is left, inserts a deleted id again, and a collection, or a
// whole database (a new file), dropped and made again is found.
func TestEmbeddedMongoDeletesIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, client, dir := startEmbedded(t)
	coll := client.Database("shop").Collection("orders")
	oid, kept0 := bson.NewObjectID(), bson.NewObjectID()
	escaped := []any{"plain", "b<c&d>", `quote"and\back`, "line\u2028sep", "é-ü-日本", oid}
	// FerretDB spells binary data in base64: "YWJj" must not delete it.
	binary := bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: []byte("abc")}
	kept := []any{kept0, int32(7), "keep", binary}
	var docs []any
	for _, id := range slices.Concat(escaped, kept) {
		docs = append(docs, bson.D{{Key: "_id", Value: id}, {Key: "n", Value: 1}})
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	ids := func() []string {
		cur, err := coll.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			t.Fatal(err)
		}
		var got []bson.M
		if err := cur.All(ctx, &got); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range got {
			out = append(out, fmt.Sprintf("%T:%v", d["_id"], d["_id"]))
		}
		slices.Sort(out)
		return out
	}

	// kept0 asked for as a string: FerretDB's own delete matches the
	// type too (it cannot hold both: its unique index sees one spelling).
	n, served, err := m.DeleteIDs(ctx, "shop", "orders", append(escaped, "missing", kept0.Hex(), "YWJj"))
	if err != nil || !served || n != int64(len(escaped)) {
		t.Fatalf("DeleteIDs = %d, %v, %v; want %d, true, nil", n, served, err, len(escaped))
	}
	want := []string{"bson.Binary:" + fmt.Sprint(binary), "bson.ObjectID:" + kept0.String(), "int32:7", "string:keep"}
	if got := ids(); !slices.Equal(got, want) {
		t.Fatalf("left %q, want %q", got, want)
	}
	// An id type it does not key, or a string that is not UTF-8 (JSON
	// would spell it as FerretDB stored another): nothing done, the caller
	// goes through FerretDB.
	for _, id := range []any{int32(7), "a\xff"} {
		if n, served, err := m.DeleteIDs(ctx, "shop", "orders", []any{"keep", id}); served || n != 0 || err != nil {
			t.Fatalf("DeleteIDs with id %q = %d, %v, %v; want 0, false, nil", id, n, served, err)
		}
	}
	if got := ids(); !slices.Equal(got, want) {
		t.Fatalf("an unserved delete changed the collection: %q", got)
	}
	// A deleted id can be inserted again (FerretDB's unique _id index
	// lost the row too) and is found.
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "b<c&d>"}, {Key: "n", Value: 2}}); err != nil {
		t.Fatalf("insert a deleted id again: %v", err)
	}
	var got struct{ N int }
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "b<c&d>"}}).Decode(&got); err != nil || got.N != 2 {
		t.Fatalf("find the id inserted again: %v %+v", err, got)
	}

	// More ids than one statement takes.
	var many []any
	docs = docs[:0]
	for i := range 2500 {
		id := fmt.Sprintf("many-%05d", i)
		many = append(many, id)
		docs = append(docs, bson.D{{Key: "_id", Value: id}})
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	if n, _, err := m.DeleteIDs(ctx, "shop", "orders", many); err != nil || n != int64(len(many)) {
		t.Fatalf("delete 2,500: %d, %v", n, err)
	}
	if c, err := coll.CountDocuments(ctx, bson.D{}); err != nil || c != 5 {
		t.Fatalf("after deleting 2,500: %d documents (%v), want 5", c, err)
	}

	// Nothing to delete where FerretDB has nothing, and no file made.
	if n, served, err := m.DeleteIDs(ctx, "shop", "nosuch", []any{"a"}); n != 0 || !served || err != nil {
		t.Fatalf("missing collection: %d, %v, %v", n, served, err)
	}
	if n, served, err := m.DeleteIDs(ctx, "nodb", "orders", []any{"a"}); n != 0 || !served || err != nil {
		t.Fatalf("missing database: %d, %v, %v", n, served, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "nodb.sqlite")); !os.IsNotExist(err) {
		t.Fatalf("a delete from a missing database made its file: %v", err)
	}

	// The collection dropped, then the whole database (FerretDB deletes its
	// file): nothing to delete; made again, written again: the new table,
	// the new file, is the one deleted from.
	for _, drop := range []struct {
		what string
		drop func(context.Context) error
	}{
		{"collection", func(ctx context.Context) error { return coll.Drop(ctx) }},
		{"database", func(ctx context.Context) error { return coll.Database().Drop(ctx) }},
	} {
		if err := drop.drop(ctx); err != nil {
			t.Fatal(err)
		}
		if n, served, err := m.DeleteIDs(ctx, "shop", "orders", []any{"keep"}); n != 0 || !served || err != nil {
			t.Fatalf("a dropped %s: %d, %v, %v", drop.what, n, served, err)
		}
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "again"}}); err != nil {
			t.Fatal(err)
		}
		if n, _, err := m.DeleteIDs(ctx, "shop", "orders", []any{"again"}); err != nil || n != 1 {
			t.Fatalf("after the %s was dropped and made again: %d, %v", drop.what, n, err)
		}
		if c, err := coll.CountDocuments(ctx, bson.D{}); err != nil || c != 0 {
			t.Fatalf("after the %s was dropped, made again and deleted from: %d documents (%v)", drop.what, c, err)
		}
	}

	// Once stopped, it says so rather than open files.
	_ = client.Disconnect(ctx) // FerretDB waits for open connections
	m.Stop()
	if _, _, err := m.DeleteIDs(ctx, "shop", "orders", []any{"x"}); outage.Find(err) == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("DeleteIDs after Stop: %v, want an outage of the database saying the server stopped", err)
	}
}

// TestEmbeddedMongoLeavesUnaddressableTablesToFerretDB: FerretDB names a
// collection's table in its SQL with Go's quoting, so the table SQLite has
// for a collection whose name holds a backslash is not the name its
// catalogue keeps; beneath FerretDB such a collection is not served (the
// writes go through FerretDB as before), where they failed "no such
// table". A name Go's quoting keeps as it is (non-ASCII) is served.
func TestEmbeddedMongoLeavesUnaddressableTablesToFerretDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, client, _ := startEmbedded(t)
	db := client.Database("shop")
	for name, wantServed := range map[string]bool{`back\slash`: false, "é-日本": true} {
		if _, err := db.Collection(name).InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 1}}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		doc, err := bson.Marshal(bson.D{{Key: "_id", Value: "b"}, {Key: "n", Value: 2}})
		if err != nil {
			t.Fatal(err)
		}
		errs, served, err := m.InsertDocs(ctx, "shop", name, []bson.Raw{doc})
		if err != nil || served != wantServed || (served && (len(errs) != 1 || errs[0] != nil)) {
			t.Fatalf("%s: insert beneath FerretDB: %v served %v (%v), want served %v", name, errs, served, err, wantServed)
		}
		replaced, err := bson.Marshal(bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 3}})
		if err != nil {
			t.Fatal(err)
		}
		matched, served, err := m.ReplaceDoc(ctx, "shop", name, replaced)
		if err != nil || served != wantServed || matched != wantServed {
			t.Fatalf("%s: replace beneath FerretDB: matched %v served %v (%v), want served %v", name, matched, served, err, wantServed)
		}
		n, served, err := m.DeleteIDs(ctx, "shop", name, []any{"a"})
		if err != nil || served != wantServed || (served && n != 1) {
			t.Fatalf("%s: delete beneath FerretDB: %d served %v (%v), want served %v", name, n, served, err, wantServed)
		}
		// Through FerretDB: "a" alone where nothing was served; "b" where
		// it was inserted and "a" deleted.
		if got, err := db.Collection(name).CountDocuments(ctx, bson.D{}); err != nil || got != 1 {
			t.Fatalf("%s: %d documents through FerretDB (%v), want 1", name, got, err)
		}
	}
}
