package testkit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync/atomic"
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
	// beforeRebuild, if set, is called between the look for tables to
	// index and each table's transaction (tests).
	beforeRebuild atomic.Pointer[func(table string)]
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
	// The tables whose _id index is to be made again (staleIDIndex).
	rows, err := c.db.QueryContext(ctx, `SELECT table_name FROM _ferretdb_collections WHERE `+
		fmt.Sprintf(staleIDIndex, "table_name"), idIndexKey)
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
		if f := x.beforeRebuild.Load(); f != nil {
			(*f)(t)
		}
		q, ix := quoteIdent(t), quoteIdent(t+"__id_")
		_, err := inTx(ctx, c.db, func(tx *sql.Tx) (struct{}, error) {
			// Asked again in the transaction (which holds the file's write
			// lock): meanwhile the collection may have been dropped and
			// made again under the same table name, and FerretDB may be
			// between creating the table and its _id index, which it
			// creates by name and fails to (dropping the new collection)
			// if this made it first.
			var stale bool
			if err := tx.QueryRowContext(ctx, `SELECT `+fmt.Sprintf(staleIDIndex, "?2"), idIndexKey, t).Scan(&stale); err != nil || !stale {
				return struct{}{}, err
			}
			for _, stmt := range []string{
				`DROP INDEX ` + ix,
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

// staleIDIndex is the condition on table %[1]s under which its _id index
// is to be made again, with idIndexKey as parameter 1: FerretDB has made
// its own (<table>__id_, which a table has once FerretDB has finished
// making the collection) and it is not on idIndexKey (FerretDB's, as it
// makes it for a new collection) or an earlier version's second index is
// there too.
const staleIDIndex = `EXISTS (SELECT 1 FROM sqlite_master i
		WHERE i.type = 'index' AND i.tbl_name = %[1]s AND i.name = %[1]s || '__id_'
		AND (instr(i.sql, ?1) = 0 OR EXISTS (SELECT 1 FROM sqlite_master a
			WHERE a.type = 'index' AND a.tbl_name = %[1]s AND a.name = %[1]s || '_am_id')))`

// idIndexKey is the expression FerretDB's SQLite backend looks documents
// up by: `_ferretdb_sjson->'$._id' = ?`.
const idIndexKey = `_ferretdb_sjson->'$._id'`

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
