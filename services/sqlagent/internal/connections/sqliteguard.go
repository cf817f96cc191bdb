package connections

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// The SQLite locks: SQLite's own authorizer, on a handle opened read-only.
//
// The database/sql driver (modernc.org/sqlite) does not expose
// sqlite3_set_authorizer or sqlite3_stmt_readonly, but its lib package is
// the SQLite C library itself, so sqliteGuard opens handles of its own on
// the file with it, and user queries run on those:
//
//   - The authorizer, which SQLite consults while it compiles a statement,
//     sees every table and column read, every function called, every
//     PRAGMA, ATTACH and transaction statement. It allows SELECT, reads
//     (but no PRAGMA table function outside a read-only list, and not the
//     raw pages of sqlite_dbpage) and calls of
//     functions other than load_extension and fts3_tokenizer, and denies
//     everything else. The statement must also be a single one, read-only
//     by sqlite3_stmt_readonly, return columns and take no parameters.
//     Compiling executes nothing. The handles carry none of the functions an application
//     registers with the driver, so a call of one fails to compile.
//   - The handle itself is opened with SQLITE_OPEN_READONLY (and mode=ro),
//     PRAGMA query_only and a limit of zero attached databases. The last
//     two matter: ATTACH opens its file with the connection's open flags
//     and VACUUM INTO creates its target before query_only refuses it, so
//     on the driver's read-write handle both leave an empty file behind;
//     with no room to attach, both fail before they open anything.
//
// Values come back as SQLite stores them (the driver would turn DATE and
// DATETIME text into time.Time), so WRITE_DATA copies them exactly.

// sqliteReadOnlyPragmas are the PRAGMA table functions (and the pragmas
// they run) a query may read; they describe the schema.
var sqliteReadOnlyPragmas = map[string]bool{
	"table_info": true, "table_xinfo": true, "table_list": true, "index_list": true, "index_info": true,
	"index_xinfo": true, "foreign_key_list": true, "collation_list": true,
}

// sqliteDeniedFunctions are built-in SQLite functions with effects beyond
// the query.
var sqliteDeniedFunctions = map[string]string{
	"load_extension": "it loads native code",
	"fts3_tokenizer": "it can register native code",
}

// sqliteDeniedTables are virtual tables of the SQLite build that reach
// past the query's rows (modernc.org/sqlite builds SQLite with
// SQLITE_ENABLE_DBPAGE_VTAB since v1.3x; the others are the recovery
// extension's, refused should a build carry them).
var sqliteDeniedTables = map[string]string{
	"sqlite_dbpage": "it reads the file's raw pages, freed ones (deleted rows) included",
	"sqlite_dbdata": "it reads the file's raw records, freed ones (deleted rows) included",
	"sqlite_dbptr":  "it reads the file's raw page pointers",
}

// sqliteGuard hands out authorizer-guarded read-only handles on one
// database. It is safe for concurrent use; each handle serves one
// statement at a time.
type sqliteGuard struct {
	uri  string
	idle chan *sqliteHandle
	mu   sync.Mutex // guards closed and all
	// all holds every open handle, idle or in use, for Close.
	closed bool
	all    []*sqliteHandle
}

// sqliteMaxValueBytes bounds a string or blob (and a row) a read builds
// or reads on SQLite. A reply keeps at most 64 KiB of a value anyway; a
// stored value larger than this fails the read with SQLite's "string or
// blob too big".
const sqliteMaxValueBytes = 64 << 20

// sqliteRowBytes bounds the values of one result row a read builds on
// SQLite: SQLite holds a whole row in memory before the first value is
// read, so the bound on a value is this shared by the statement's columns
// (at least sqliteMinValueBytes, at most sqliteMaxValueBytes). Without it
// twenty randomblob(60000000) columns took the process to 4.6 GB for one
// row, and SQLite allows 2,000 columns.
const (
	sqliteRowBytes      = 256 << 20
	sqliteMinValueBytes = 128 << 10
)

// sqliteValueLimit is the longest value a statement of n result columns
// may build or read.
func sqliteValueLimit(n int) int {
	return min(sqliteMaxValueBytes, max(sqliteMinValueBytes, sqliteRowBytes/max(n, 1)))
}

