package testkit_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/testkit"
)

// TestEmbeddedMongoIndexesIDLookups: the embedded FerretDB gives every
// collection the SQLite index its lookups by _id can use (SQLite's own plan
// says SEARCH ... USING INDEX instead of SCAN), for collections created
// before and after it started, and documents are found as before.
func TestEmbeddedMongoIndexesIDLookups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, client, dir := startEmbedded(t)
	db := client.Database("shop")
	for _, name := range []string{"orders", "odd.name-x"} {
		if _, err := db.Collection(name).InsertMany(ctx, []any{bson.M{"_id": "a", "n": 1}, bson.M{"_id": "b", "n": 2}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.IndexIDs(ctx); err != nil {
		t.Fatal(err)
	}
	sdb, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.sqlite")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	plan := func(collection string) string {
		var table string
		if err := sdb.QueryRow(`SELECT table_name FROM _ferretdb_collections WHERE name = ?`, collection).Scan(&table); err != nil {
			t.Fatal(err)
		}
		// The statement FerretDB's SQLite backend runs for {_id: x}.
		rows, err := sdb.Query(`EXPLAIN QUERY PLAN SELECT _ferretdb_sjson FROM "`+strings.ReplaceAll(table, `"`, `""`)+`" WHERE _ferretdb_sjson->'$._id' = ?`, "a")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			out = append(out, detail)
		}
		return strings.Join(out, "; ")
	}
	for _, name := range []string{"orders", "odd.name-x"} {
		if p := plan(name); !strings.Contains(p, "USING INDEX") {
			t.Fatalf("%s: plan %q, want an index search", name, p)
		}
	}
	// A collection created later is indexed by the server on its own.
	if _, err := db.Collection("later").InsertOne(ctx, bson.M{"_id": "a"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return strings.Contains(plan("later"), "USING INDEX") }, "a new collection was not indexed")
	var got struct{ N int }
	if err := db.Collection("orders").FindOne(ctx, bson.M{"_id": "b"}).Decode(&got); err != nil || got.N != 2 {
		t.Fatalf("find by _id after indexing: %v %+v", err, got)
	}
}

// startEmbedded starts a server of the test's own on a directory it
// returns, with a client: t.Cleanup disconnects it and stops the server.
func startEmbedded(t *testing.T) (*testkit.Mongo, *mongo.Client, string) {
	t.Helper()
	dir := t.TempDir()
	m, client := testkit.StartPrivate(t, dir)
	return m, client, dir
}

// TestRoundTripsCountsCommands: the counted client sees each command once,
// by command and collection, and housekeeping is left out.
func TestRoundTripsCountsCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, rt := testkit.MongoDBCounted(t)
	c := db.Collection("things")
	if _, err := c.InsertOne(ctx, bson.M{"_id": "a"}); err != nil {
		t.Fatal(err)
	}
	_ = c.FindOne(ctx, bson.M{"_id": "a"}).Err()
	_ = c.FindOne(ctx, bson.M{"_id": "b"}).Err()
	if got := rt.String(); got != "find things=2 insert things=1" || rt.Total() != 3 {
		t.Fatalf("counted %q (%d)", got, rt.Total())
	}
	rt.Reset()
	if rt.Total() != 0 {
		t.Fatal("Reset kept counts")
	}
}
