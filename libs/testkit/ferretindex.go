package testkit

import (
	"context"
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
// at 10 documents, 30 ms at 10,000; with it 0.3 ms at both). FerretDB
// ignores indexes it did not make; dropping a collection drops its table
// and the index with it.
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
	// The tables whose index SQLite does not list: new collections, and
	// all of a database's when its file is new.
	rows, err := c.db.QueryContext(ctx, `SELECT table_name FROM _ferretdb_collections
		WHERE NOT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = table_name || '_am_id')`)
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
		q := quoteIdent(t)
		stmt := fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (_ferretdb_sjson->'$._id')`, quoteIdent(t+"_am_id"), q)
		if _, err := c.db.ExecContext(ctx, stmt); err != nil {
			if noSuchTable(err) {
				continue // dropped meanwhile
			}
			return fmt.Errorf("%s: %w", t, err)
		}
	}
	return nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