// sqliteHandlePool is how many idle handles a guard keeps.
const sqliteHandlePool = 4

func newSQLiteGuard(uri string) *sqliteGuard {
	return &sqliteGuard{uri: uri, idle: make(chan *sqliteHandle, sqliteHandlePool)}
}

// authState collects what the authorizer saw while one statement compiled.
type authState struct {
	denied string
}

var (
	authStates sync.Map // uintptr id -> *authState
	authNextID atomic.Uintptr
)

// sqliteHandle is one connection opened through the SQLite library.
type sqliteHandle struct {
	tls  *libc.TLS
	db   uintptr
	id   uintptr
	auth *authState
}

// get returns an idle handle or opens one.
func (g *sqliteGuard) get() (*sqliteHandle, error) {
	select {
	case h := <-g.idle:
		return h, nil
	default:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, errors.New("connection closed")
	}
	h, err := openSQLiteHandle(g.uri)
	if err != nil {
		return nil, err
	}
	g.all = append(g.all, h)
	return h, nil
}

// put returns h to the idle set, or closes it when the set is full.
func (g *sqliteGuard) put(h *sqliteHandle) {
	select {
	case g.idle <- h:
	default:
		g.discard(h)
	}
}

// discard closes h for good.
func (g *sqliteGuard) discard(h *sqliteHandle) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, x := range g.all {
		if x == h {
			g.all = append(g.all[:i], g.all[i+1:]...)
			break
		}
	}
	h.close()
}

// Close closes every handle; handles in use are closed as well, so Close
// must follow the last query.
func (g *sqliteGuard) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for _, h := range g.all {
		h.close()
	}
	g.all = nil
}

func openSQLiteHandle(uri string) (*sqliteHandle, error) {
	tls := libc.NewTLS()
	h := &sqliteHandle{tls: tls, auth: &authState{}}
	zName, err := libc.CString(uri)
	if err != nil {
		tls.Close()
		return nil, err
	}
	defer libc.Xfree(tls, zName)
	pDb := libc.Xmalloc(tls, 8)
	if pDb == 0 {
		tls.Close()
		return nil, errors.New("out of memory")
	}
	defer libc.Xfree(tls, pDb)
	storePtr(pDb, 0)
	rc := sqlite3.Xsqlite3_open_v2(tls, zName, pDb, sqlite3.SQLITE_OPEN_READONLY|sqlite3.SQLITE_OPEN_URI|sqlite3.SQLITE_OPEN_FULLMUTEX, 0)
	h.db = loadPtr(pDb)
	if rc != sqlite3.SQLITE_OK {
		err := h.errorf("open")
		h.close()
		return nil, err
	}
	sqlite3.Xsqlite3_busy_timeout(tls, h.db, 5000)
	// No attached databases at all: ATTACH, and VACUUM INTO (which attaches
	// its target internally, creating the file before query_only stops
	// it), fail before they open anything.
	sqlite3.Xsqlite3_limit(tls, h.db, sqlite3.SQLITE_LIMIT_ATTACHED, 0)
	// No value longer than sqliteMaxValueBytes: one call such as
	// randomblob(999999999) builds its gigabyte without ever looking at an
	// interrupt (measured: 18 s each, a 5 s timeout ending a read of four
	// after 76 s); past the limit SQLite fails it at once with "string or
	// blob too big".
	sqlite3.Xsqlite3_limit(tls, h.db, sqlite3.SQLITE_LIMIT_LENGTH, sqliteMaxValueBytes)
	if err := h.exec("PRAGMA query_only = 1"); err != nil {
		h.close()
		return nil, err
	}
	h.id = authNextID.Add(1)
	authStates.Store(h.id, h.auth)
	sqlite3.Xsqlite3_set_authorizer(tls, h.db, cFuncPointer(sqliteAuthorizer), h.id)
	return h, nil
}

// loadPtr and storePtr read and write a pointer-sized out-parameter in
// memory the SQLite library allocated (libc.Xmalloc); libc.GoBytes views it
// without converting a uintptr to an unsafe.Pointer here.
// They assume 64-bit pointers, which the next line checks at compile time.
const _ = uint(unsafe.Sizeof(uintptr(0)) - 8)

