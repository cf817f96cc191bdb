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
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	"go.mongodb.org/mongo-driver/v2/bson"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/agentmesh/agentmesh/libs/jsonstr"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/outage"
)

// sqliteFiles opens the embedded FerretDB's SQLite files beside it, one
// connection per file: for the _id indexes (idIndexer), deletes by _id
// (Mongo.DeleteIDs), inserts (Mongo.InsertDocs) and replacements by _id
// (Mongo.ReplaceDoc). Its methods are safe
// for concurrent use.
type sqliteFiles struct {
	dir      string
	syncMode string // the synchronous pragma FerretDB's own connections use

	mu     sync.Mutex
	dbs    map[string]*fileConn   // guarded by mu: by file path
	infos  map[string]os.FileInfo // guarded by mu: each of dbs' file as opened
	closed bool                   // guarded by mu
}

func newSQLiteFiles(dir, syncMode string) *sqliteFiles {
	return &sqliteFiles{dir: dir, syncMode: syncMode, dbs: map[string]*fileConn{}, infos: map[string]os.FileInfo{}}
}

// fileConn is the connection to one of FerretDB's files, with the
// statements prepared on it and what it last read of its collections.
type fileConn struct {
	db *sql.DB // one connection

	mu     sync.Mutex
	stmts  map[string]*sql.Stmt // guarded by mu: by query
	tables map[string]tableRow  // guarded by mu: by collection, as last read
}

// tableRow is a collection's row of FerretDB's catalogue, as read, and
// what it says.
type tableRow struct {
	name, settings string
	t              table
}

