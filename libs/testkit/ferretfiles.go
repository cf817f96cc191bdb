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
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/outage"
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
	closed bool                   // guarded by mu
}

func newSQLiteFiles(dir, syncMode string) *sqliteFiles {
	return &sqliteFiles{dir: dir, syncMode: syncMode, dbs: map[string]*sql.DB{}, infos: map[string]os.FileInfo{}}
}

// errFilesClosed is returned once the server has stopped: the database is
// unavailable, as the driver says once it cannot reach the server.
var errFilesClosed = &outage.Error{Dependency: outage.Mongo, Err: errors.New("testkit: the embedded FerretDB has stopped")}

// open returns the connection to file, opening it on first use, and again
// when the file is no longer the one it opened (FerretDB deletes a dropped
// database's file, and makes a new one if the database is written again:
// writes through the old connection would go to the deleted file). It
// never creates the file (mode=rw): a database FerretDB has not made stays
// unmade, and the connection to a file that is gone is closed.
func (f *sqliteFiles) open(file string) (*sql.DB, error) {
	info, err := os.Stat(file)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errFilesClosed
	}
	if db := f.dbs[file]; db != nil && (err != nil || !os.SameFile(info, f.infos[file])) {
		f.drop(file)
	}
	if err != nil {
		return nil, err
	}
	if db := f.dbs[file]; db != nil {
		return db, nil
	}
	// FerretDB writes the file too: wait for its locks rather than fail,
	// and commit as it does.
	// A transaction takes the write lock as it begins (BEGIN IMMEDIATE):
	// one that reads before it writes could not otherwise take it once
	// FerretDB has committed since its read.
	db, err := sql.Open("sqlite", "file:"+file+"?mode=rw&_txlock=immediate&_pragma=busy_timeout(10000)&_pragma="+f.syncMode)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	f.dbs[file], f.infos[file] = db, info
	return db, nil
}

// prune closes the connections to files that are gone: FerretDB deletes
// a dropped database's file.
func (f *sqliteFiles) prune() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for file := range f.dbs {
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			f.drop(file)
		}
	}
}

// drop closes and forgets the connection to file; the caller holds f.mu.
func (f *sqliteFiles) drop(file string) {
	_ = f.dbs[file].Close()
	delete(f.dbs, file)
	delete(f.infos, file)
}

// database returns the connection to the file of FerretDB's database db
// (fs.ErrNotExist if FerretDB has not made it).
func (f *sqliteFiles) database(db string) (*sql.DB, error) {
	return f.open(filepath.Join(f.dir, db+".sqlite"))
}

// table is where FerretDB keeps a collection.
type table struct {
	name   string // of the SQLite table; "" if FerretDB has no such collection
	capped bool   // its rows carry a record id FerretDB numbers itself
	ready  bool   // FerretDB has finished making it: its unique _id index is listed
}

// lookupTable reads, in tx (the write's own transaction, so that nothing
// changes it before the write), where FerretDB keeps collection coll; a
// collection FerretDB has not made has the name "".
func lookupTable(ctx context.Context, tx *sql.Tx, coll string) (table, error) {
	var t table
	err := tx.QueryRowContext(ctx, `SELECT table_name, coalesce(json_extract(settings, '$.cappedSize'), 0) > 0,
		EXISTS (SELECT 1 FROM json_each(settings, '$.indexes') WHERE json_extract(value, '$.name') = '_id_')
		FROM _ferretdb_collections WHERE name = ?`, coll).Scan(&t.name, &t.capped, &t.ready)
	if errors.Is(err, sql.ErrNoRows) || noSuchTable(err) {
		return table{}, nil // not made yet
	}
	return t, err
}

// noSuchTable reports whether err is SQLite's about a table that is not
// there (a database FerretDB has not set up, a collection just dropped).
func noSuchTable(err error) bool { return err != nil && strings.Contains(err.Error(), "no such table") }