func loadPtr(p uintptr) uintptr { return uintptr(binary.NativeEndian.Uint64(libc.GoBytes(p, 8))) }

func storePtr(p, v uintptr) { binary.NativeEndian.PutUint64(libc.GoBytes(p, 8), uint64(v)) }

// cFuncPointer turns a top-level Go function into the function pointer the
// transpiled SQLite library calls (modernc.org/sqlite does the same for its
// own callbacks; see its cFuncPointer).
func cFuncPointer[T any](f T) uintptr {
	return *(*uintptr)(unsafe.Pointer(&struct{ f T }{f}))
}

// sqliteAuthorizer is the sqlite3_set_authorizer callback. It records the
// first thing it denies; SQLite then fails the compile with "not
// authorized".
func sqliteAuthorizer(tls *libc.TLS, pArg uintptr, action int32, z1, z2, z3, z4 uintptr) int32 {
	v, ok := authStates.Load(pArg)
	if !ok {
		return sqlite3.SQLITE_DENY
	}
	st := v.(*authState)
	deny := func(format string, args ...any) int32 {
		if st.denied == "" {
			st.denied = fmt.Sprintf(format, args...)
		}
		return sqlite3.SQLITE_DENY
	}
	switch action {
	case sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE:
		return sqlite3.SQLITE_OK
	case sqlite3.SQLITE_READ:
		table := strings.ToLower(libc.GoString(z1))
		if p, ok := strings.CutPrefix(table, "pragma_"); ok && !sqliteReadOnlyPragmas[p] {
			return deny("reading %s is not allowed (a PRAGMA function outside the read-only list)", table)
		}
		if reason, ok := sqliteDeniedTables[table]; ok {
			return deny("reading %s is not allowed: %s", table, reason)
		}
		return sqlite3.SQLITE_OK
	case sqlite3.SQLITE_FUNCTION:
		name := strings.ToLower(libc.GoString(z2))
		if reason, ok := sqliteDeniedFunctions[name]; ok {
			return deny("function %s() is not allowed: %s", name, reason)
		}
		return sqlite3.SQLITE_OK
	case sqlite3.SQLITE_PRAGMA:
		// A PRAGMA table function runs its pragma when stepped.
		name := strings.ToLower(libc.GoString(z1))
		if sqliteReadOnlyPragmas[name] {
			return sqlite3.SQLITE_OK
		}
		return deny("PRAGMA %s is not allowed", name)
	}
	what := sqliteActionName(action)
	switch action {
	case sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE:
		table := libc.GoString(z1)
		if strings.HasPrefix(strings.ToLower(table), "sqlite_") {
			what = "a schema change"
		} else {
			what += " on " + table
		}
	}
	return deny("%s is not allowed in a read-only query", what)
}

// sqliteActionName names an authorizer action code for messages.
func sqliteActionName(action int32) string {
	switch action {
	case sqlite3.SQLITE_INSERT:
		return "INSERT"
	case sqlite3.SQLITE_UPDATE:
		return "UPDATE"
	case sqlite3.SQLITE_DELETE:
		return "DELETE"
	case sqlite3.SQLITE_ATTACH:
		return "ATTACH"
	case sqlite3.SQLITE_DETACH:
		return "DETACH"
	case sqlite3.SQLITE_TRANSACTION:
		return "transaction control"
	case sqlite3.SQLITE_SAVEPOINT:
		return "SAVEPOINT"
	case sqlite3.SQLITE_ANALYZE:
		return "ANALYZE"
	case sqlite3.SQLITE_REINDEX:
		return "REINDEX"
	case sqlite3.SQLITE_ALTER_TABLE:
		return "ALTER TABLE"
	case sqlite3.SQLITE_CREATE_VTABLE, sqlite3.SQLITE_DROP_VTABLE:
		return "a virtual table change"
	}
	if action >= sqlite3.SQLITE_CREATE_INDEX && action <= sqlite3.SQLITE_DROP_VIEW {
		return "a schema change"
	}
	return fmt.Sprintf("authorizer action %d", action)
}