// prepared returns query prepared on c, preparing it on first use. The
// caller is not in a transaction of c (its one connection would be
// taken).
func (c *fileConn) prepared(ctx context.Context, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	st := c.stmts[query]
	c.mu.Unlock()
	if st != nil {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev := c.stmts[query]; prev != nil {
		_ = st.Close()
		return prev, nil
	}
	c.stmts[query] = st
	return st, nil
}

// lastTable is the table collection coll was in when c last looked.
func (c *fileConn) lastTable(coll string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tables[coll].name
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
func (f *sqliteFiles) open(file string) (*fileConn, error) {
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
	c := &fileConn{db: db, stmts: map[string]*sql.Stmt{}, tables: map[string]tableRow{}}
	f.dbs[file], f.infos[file] = c, info
	return c, nil
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
	_ = f.dbs[file].db.Close() // and the statements prepared on it
	delete(f.dbs, file)
	delete(f.infos, file)
}

// database returns the connection to the file of FerretDB's database db
// (fs.ErrNotExist if FerretDB has not made it).
func (f *sqliteFiles) database(db string) (*fileConn, error) {
	return f.open(filepath.Join(f.dir, db+".sqlite"))
}

// table is where FerretDB keeps a collection.
type table struct {
	name   string // of the SQLite table; "" if FerretDB has no such collection
	capped bool   // its rows carry a record id FerretDB numbers itself
	ready  bool   // FerretDB has finished making it: its unique _id index is listed
	// addressable: the name reads the same quoted as FerretDB quotes it in
	// its SQL (Go's %q) and as SQL quotes it (quoteIdent). FerretDB's
	// catalogue keeps the collection's table name as it is, but the table
	// SQLite has is named by what the quoting made of it: for a name with
	// a backslash or a character Go escapes, another name. Only
	// addressable tables are written beneath FerretDB.
	addressable bool
}

// writable reports whether documents may be written into t beneath
// FerretDB: it holds the collection (FerretDB makes one that is missing,
// with its indexes), FerretDB has finished making it, and it is not capped
// (FerretDB numbers a capped collection's rows itself).
func (t table) writable() bool { return t.name != "" && t.addressable && t.ready && !t.capped }

// lookupQuery reads a collection's row of FerretDB's catalogue.
const lookupQuery = `SELECT table_name, settings FROM _ferretdb_collections WHERE name = ?`

// lookupTable reads, in tx (the write's own transaction, so that nothing
// changes it before the write), where FerretDB keeps collection coll; a
// collection FerretDB has not made has the name "". lookup is lookupQuery
// prepared on c, or nil. The settings are parsed again only when they
// changed since c last read them.
func (c *fileConn) lookupTable(ctx context.Context, tx *sql.Tx, lookup *sql.Stmt, coll string) (table, error) {
	var row *sql.Row
	if lookup != nil {
		row = tx.StmtContext(ctx, lookup).QueryRowContext(ctx, coll)
	} else {
		row = tx.QueryRowContext(ctx, lookupQuery, coll)
	}
	var name, settings string
	err := row.Scan(&name, &settings)
	if errors.Is(err, sql.ErrNoRows) || noSuchTable(err) {
		return table{}, nil // not made yet
	}
	if err != nil {
		return table{}, err
	}
	c.mu.Lock()
	last, ok := c.tables[coll]
	c.mu.Unlock()
	if ok && last.name == name && last.settings == settings {
		return last.t, nil
	}
	var parsed struct {
		CappedSize float64 `json:"cappedSize"`
		Indexes    []struct {
			Name string `json:"name"`
		} `json:"indexes"`
	}
	if err := json.Unmarshal([]byte(settings), &parsed); err != nil {
		return table{}, fmt.Errorf("testkit: the settings of collection %s: %w", coll, err)
	}
	t := table{name: name, capped: parsed.CappedSize > 0, addressable: strconv.Quote(name) == quoteIdent(name)}
	for _, ix := range parsed.Indexes {
		t.ready = t.ready || ix.Name == "_id_"
	}
	c.mu.Lock()
	c.tables[coll] = tableRow{name: name, settings: settings, t: t}
	c.mu.Unlock()
	return t, nil
}

// inTable runs write in a transaction of c, given where FerretDB keeps
// collection coll (read in that transaction: lookupTable) and, when query
// is set and the collection found, query(its table) prepared: prepared on
// c, for the table the collection was in last time, before the
// transaction begins (c has one connection), else for this transaction.
func inTable[T any](ctx context.Context, c *fileConn, coll string, query func(table string) string,
	write func(tx *sql.Tx, t table, stmt *sql.Stmt) (T, error),
) (T, error) {
	// Unprepared where FerretDB has not set the file up yet.
	lookup, _ := c.prepared(ctx, lookupQuery)
	guess := c.lastTable(coll)
	var pre *sql.Stmt
	if query != nil && guess != "" {
		pre, _ = c.prepared(ctx, query(guess)) // the table may be gone
	}
	return inTx(ctx, c.db, func(tx *sql.Tx) (T, error) {
		var zero T
		t, err := c.lookupTable(ctx, tx, lookup, coll)
		if err != nil {
			return zero, err
		}
		var st *sql.Stmt
		if query != nil && t.name != "" && t.addressable {
			if t.name == guess && pre != nil {
				st = tx.StmtContext(ctx, pre)
			} else if st, err = tx.PrepareContext(ctx, query(t.name)); err != nil {
				return zero, err
			}
			defer st.Close()
		}
		return write(tx, t, st)
	})
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
// ObjectID spells the same. Other id types, and a collection whose table
// is not addressable (table), are not served. FerretDB keeps
// no copy of a collection's documents, so it reads what is left.
func (m *Mongo) DeleteIDs(ctx context.Context, db, coll string, ids []any) (int64, bool, error) {
	if len(ids) == 0 {
		return 0, true, nil
	}
	keys := make([]any, len(ids))
	types := make([]string, len(ids))
	for i, id := range ids {
		k, typ, ok := idKey(id)
		if !ok {
			return 0, false, nil
		}
		keys[i], types[i] = k, typ
	}
	conn, err := m.files.database(db)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, true, nil // no such database
	}
	if err != nil {
		return 0, true, err
	}
	served := true
	n, err := inTable(ctx, conn, coll, nil, func(tx *sql.Tx, t table, _ *sql.Stmt) (int64, error) {
		if t.name == "" {
			return 0, nil // no such collection: nothing to delete
		}
		if !t.addressable {
			served = false
			return 0, nil
		}
		return deleteRows(ctx, tx, t.name, keys, types)
	})
	if !served {
		return 0, false, nil
	}
	return n, true, err
}

// idKey returns id as FerretDB's lookups by _id key it (its JSON in
// FerretDB's sjson, encoding/json's escaping included) and the type its
// documents' schema gives it, which a write checks in the stored
// document; typ is "" where no document of another type can have the same
// key: FerretDB spells an ObjectID in hex and binary data in base64, both
// JSON strings, so only a string that could be either is checked. ok is
// false for an id it keys otherwise (types other than a string or an
// ObjectID).
func idKey(id any) (key, typ string, ok bool) {
	var s string
	switch v := id.(type) {
	case string:
		if !utf8.ValidString(v) {
			// JSON would spell it with U+FFFD, as FerretDB stored it,
			// where FerretDB's own lookups compare the bytes.
			return "", "", false
		}
		s = v
		if mayBeBase64(v) {
			typ = "string"
		}
	case bson.ObjectID:
		s, typ = v.Hex(), "objectId"
	default:
		return "", "", false
	}
	return string(jsonstr.Append(nil, s, true)), typ, true
}

// encodeRow returns doc as InsertDocs and ReplaceDoc write it (sjson), and
// false for a document they leave to FerretDB: one it would change or
// refuse on the way in (encodeSJSON), or one larger than it takes (the
// driver refuses that before sending it).
func encodeRow(doc bson.Raw) (string, bool) {
	if len(doc) > maxDocumentSize {
		return "", false
	}
	b, ok := encodeSJSON(doc)
	// The bytes are the string's alone from here: not copied again.
	return unsafe.String(unsafe.SliceData(b), len(b)), ok
}

// ReplaceDoc implements mongox.DocReplacer: it writes doc over the
// document of collection coll in database db with doc's _id, in the SQLite
// table FerretDB keeps the collection in, by the expression index of the
// _id, as FerretDB's own update does once it has read the document and
// applied the update to it (FerretDB decodes the command's document and
// the stored one, and encodes the result again). It is written as
// FerretDB's insert would write it (encodeSJSON), and the stored _id's type
// is checked as in DeleteIDs (idKey). matched is false when no document has that
// _id. It does not serve what InsertDocs does not, nor a collection
// FerretDB has not finished making or a capped one: those go through
// FerretDB.
func (m *Mongo) ReplaceDoc(ctx context.Context, db, coll string, doc bson.Raw) (matched, served bool, err error) {
	row, ok := encodeRow(doc)
	if !ok {
		return false, false, nil
	}
	var id any
	switch v := doc.Lookup("_id"); v.Type {
	case bson.TypeString:
		id = v.StringValue()
	case bson.TypeObjectID:
		id = v.ObjectID()
	}
	key, typ, ok := idKey(id)
	if !ok {
		return false, false, nil
	}
	conn, err := m.files.database(db)
	if errors.Is(err, fs.ErrNotExist) {
		return false, false, nil
	}
	if err != nil {
		return false, true, err
	}
	served = true
	query, args := replaceQuery, []any{row, key}
	if typ != "" {
		query, args = replaceTypedQuery, append(args, typ)
	}
	matched, err = inTable(ctx, conn, coll, func(table string) string { return fmt.Sprintf(query, quoteIdent(table)) },
		func(_ *sql.Tx, t table, stmt *sql.Stmt) (bool, error) {
			if !t.writable() {
				served = false
				return false, nil
			}
			return replaceRow(ctx, stmt, args)
		})
	if !served {
		return false, false, nil
	}
	return matched, true, err
}

// The statements that write a document (sjson) over the row whose _id has
// a key (JSON), of a type (replaceTypedQuery) or of either.
const (
	replaceQuery      = `UPDATE %s SET _ferretdb_sjson = ? WHERE _ferretdb_sjson->'$._id' = ?`
	replaceTypedQuery = `UPDATE %s SET _ferretdb_sjson = ? WHERE _ferretdb_sjson->'$._id' = ? AND _ferretdb_sjson->>'$."$s".p._id.t' = ?`
)

// mayBeBase64 reports whether s could be FerretDB's spelling of binary
// data (standard base64, padded), as an ObjectID's hex spelling always
// could.
func mayBeBase64(s string) bool {
	if len(s)%4 != 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '+' && c != '/' && c != '=' {
			return false
		}
	}
	return true
}

// replaceRow runs stmt (replaceQuery or replaceTypedQuery) with args and
// reports whether a row was written. A unique secondary index that
// refuses it fails it with mongox.ErrDuplicate.
func replaceRow(ctx context.Context, stmt *sql.Stmt, args []any) (bool, error) {
	res, err := stmt.ExecContext(ctx, args...)
	if err != nil {
		if isUnique(err) {
			return false, fmt.Errorf("%w: %w", mongox.ErrDuplicate, err)
		}
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// isUnique reports whether err is SQLite's refusal by a unique index.
func isUnique(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE
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
		row, ok := encodeRow(d)
		if !ok {
			return nil, false, nil
		}
		rows[i] = row
	}
	conn, err := m.files.database(db)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil // FerretDB makes the database
	}
	if err != nil {
		return nil, true, err
	}
	served := true
	errs, err := inTable(ctx, conn, coll, func(table string) string { return fmt.Sprintf(insertQuery, quoteIdent(table)) },
		func(_ *sql.Tx, t table, stmt *sql.Stmt) ([]error, error) {
			if !t.writable() {
				served = false
				return nil, nil
			}
			return insertRows(ctx, stmt, rows)
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

// insertQuery inserts a document (sjson) into a table.
const insertQuery = `INSERT INTO %s (_ferretdb_sjson) VALUES (?)`

// insertRows inserts each of rows (sjson) with stmt (insertQuery) and returns
// each one's outcome: a row that a unique index refuses (its _id taken)
// fails alone, as a failed statement leaves the transaction.
func insertRows(ctx context.Context, stmt *sql.Stmt, rows []any) ([]error, error) {
	errs := make([]error, len(rows))
	for i, r := range rows {
		if _, err := stmt.ExecContext(ctx, r); err != nil {
			if !isUnique(err) {
				return nil, err
			}
			errs[i] = fmt.Errorf("%w: %w", mongox.ErrDuplicate, err)
		}
	}
	return errs, nil
}

// deleteRows deletes from table in tx the rows whose _id is one of keys
// (JSON), each of the type at the same index of types ("": of any type,
// idKey).
// The type is read from each row's document, which SQLite parses for it.
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
			q := fmt.Sprintf(`DELETE FROM %s WHERE _ferretdb_sjson->'$._id' IN (?%s)`, quoteIdent(table), strings.Repeat(", ?", len(chunk)-1))
			args := chunk[:len(chunk):len(chunk)]
			if typ != "" {
				q += ` AND _ferretdb_sjson->>'$."$s".p._id.t' = ?`
				args = append(args, typ)
			}
			res, err := tx.ExecContext(ctx, q, args...)
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
