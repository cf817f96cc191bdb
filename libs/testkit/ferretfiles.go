package testkit

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// sqliteFiles opens the embedded FerretDB's SQLite files beside it, one
// connection per file: for the _id indexes (idIndexer) and for deletes by
// _id (Mongo.DeleteIDs). Its methods are safe for concurrent use.
type sqliteFiles struct {
	dir      string
	syncMode string // the synchronous pragma FerretDB's own connections use

	mu     sync.Mutex
	dbs    map[string]*sql.DB // guarded by mu: by file path
	tables map[string]string  // guarded by mu: "file\x00collection" → table
	closed bool               // guarded by mu
}

func newSQLiteFiles(dir, syncMode string) *sqliteFiles {
	return &sqliteFiles{dir: dir, syncMode: syncMode, dbs: map[string]*sql.DB{}, tables: map[string]string{}}
}

// errFilesClosed is returned once the server has stopped.
var errFilesClosed = errors.New("testkit: the embedded FerretDB has stopped")

// open returns the connection to file, opening it on first use. It never
// creates the file (mode=rw): a database FerretDB has not made stays
// unmade.
func (f *sqliteFiles) open(file string) (*sql.DB, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errFilesClosed
	}
	if db := f.dbs[file]; db != nil {
		return db, nil
	}
	// FerretDB writes the file too: wait for its locks rather than fail,
	// and commit as it does.
	db, err := sql.Open("sqlite", "file:"+file+"?mode=rw&_pragma=busy_timeout(10000)&_pragma="+f.syncMode)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	f.dbs[file] = db
	return db, nil
}

// table returns the SQLite table FerretDB keeps collection coll of file
// in, or "" if FerretDB has no such collection.
func (f *sqliteFiles) table(ctx context.Context, db *sql.DB, file, coll string) (string, error) {
	key := file + "\x00" + coll
	f.mu.Lock()
	t, ok := f.tables[key]
	f.mu.Unlock()
	if ok {
		return t, nil
	}
	err := db.QueryRowContext(ctx, `SELECT table_name FROM _ferretdb_collections WHERE name = ?`, coll).Scan(&t)
	if errors.Is(err, sql.ErrNoRows) || (err != nil && strings.Contains(err.Error(), "no such table")) {
		return "", nil // not created yet: nothing to delete, and nothing kept
	}
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	f.tables[key] = t
	f.mu.Unlock()
	return t, nil
}

// forget drops what table learned of coll in file (its table went away).
func (f *sqliteFiles) forget(file, coll string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.tables, file+"\x00"+coll)
}

func (f *sqliteFiles) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for file, db := range f.dbs {
		_ = db.Close()
		delete(f.dbs, file)
	}
}

// maxDeleteIDs bounds the ids of one DELETE statement (SQLite's limit on a
// statement's parameters is 32,766).
const maxDeleteIDs = 1000

// DeleteIDs implements mongox.IDDeleter: it deletes the documents of
// collection coll in database db whose _id is one of ids from the SQLite
// table FerretDB keeps them in, in one transaction, by the expression
// index of the _id (idIndexer), as FerretDB's own delete does once it has
// found the documents; FerretDB reads and parses each document of a
// delete command first, in a transaction per statement. It keys the ids
// as FerretDB does (a string or an ObjectID, in FerretDB's JSON) and checks
// the stored _id's type too, so a string id never deletes a document whose
// ObjectID spells the same. Other id types are not served. FerretDB keeps
// no copy of a collection's documents, so it reads what is left.
func (m *Mongo) DeleteIDs(ctx context.Context, db, coll string, ids []any) (int64, bool, error) {
	keys := make([]any, len(ids))
	types := make([]string, len(ids))
	for i, id := range ids {
		var s string
		switch v := id.(type) {
		case string:
			s, types[i] = v, "string"
		case bson.ObjectID:
			s, types[i] = v.Hex(), "objectId"
		default:
			return 0, false, nil
		}
		k, err := json.Marshal(s) // FerretDB's sjson: encoding/json's escaping included
		if err != nil {
			return 0, false, nil
		}
		keys[i] = string(k)
	}
	if len(ids) == 0 {
		return 0, true, nil
	}
	file := filepath.Join(m.files.dir, db+".sqlite")
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return 0, true, nil // no such database
	}
	conn, err := m.files.open(file)
	if err != nil {
		return 0, true, err
	}
	for attempt := 0; ; attempt++ {
		t, err := m.files.table(ctx, conn, file, coll)
		if err != nil || t == "" {
			return 0, true, err
		}
		n, err := deleteRows(ctx, conn, t, keys, types)
		if err != nil && attempt == 0 && strings.Contains(err.Error(), "no such table") {
			m.files.forget(file, coll) // dropped, maybe made again: look again
			continue
		}
		return n, true, err
	}
}

// deleteRows deletes from table the rows whose _id is one of keys (JSON),
// each of the type at the same index of types, in one transaction.
func deleteRows(ctx context.Context, db *sql.DB, table string, keys []any, types []string) (int64, error) {
	byType := map[string][]any{}
	for i, k := range keys {
		byType[types[i]] = append(byType[types[i]], k)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	var deleted int64
	for typ, keys := range byType {
		for start := 0; start < len(keys); start += maxDeleteIDs {
			chunk := keys[start:min(start+maxDeleteIDs, len(keys))]
			// FerretDB finds a row by this expression (`->` gives the
			// _id as JSON); its document's schema says the _id's type.
			q := fmt.Sprintf(`DELETE FROM %s WHERE _ferretdb_sjson->'$._id' IN (?%s) AND _ferretdb_sjson->>'$."$s".p._id.t' = ?`,
				quoteIdent(table), strings.Repeat(", ?", len(chunk)-1))
			res, err := tx.ExecContext(ctx, q, append(chunk[:len(chunk):len(chunk)], typ)...)
			if err != nil {
				return 0, err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return 0, err
			}
			deleted += n
		}
	}
	return deleted, tx.Commit()
}