func (h *sqliteHandle) errorf(op string) error {
	msg := "unknown error"
	if h.db != 0 {
		msg = libc.GoString(sqlite3.Xsqlite3_errmsg(h.tls, h.db))
	}
	return fmt.Errorf("%s: %s", op, msg)
}

// exec runs SQL of our own on the handle (before the authorizer is set).
func (h *sqliteHandle) exec(q string) error {
	z, err := libc.CString(q)
	if err != nil {
		return err
	}
	defer libc.Xfree(h.tls, z)
	if rc := sqlite3.Xsqlite3_exec(h.tls, h.db, z, 0, 0, 0); rc != sqlite3.SQLITE_OK {
		return h.errorf(q)
	}
	return nil
}

func (h *sqliteHandle) close() {
	if h.id != 0 {
		authStates.Delete(h.id)
		h.id = 0
	}
	if h.db != 0 {
		sqlite3.Xsqlite3_close_v2(h.tls, h.db)
		h.db = 0
	}
	if h.tls != nil {
		h.tls.Close()
		h.tls = nil
	}
}

// prepare compiles query under the authorizer and returns the statement;
// refusals are *RefusedError, compile errors ErrQuery. The caller
// finalizes the statement.
func (h *sqliteHandle) prepare(query string) (uintptr, error) {
	h.auth.denied = ""
	zSQL, err := libc.CString(query)
	if err != nil {
		return 0, err
	}
	defer libc.Xfree(h.tls, zSQL)
	out := libc.Xmalloc(h.tls, 16)
	if out == 0 {
		return 0, errors.New("out of memory")
	}
	defer libc.Xfree(h.tls, out)
	pStmt, pTail := out, out+8
	storePtr(pStmt, 0)
	rc := sqlite3.Xsqlite3_prepare_v2(h.tls, h.db, zSQL, -1, pStmt, pTail)
	stmt := loadPtr(pStmt)
	if rc != sqlite3.SQLITE_OK {
		if h.auth.denied != "" {
			return 0, refuse("%s", h.auth.denied)
		}
		return 0, fmt.Errorf("%w: %s", ErrQuery, libc.GoString(sqlite3.Xsqlite3_errmsg(h.tls, h.db)))
	}
	if stmt == 0 {
		return 0, refuse("the SQL holds no statement")
	}
	// What follows the first statement must compile to nothing (white
	// space, comments, semicolons).
	tail := loadPtr(pTail)
	storePtr(pStmt, 0)
	rc = sqlite3.Xsqlite3_prepare_v2(h.tls, h.db, tail, -1, pStmt, pTail)
	if second := loadPtr(pStmt); second != 0 || rc != sqlite3.SQLITE_OK {
		if second != 0 {
			sqlite3.Xsqlite3_finalize(h.tls, second)
		}
		sqlite3.Xsqlite3_finalize(h.tls, stmt)
		return 0, refuse("only one statement is allowed")
	}
	switch {
	case sqlite3.Xsqlite3_stmt_readonly(h.tls, stmt) == 0:
		sqlite3.Xsqlite3_finalize(h.tls, stmt)
		return 0, refuse("SQLite reports that the statement writes to the database")
	case sqlite3.Xsqlite3_column_count(h.tls, stmt) == 0:
		sqlite3.Xsqlite3_finalize(h.tls, stmt)
		return 0, refuse("the statement returns no columns, so it is not a query")
	case sqlite3.Xsqlite3_bind_parameter_count(h.tls, stmt) > 0:
		sqlite3.Xsqlite3_finalize(h.tls, stmt)
		return 0, refuse("bind parameters are not supported; write the value into the query")
	}
	return stmt, nil
}

// check compiles query under the authorizer and discards it.
func (g *sqliteGuard) check(query string) error {
	h, err := g.get()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer g.put(h)
	stmt, err := h.prepare(query)
	if err != nil {
		return err
	}
	sqlite3.Xsqlite3_finalize(h.tls, stmt)
	return nil
}

