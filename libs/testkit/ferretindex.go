package testkit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver FerretDB's own files are opened with
)

// idIndexInterval is how often the embedded server looks for collections
// created since it last did.
const idIndexInterval = time.Second

// idIndexer gives every collection table of the embedded FerretDB the
// SQLite index its lookups by _id can use. FerretDB v1 finds a document by
// `_ferretdb_sjson->'$._id' = ?`, but indexes `_ferretdb_sjson->"_id"`,
// which SQLite does not match to that predicate: without this index every
// lookup by _id, and every update by _id, scans the table (measured: 0.3 ms
// at 10 documents, 30 ms at 10,000; with it 0.3 ms at both). The index
// replaces FerretDB's own unique index on _id, under its name: the same
// key in the same order, so it keeps _id unique as FerretDB's did, and a
// write maintains one _id index rather than two (earlier versions kept
// FerretDB's and added <table>_am_id beside it; an update of a 2.5 KB
// document took 65 µs with one and 85 µs with both). FerretDB knows its
// indexes by name only (dropping the _id index is refused above it),
// finds a duplicate _id by SQLite's error code, whichever index raises
// it, and drops a collection's indexes with its table.
type idIndexer struct {
	files *sqliteFiles
}

func newIDIndexer(files *sqliteFiles) *idIndexer { return &idIndexer{files: files} }

// run indexes new tables every idIndexInterval until ctx ends.
func (x *idIndexer) run(ctx context.Context) {
	t := time.NewTicker(idIndexInterval)
	defer t.Stop()
	for {
		_ = x.indexAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// indexAll creates the index on every collection table of every database
// file that lacks it, as SQLite's own list of indexes says.
func (x *idIndexer) indexAll(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(x.files.dir, "*.sqlite"))
	if err != nil {
		return err
	}
	x.files.prune() // dropped databases' files
	var errs []error
	for _, f := range files {
		if err := x.indexFile(ctx, f); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("testkit: index _id: %v", errs)
	}
	return nil
}

func (x *idIndexer) indexFile(ctx context.Context, file string) error {
	c, err := x.files.open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // dropped meanwhile
	}
	if err != nil {
		return err
	}
	// The tables whose _id index is not the one lookups use yet: FerretDB's
	// own, as it makes it for a new collection, and those an earlier
	// version gave a second index. A table whose _id index FerretDB has
	// not made yet is left for the next look.
	rows, err := c.db.QueryContext(ctx, `SELECT c.table_name FROM _ferretdb_collections c
		JOIN sqlite_master i ON i.type = 'index' AND i.name = c.table_name || '__id_'
		WHERE instr(i.sql, ?) = 0
		OR EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = c.table_name || '_am_id')`, idIndexKey)
	if err != nil {
		if noSuchTable(err) {
			return nil // a database FerretDB has not set up yet
		}
		return err
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return err
		}
		tables = append(tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, t := range tables {
		q, ix := quoteIdent(t), quoteIdent(t+"__id_")
		_, err := inTx(ctx, c.db, func(tx *sql.Tx) (struct{}, error) {
			for _, stmt := range []string{
				`DROP INDEX IF EXISTS ` + ix,
				fmt.Sprintf(`CREATE UNIQUE INDEX %s ON %s (%s)`, ix, q, idIndexKey),
				`DROP INDEX IF EXISTS ` + quoteIdent(t+"_am_id"),
			} {
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					return struct{}{}, err
				}
			}
			return struct{}{}, nil
		})
		if noSuchTable(err) {
			continue // dropped meanwhile
		}
		if err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
	}
	return nil
}

// idIndexKey is the expression FerretDB's SQLite backend looks documents
// up by: `_ferretdb_sjson->'$._id' = ?`.
const idIndexKey = `_ferretdb_sjson->'$._id'`

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
