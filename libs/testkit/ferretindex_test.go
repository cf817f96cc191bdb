package testkit_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/mongox"
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
	checkIDIndexes(t, m, db, sdb, plan)
}

// checkIDIndexes: the index lookups use is FerretDB's own _id index, made
// again on their key under its name: one _id index a table (a write
// maintains each), still unique, as FerretDB's other indexes are left
// alone; a table an earlier version gave a second _id index
// (<table>_am_id) beside FerretDB's is brought to the same.
func checkIDIndexes(t *testing.T, m *testkit.Mongo, db *mongo.Database, sdb *sql.DB, plan func(string) string) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Collection("orders").Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "n", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	tableOf := func(collection string) string {
		var table string
		if err := sdb.QueryRow(`SELECT table_name FROM _ferretdb_collections WHERE name = ?`, collection).Scan(&table); err != nil {
			t.Fatal(err)
		}
		return table
	}
	indexes := func(collection string) []string {
		table := tableOf(collection)
		rows, err := sdb.Query(`SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? ORDER BY name`, table)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var name, sqlText string
			if err := rows.Scan(&name, &sqlText); err != nil {
				t.Fatal(err)
			}
			out = append(out, strings.ReplaceAll(strings.TrimPrefix(name, table), table, "T")+": "+strings.ReplaceAll(sqlText, table, "T"))
		}
		return out
	}
	want := []string{`__id_: CREATE UNIQUE INDEX "T__id_" ON "T" (_ferretdb_sjson->'$._id')`}
	for _, name := range []string{"later", "odd.name-x"} {
		if got := indexes(name); !slices.Equal(got, want) {
			t.Errorf("%s: indexes %q, want %q", name, got, want)
		}
	}
	if got := indexes("orders"); len(got) != 2 || got[0] != want[0] || !strings.HasPrefix(got[1], "_n_1: ") {
		t.Errorf("orders: indexes %q, want %q and FerretDB's n_1", got, want)
	}
	// Still unique, through FerretDB and beneath it.
	_, err := db.Collection("orders").InsertOne(ctx, bson.M{"_id": "a", "n": 3})
	if !mongo.IsDuplicateKeyError(err) {
		t.Fatalf("a second _id a through FerretDB: %v, want a duplicate key error", err)
	}
	doc, err := bson.Marshal(bson.D{{Key: "_id", Value: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	errs, done, err := m.InsertDocs(ctx, "shop", "orders", []bson.Raw{doc})
	if err != nil || !done || len(errs) != 1 || !errors.Is(errs[0], mongox.ErrDuplicate) {
		t.Fatalf("a second _id b beneath FerretDB: %v %v %v, want a duplicate", errs, done, err)
	}

	// A table as an earlier version left it: FerretDB's index on its own
	// key, and a second one for lookups.
	rw, err := sql.Open("sqlite", "file:"+sdbFile(t, sdb)+"?mode=rw&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	table := tableOf("later")
	for _, stmt := range []string{
		`DROP INDEX "` + table + `__id_"`,
		`CREATE UNIQUE INDEX "` + table + `__id_" ON "` + table + `" (_ferretdb_sjson->"_id")`,
		`CREATE INDEX "` + table + `_am_id" ON "` + table + `" (_ferretdb_sjson->'$._id')`,
	} {
		if _, err := rw.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.IndexIDs(ctx); err != nil {
		t.Fatal(err)
	}
	if got := indexes("later"); !slices.Equal(got, want) {
		t.Errorf("an earlier version's table: indexes %q, want %q", got, want)
	}
	if p := plan("later"); !strings.Contains(p, "USING INDEX") {
		t.Errorf("an earlier version's table: plan %q, want an index search", p)
	}
	if n, err := db.Collection("later").CountDocuments(ctx, bson.M{"_id": "a"}); err != nil || n != 1 {
		t.Errorf("an earlier version's table: %d documents a (%v), want 1", n, err)
	}
}

// sdbFile is the file sdb has open.
func sdbFile(t *testing.T, sdb *sql.DB) string {
	t.Helper()
	var seq int
	var name, file string
	if err := sdb.QueryRow(`PRAGMA database_list`).Scan(&seq, &name, &file); err != nil {
		t.Fatal(err)
	}
	return file
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