// stream runs query (checked as in check) and calls row for each result
// row with SQLite's stored values: nil, int64, float64, string or []byte.
// cols is called once first with the columns (names and declared types).
func (g *sqliteGuard) stream(ctx context.Context, query string, cols func([]column) error, row func([]any) error) error {
	h, err := g.get()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	interrupted := false
	defer func() {
		if interrupted {
			// The interrupt may still be pending on the handle.
			g.discard(h)
		} else {
			g.put(h)
		}
	}()
	stmt, err := h.prepare(query)
	if err != nil {
		return err
	}
	defer sqlite3.Xsqlite3_finalize(h.tls, stmt)
	n := int(sqlite3.Xsqlite3_column_count(h.tls, stmt))
	// Checked as values are built, while the statement steps.
	sqlite3.Xsqlite3_limit(h.tls, h.db, sqlite3.SQLITE_LIMIT_LENGTH, int32(sqliteValueLimit(n)))
	defer sqlite3.Xsqlite3_limit(h.tls, h.db, sqlite3.SQLITE_LIMIT_LENGTH, sqliteMaxValueBytes)
	described := make([]column, n)
	for i := range n {
		described[i] = column{
			name: libc.GoString(sqlite3.Xsqlite3_column_name(h.tls, stmt, int32(i))),
			decl: libc.GoString(sqlite3.Xsqlite3_column_decltype(h.tls, stmt, int32(i))),
		}
	}
	if err := cols(described); err != nil {
		return err
	}
	// sqlite3_interrupt is safe from another thread; it gets a TLS of its own.
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		itls := libc.NewTLS()
		defer itls.Close()
		sqlite3.Xsqlite3_interrupt(itls, h.db)
	})
	defer func() {
		if !stop() {
			<-done
			interrupted = true
		}
	}()
	for {
		switch rc := sqlite3.Xsqlite3_step(h.tls, stmt); rc {
		case sqlite3.SQLITE_ROW:
			vals := make([]any, n)
			for i := range n {
				vals[i] = h.column(stmt, int32(i))
			}
			if err := row(vals); err != nil {
				return err
			}
		case sqlite3.SQLITE_DONE:
			return nil
		default:
			if ctx.Err() != nil {
				return fmt.Errorf("%w: timed out", ErrQuery)
			}
			if h.auth.denied != "" {
				return refuse("%s", h.auth.denied)
			}
			if rc == sqlite3.SQLITE_TOOBIG {
				return fmt.Errorf("%w: a value the query builds or reads is longer than %s (a row's %d MiB shared by its %d columns); select shorter values (substr(col, 1, n), length(col)) or fewer columns",
					ErrQuery, byteSize(sqliteValueLimit(n)), sqliteRowBytes>>20, n)
			}
			return fmt.Errorf("%w: %s", ErrQuery, libc.GoString(sqlite3.Xsqlite3_errmsg(h.tls, h.db)))
		}
	}
}

// byteSize writes n bytes in KiB, or MiB to one decimal.
func byteSize(n int) string {
	if n >= 1<<20 {
		return strconv.FormatFloat(float64((n*10+1<<19)>>20)/10, 'f', -1, 64) + " MiB"
	}
	return strconv.Itoa(n>>10) + " KiB"
}

// column reads one value of the current row as SQLite stores it.
func (h *sqliteHandle) column(stmt uintptr, i int32) any {
	switch sqlite3.Xsqlite3_column_type(h.tls, stmt, i) {
	case sqlite3.SQLITE_INTEGER:
		return int64(sqlite3.Xsqlite3_column_int64(h.tls, stmt, i))
	case sqlite3.SQLITE_FLOAT:
		return sqlite3.Xsqlite3_column_double(h.tls, stmt, i)
	case sqlite3.SQLITE_TEXT:
		p := sqlite3.Xsqlite3_column_text(h.tls, stmt, i)
		return string(libc.GoBytes(p, int(sqlite3.Xsqlite3_column_bytes(h.tls, stmt, i))))
	case sqlite3.SQLITE_BLOB:
		p := sqlite3.Xsqlite3_column_blob(h.tls, stmt, i)
		return append([]byte{}, libc.GoBytes(p, int(sqlite3.Xsqlite3_column_bytes(h.tls, stmt, i)))...)
	}
	return nil
}
