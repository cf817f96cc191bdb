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
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/agentmesh/agentmesh/libs/mongox"
)

// sqliteFiles opens the embedded FerretDB's SQLite files beside it, one
// connection per file: for the _id indexes (idIndexer), deletes by _id
// (Mongo.DeleteIDs) and inserts (Mongo.InsertDocs). Its methods are safe
// for concurrent use.
type sqliteFiles struct {
	dir      string
	syncMode string // the synchronous pragma FerretDB's own connections use

	mu     sync.Mutex
	dbs    map[string]*sql.DB     // guarded by mu: by file path
	infos  map[string]os.FileInfo // guarded by mu: each of dbs' file as opened
	tables map[string]table       // guarded by mu: by "file\x00collection"
	closed bool                   // guarded by mu
}

func newSQLiteFiles(dir, syncMode string) *sqliteFiles {
	return &sqliteFiles{dir: dir, syncMode: syncMode, dbs: map[string]*sql.DB{}, infos: map[string]os.FileInfo{}, tables: map[string]table{}}
}

// errFilesClosed is returned once the server has stopped.
var errFilesClosed = errors.New("testkit: the embedded FerretDB has stopped")

// open returns the connection to file, opening it on first use, and again
// when the file is no longer the one it opened (FerretDB deletes a dropped
// database's file, and makes a new one if the database is written again:
// writes through the old connection would go to the deleted file). It
// never creates the file (mode=rw): a database FerretDB has not made stays
// unmade.
func (f *sqliteFiles) open(file string) (*sql.DB, error) {
	info, err := os.Stat(file)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errFilesClosed
	}
	if db := f.dbs[file]; db != nil {
		if os.SameFile(info, f.infos[file]) {
			return db, nil
		}
		_ = db.Close()
		delete(f.dbs, file)
		for k := range f.tables {
			if strings.HasPrefix(k, file+"\x00") {
				delete(f.tables, k)
			}
		}
	}
	// FerretDB writes the file too: wait for its locks rather than fail,
	// and commit as it does.
	db, err := sql.Open("sqlite", "file:"+file+"?mode=rw&_pragma=busy_timeout(10000)&_pragma="+f.syncMode)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	f.dbs[file], f.infos[file] = db, info
	return db, nil
}

// table is where FerretDB keeps a collection.
type table struct {
	name   string // of the SQLite table; "" if FerretDB has no such collection
	capped bool   // its rows carry a record id FerretDB numbers itself
}

// table returns the SQLite table FerretDB keeps collection coll of file
// in (its name "" if FerretDB has no such collection).
func (f *sqliteFiles) table(ctx context.Context, db *sql.DB, file, coll string) (table, error) {
	key := file + "\x00" + coll
	f.mu.Lock()
	t, ok := f.tables[key]
	f.mu.Unlock()
	if ok {
		return t, nil
	}
	err := db.QueryRowContext(ctx, `SELECT table_name, coalesce(json_extract(settings, '$.cappedSize'), 0) > 0 FROM _ferretdb_collections WHERE name = ?`, coll).Scan(&t.name, &t.capped)
	if errors.Is(err, sql.ErrNoRows) || (err != nil && strings.Contains(err.Error(), "no such table")) {
		return table{}, nil // not created yet: nothing to delete, and nothing kept
	}
	if err != nil {
		return table{}, err
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
	conn, err := m.files.open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, true, nil // no such database
	}
	if err != nil {
		return 0, true, err
	}
	for attempt := 0; ; attempt++ {
		t, err := m.files.table(ctx, conn, file, coll)
		if err != nil || t.name == "" {
			return 0, true, err
		}
		n, err := deleteRows(ctx, conn, t.name, keys, types)
		if err != nil && attempt == 0 && strings.Contains(err.Error(), "no such table") {
			m.files.forget(file, coll) // dropped, maybe made again: look again
			continue
		}
		return n, true, err
	}
}

// InsertDocs implements mongox.DocInserter: it inserts docs into the
// SQLite table FerretDB keeps collection coll of database db in, each
// document by a statement of its own in one transaction, written as
// FerretDB's own insert writes it (encodeSJSON): FerretDB decodes each
// command's documents into its own types and encodes them again. An _id
// already taken fails that document alone (mongox.ErrDuplicate, from
// FerretDB's unique _id index). It does not serve a document FerretDB
// would change or refuse on the way in, a collection or database FerretDB
// has not made yet (it makes them, with their indexes) or a capped one:
// those go through FerretDB.
func (m *Mongo) InsertDocs(ctx context.Context, db, coll string, docs []bson.Raw) ([]error, bool, error) {
	rows := make([]any, len(docs))
	for i, d := range docs {
		b, ok := encodeSJSON(d)
		if !ok {
			return nil, false, nil
		}
		rows[i] = string(b)
	}
	file := filepath.Join(m.files.dir, db+".sqlite")
	conn, err := m.files.open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil // FerretDB makes the database
	}
	if err != nil {
		return nil, true, err
	}
	for attempt := 0; ; attempt++ {
		t, err := m.files.table(ctx, conn, file, coll)
		if err != nil {
			return nil, true, err
		}
		if t.name == "" || t.capped {
			return nil, false, nil
		}
		errs, err := insertRows(ctx, conn, t.name, rows)
		if err != nil && attempt == 0 && strings.Contains(err.Error(), "no such table") {
			m.files.forget(file, coll)
			continue
		}
		return errs, true, err
	}
}

// insertRows inserts each of rows (sjson) into table in one transaction
// and returns each one's outcome; a row whose _id is taken fails alone.
func insertRows(ctx context.Context, db *sql.DB, table string, rows []any) ([]error, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	stmt, err := tx.PrepareContext(ctx, fmt.Sprintf(`INSERT INTO %s (_ferretdb_sjson) VALUES (?)`, quoteIdent(table)))
	if err != nil {
		return nil, err
	}
	defer stmt.Close()
	errs := make([]error, len(rows))
	for i, r := range rows {
		if _, err := stmt.ExecContext(ctx, r); err != nil {
			var se *sqlite.Error
			if !errors.As(err, &se) || se.Code() != sqlite3.SQLITE_CONSTRAINT_UNIQUE {
				return nil, err
			}
			errs[i] = fmt.Errorf("%w: %w", mongox.ErrDuplicate, err)
		}
	}
	return errs, tx.Commit()
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
