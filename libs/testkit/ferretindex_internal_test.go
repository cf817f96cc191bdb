package testkit

import (
	"context"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestIDIndexerLeavesACollectionFerretDBIsMaking: between the indexer's
// look for tables and its transaction, a collection may be dropped and
// made again under the same table name, FerretDB between creating the
// table and creating its _id index by name; the indexer must not make
// that index first (FerretDB's creation would fail, "already exists", and
// drop the new collection), and converts it once FerretDB has made it.
func TestIDIndexerLeavesACollectionFerretDBIsMaking(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	m, client := StartPrivate(t, dir)
	if _, err := client.Database("shop").Collection("c").InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}}); err != nil {
		t.Fatal(err)
	}
	rw := openDBFile(t, dir, "shop", "mode=rw&_pragma=busy_timeout(10000)")
	table := tableName(t, rw, "c")
	ix, q := quoteIdent(table+"__id_"), quoteIdent(table)
	exec := func(stmt string) error {
		_, err := rw.Exec(stmt)
		return err
	}
	// FerretDB's own index, as it makes it, for the indexer to find.
	if err := m.ids.indexAll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{`DROP INDEX ` + ix, `CREATE UNIQUE INDEX ` + ix + ` ON ` + q + ` (_ferretdb_sjson->"_id")`} {
		if err := exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	fired := false
	hook := func(tbl string) {
		if tbl != table {
			return
		}
		// The collection made again: its table is there, its _id index
		// not yet.
		once.Do(func() {
			fired = true
			if err := exec(`DROP INDEX ` + ix); err != nil {
				t.Error(err)
			}
		})
	}
	m.ids.beforeRebuild.Store(&hook)
	if err := m.ids.indexAll(ctx); err != nil {
		t.Fatal(err)
	}
	once.Do(func() {}) // the background look may have fired it
	if !fired {
		t.Fatal("the indexer did not find FerretDB's index to make again")
	}
	// FerretDB goes on making the collection: its index by its name.
	if err := exec(`CREATE UNIQUE INDEX ` + ix + ` ON ` + q + ` (_ferretdb_sjson->"_id")`); err != nil {
		t.Fatalf("FerretDB's _id index after the indexer's look: %v", err)
	}
	if err := m.ids.indexAll(ctx); err != nil {
		t.Fatal(err)
	}
	var sqlText string
	if err := rw.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?`, table+"__id_").Scan(&sqlText); err != nil {
		t.Fatal(err)
	}
	if want := `CREATE UNIQUE INDEX ` + ix + ` ON ` + q + ` (` + idIndexKey + `)`; sqlText != want {
		t.Fatalf("the index once FerretDB made it: %s, want %s", sqlText, want)
	}
}