func (f *sqliteFiles) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for file := range f.dbs {
		f.drop(file)
	}
}

// maxDocumentSize is the largest document FerretDB says it takes
// (maxBsonObjectSize): the driver refuses a larger one before sending it.
const maxDocumentSize = 16 << 20

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
	if len(ids) == 0 {
		return 0, true, nil
	}
	keys := make([]any, len(ids))
	types := make([]string, len(ids))
	for i, id := range ids {
		var s string
		switch v := id.(type) {
		case string:
			if !utf8.ValidString(v) {
				// json.Marshal would make it U+FFFD, as FerretDB stored
				// it, where FerretDB's own delete compares the bytes.
				return 0, false, nil
			}
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
	conn, err := m.files.database(db)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, true, nil // no such database
	}
	if err != nil {
		return 0, true, err
	}
	n, err := inTx(ctx, conn, func(tx *sql.Tx) (int64, error) {
		t, err := lookupTable(ctx, tx, coll)
		if err != nil || t.name == "" {
			return 0, err // no such collection: nothing to delete
		}
		return deleteRows(ctx, tx, t.name, keys, types)
	})
	return n, true, err
}

// InsertDocs implements mongox.DocInserter: it inserts docs into the
// SQLite table FerretDB keeps collection coll of database db in, each
// document by a statement of its own in one transaction, written as
// FerretDB's own insert writes it (encodeSJSON): FerretDB decodes each
// command's documents into its own types and encodes them again. An _id
// already taken fails that document alone (mongox.ErrDuplicate, from
// FerretDB's unique _id index). It does not serve a document FerretDB
// would change or refuse on the way in, a collection or database FerretDB
// has not made yet, or not finished making (it makes them, with their
// indexes), a capped one, or one larger than FerretDB takes: those go
// through FerretDB.
func (m *Mongo) InsertDocs(ctx context.Context, db, coll string, docs []bson.Raw) ([]error, bool, error) {
	rows := make([]any, len(docs))
	for i, d := range docs {
		if len(d) > maxDocumentSize {
			return nil, false, nil // the driver refuses it
		}
		b, ok := encodeSJSON(d)
		if !ok {
			return nil, false, nil
		}
		rows[i] = string(b)
	}
	conn, err := m.files.database(db)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil // FerretDB makes the database
	}
	if err != nil {
		return nil, true, err
	}
	served := true
	errs, err := inTx(ctx, conn, func(tx *sql.Tx) ([]error, error) {
		t, err := lookupTable(ctx, tx, coll)
		if err != nil {
			return nil, err
		}
		if t.name == "" || t.capped || !t.ready {
			served = false // FerretDB makes it (or numbers its rows)
			return nil, nil
		}
		return insertRows(ctx, tx, t.name, rows)
	})
	if !served {
		return nil, false, nil
	}
	return errs, true, err
}

// inTx runs write in a transaction of db and commits it if write succeeds.
func inTx[T any](ctx context.Context, db *sql.DB, write func(*sql.Tx) (T, error)) (T, error) {
	var zero T
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return zero, err
	}
	defer func() { _ = tx.Rollback() }()
	v, err := write(tx)
	if err != nil {
		return zero, err
	}
	if err := tx.Commit(); err != nil {
		return zero, err
	}
	return v, nil
}

// insertRows inserts each of rows (sjson) into table in tx and returns
// each one's outcome: a row that a unique index refuses (its _id taken)
// fails alone, as a failed statement leaves the transaction.
func insertRows(ctx context.Context, tx *sql.Tx, table string, rows []any) ([]error, error) {
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
	return errs, nil
}

// deleteRows deletes from table in tx the rows whose _id is one of keys
// (JSON), each of the type at the same index of types.
func deleteRows(ctx context.Context, tx *sql.Tx, table string, keys []any, types []string) (int64, error) {
	byType := map[string][]any{}
	for i, k := range keys {
		byType[types[i]] = append(byType[types[i]], k)
	}
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
	return deleted, nil
}
