// Package connections holds the databases the SQL agent may query: one
// database/sql pool per configured connection, their live schemas, and
// read-only execution with a row limit and a timeout.
//
// Connections come from configuration only (SQLAGENT_CONNECTIONS), so users
// pick among names and never see or send a DSN. A query that package
// safety accepted is checked a second time by the engine itself before it
// runs (pgguard.go: PostgreSQL's catalog decides on every function the
// statement calls; sqliteguard.go: SQLite's authorizer; mysqlguard.go:
// MariaDB's parser, function registry and the definitions of the views
// and stored functions a statement names), and then runs read-only:
// SQLite queries on handles the SQLite library opens read-only with
// PRAGMA query_only, PostgreSQL and MySQL queries inside a READ ONLY
// transaction with a statement timeout that is rolled back, on a session
// that is reset (PostgreSQL: DISCARD ALL) or closed (MySQL) after every
// job, so no lock, setting, variable or prepared statement outlives it. A
// PostgreSQL or MySQL connection may name a separate read DSN whose role
// or user has only the rights reads need (AuditReadRoles warns when it
// has more). Writing a result to a table (write.go) never sends user SQL to the
// writable connection.
package connections

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// Dialects of connections.
const (
	// SQLite is a SQLite database file (modernc.org/sqlite, pure Go).
	SQLite = "sqlite"
	// Postgres is a PostgreSQL server (pgx).
	Postgres = "postgres"
	// MySQL is a MariaDB or MySQL server (go-sql-driver/mysql).
	MySQL = "mysql"
)

// Errors returned by the registry.
var (
	// ErrUnknown means no connection has the given name.
	ErrUnknown = errors.New("unknown connection")
	// ErrQuery means the database refused or failed the query; the message
	// is the database's and is safe to show (it never holds the DSN).
	ErrQuery = errors.New("query failed")
	// ErrUnavailable means the database could not be reached.
	ErrUnavailable = errors.New("database unavailable")
	// ErrRefused is matched (errors.Is) by every *RefusedError.
	ErrRefused = errors.New("query refused")
)

// RefusedError is the engine-side check refusing a statement before it
// ran; Reason says why in words a user understands.
type RefusedError struct {
	Reason string
}

func (e *RefusedError) Error() string { return "query refused: " + e.Reason }

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

func refuse(format string, args ...any) error {
	return &RefusedError{Reason: fmt.Sprintf(format, args...)}
}

// Spec is one configured connection.
type Spec struct {
	// Name is what users pick.
	Name string
	// Dialect is SQLite, Postgres or MySQL.
	Dialect string
	// DSN is the data source name: a file path or file: URI for SQLite, a
	// URL or key=value string for PostgreSQL, a go-sql-driver DSN
	// (user:password@tcp(host:port)/database) for MySQL. Results are written through
	// it, and reads use it unless ReadDSN is set. It is a secret. Empty
	// when only a read DSN is configured: the connection then takes no
	// writes.
	DSN string
	// ReadDSN is a PostgreSQL or MySQL DSN for reads, normally of a role
	// or user that may only read (see AuditReadRoles); empty: reads use
	// DSN. It is a secret.
	ReadDSN string
	// Tenants are the tenants that may use the connection; nil: all
	// (ScopeTenants).
	Tenants []string
}

// readDSN is the DSN reads use.
func (s Spec) readDSN() string {
	if s.ReadDSN != "" {
		return s.ReadDSN
	}
	return s.DSN
}

var (
	nameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
	readTag = "[read]"
)

// Parse reads a connection list: entries separated by ';' or newlines, each
// "name=driver:dsn" with driver sqlite, postgres (or postgresql, pgx) or
// mysql (or mariadb). A PostgreSQL or MySQL connection may add an entry
// "name[read]=driver:dsn" whose DSN is used for reads (a least-privilege
// role or user); with only that entry the connection is read-only. Errors name the entry by position and name,
// never quoting the DSN.
func Parse(list string) ([]Spec, error) {
	var out []Spec
	index := map[string]int{}
	writeSeen, readSeen := map[string]bool{}, map[string]bool{}
	folded := map[string]string{} // lower-cased name → name
	entries := strings.FieldsFunc(list, func(r rune) bool { return r == ';' || r == '\n' })
	for i, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		name, rest, ok := strings.Cut(e, "=")
		name = strings.TrimSpace(name)
		name, isRead := strings.CutSuffix(name, readTag)
		if !ok || !nameRE.MatchString(name) {
			return nil, fmt.Errorf("connection %d: want name=driver:dsn (or name[read]=driver:dsn) with a name of letters, digits, '_', '-' or '.'", i+1)
		}
		if other, ok := folded[strings.ToLower(name)]; ok && other != name {
			// A typed name matches a connection whatever its case.
			return nil, fmt.Errorf("connection %q: differs from %q only in case", name, other)
		}
		folded[strings.ToLower(name)] = name
		driver, dsn, ok := strings.Cut(rest, ":")
		if !ok || strings.TrimSpace(dsn) == "" {
			return nil, fmt.Errorf("connection %q: want name=driver:dsn", name)
		}
		var dialect string
		switch strings.ToLower(strings.TrimSpace(driver)) {
		case "sqlite", "sqlite3":
			dialect = SQLite
		case "postgres", "postgresql", "pgx":
			dialect = Postgres
		case "mysql", "mariadb":
			dialect = MySQL
		default:
			return nil, fmt.Errorf("connection %q: unknown driver %q (want sqlite, postgres or mysql)", name, driver)
		}
		seen := writeSeen
		if isRead {
			seen = readSeen
		}
		if seen[name] {
			return nil, fmt.Errorf("connection %q: named twice", name)
		}
		seen[name] = true
		if isRead && dialect == SQLite {
			return nil, fmt.Errorf("connection %q: a [read] DSN is for PostgreSQL roles and MySQL users; SQLite reads are read-only already", name)
		}
		j, ok := index[name]
		if !ok {
			j = len(out)
			index[name] = j
			out = append(out, Spec{Name: name, Dialect: dialect})
		}
		if out[j].Dialect != dialect {
			return nil, fmt.Errorf("connection %q: its read and write entries name different drivers", name)
		}
		if isRead {
			out[j].ReadDSN = strings.TrimSpace(dsn)
		} else {
			out[j].DSN = strings.TrimSpace(dsn)
		}
	}
	return out, nil
}

// Options tune query execution.
type Options struct {
	// MaxSchemaChars caps the schema text given to the model (0 = 24000).
	MaxSchemaChars int
}

// Registry is the set of open connections. It is safe for concurrent use.
type Registry struct {
	opts  Options
	conns map[string]*conn
}

// conn is one open connection.
type conn struct {
	spec Spec
	// read is the pool PostgreSQL queries run on, and the pool the
	// agent's own schema queries use (read-only for SQLite).
	read *sql.DB
	// guard runs SQLite queries under the authorizer (nil otherwise).
	guard *sqliteGuard
	// mu guards builtins, what a MySQL server lists as built-in (nil
	// until first loaded).
	mu       sync.Mutex
	builtins *mysqlBuiltins
	// write is the pool for writing results (nil until first needed).
	writeOnce sync.Once
	write     *sql.DB
	writeErr  error
}

// Open opens a pool per spec. Pools connect lazily, so a database that is
// down does not stop the start; its queries fail with ErrUnavailable.
func Open(specs []Spec, opts Options) (*Registry, error) {
	if opts.MaxSchemaChars <= 0 {
		opts.MaxSchemaChars = 24000
	}
	r := &Registry{opts: opts, conns: map[string]*conn{}}
	for _, s := range specs {
		c := &conn{spec: s}
		var err error
		switch s.Dialect {
		case SQLite:
			uri := readOnlyURI(s.DSN)
			c.guard = newSQLiteGuard(uri)
			c.read, err = openSQLite(uri, true)
		case Postgres:
			c.read, err = openPostgres(s.readDSN())
		case MySQL:
			c.read, err = openMySQL(s.readDSN())
		default:
			err = fmt.Errorf("unknown dialect %q", s.Dialect)
		}
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("connection %q: %w", s.Name, err)
		}
		r.conns[s.Name] = c
	}
	return r, nil
}

// openSQLite opens a pool on a SQLite DSN; readOnly adds PRAGMA
// query_only to every connection. The writable pool begins its
// transactions IMMEDIATE, taking the write lock at BEGIN: two deferred
// transactions that both read and then want to write deadlock, and SQLite
// answers the second SQLITE_BUSY at once, without its busy handler; an
// immediate one waits at BEGIN, on the busy timeout, for the writer before
// it to commit.
func openSQLite(dsn string, readOnly bool) (*sql.DB, error) {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	dsn += sep + "_pragma=busy_timeout(5000)"
	if readOnly {
		dsn += "&_pragma=query_only(1)"
	} else {
		dsn += "&_txlock=immediate"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, errors.New("cannot open the SQLite database")
	}
	return db, nil
}

// readOnlyURI turns a SQLite DSN (a path or a file: URI, with or without
// query parameters) into a file: URI that opens the file read-only
// (mode=ro), so even ATTACH cannot create a file through it.
func readOnlyURI(dsn string) string {
	if dsn == ":memory:" || dsn == "" {
		return dsn
	}
	path, query, _ := strings.Cut(dsn, "?")
	if !strings.HasPrefix(path, "file:") {
		path = "file:" + escapeURIPath(path)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		q = url.Values{}
	}
	q.Set("mode", "ro")
	return path + "?" + q.Encode()
}

// escapeURIPath escapes what SQLite's URI parser would read as syntax.
func escapeURIPath(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '%' || c == '?' || c == '#' || c <= ' ' || c >= 0x7f:
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// openPostgres opens a pool on a PostgreSQL DSN. Statements go out with
// the extended protocol and unnamed prepared statements
// (QueryExecModeExec): one statement per message, and nothing named is
// left on a session, so DISCARD ALL after a job cannot leave pgx's
// statement cache pointing at statements the server dropped.
func openPostgres(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("invalid PostgreSQL DSN")
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.StatementCacheCapacity = 0
	cfg.DescriptionCacheCapacity = 0
	// No message past MaxResultBytes is read: a DataRow's length comes
	// first, and a longer row fails the query (dbError) before its bytes
	// are read, where a 1 GB value would be held whole.
	cfg.AfterConnect = func(_ context.Context, pc *pgconn.PgConn) error {
		pc.Frontend().SetMaxBodyLen(MaxResultBytes)
		return nil
	}
	return stdlib.OpenDB(*cfg), nil
}

// writePool opens (once) and returns the pool results are written through.
func (c *conn) writePool() (*sql.DB, error) {
	c.writeOnce.Do(func() {
		switch {
		case c.spec.DSN == "":
			c.writeErr = fmt.Errorf("%w: connection %s is configured read-only (it has only a [read] DSN)", ErrQuery, c.spec.Name)
		case c.spec.Dialect == SQLite:
			c.write, c.writeErr = openSQLite(c.spec.DSN, false)
		case c.spec.Dialect == MySQL:
			c.write, c.writeErr = openMySQL(c.spec.DSN)
		default:
			c.write, c.writeErr = openPostgres(c.spec.DSN)
		}
		if c.writeErr != nil && !errors.Is(c.writeErr, ErrQuery) {
			c.writeErr = fmt.Errorf("%w: %v", ErrUnavailable, c.writeErr)
		}
	})
	return c.write, c.writeErr
}

// Close closes every pool.
func (r *Registry) Close() {
	for _, c := range r.conns {
		if c.read != nil {
			_ = c.read.Close()
		}
		if c.guard != nil {
			c.guard.Close()
		}
		if c.write != nil {
			_ = c.write.Close()
		}
	}
}

// Info describes a connection without its DSN.
type Info struct {
	// Name is the connection name.
	Name string
	// Dialect is SQLite, Postgres or MySQL.
	Dialect string
}

// List returns the connections sorted by name.
func (r *Registry) List() []Info {
	out := make([]Info, 0, len(r.conns))
	for _, c := range r.conns {
		out = append(out, Info{Name: c.spec.Name, Dialect: c.spec.Dialect})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Dialect returns the dialect of the named connection, or ErrUnknown.
func (r *Registry) Dialect(name string) (string, error) {
	c, err := r.get(name)
	if err != nil {
		return "", err
	}
	return c.spec.Dialect, nil
}

func (r *Registry) get(name string) (*conn, error) {
	c, ok := r.conns[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknown, name)
	}
	return c, nil
}

// Schemas lists the schemas visible through the named connection ("main"
// and attached databases for SQLite; user schemas for PostgreSQL).
func (r *Registry) Schemas(ctx context.Context, name string) ([]string, error) {
	c, err := r.get(name)
	if err != nil {
		return nil, err
	}
	q := `SELECT name FROM pragma_database_list ORDER BY seq`
	switch c.spec.Dialect {
	case Postgres:
		q = `SELECT schema_name FROM information_schema.schemata
			WHERE schema_name NOT IN ('pg_catalog', 'information_schema') AND schema_name NOT LIKE 'pg\_%'
			ORDER BY schema_name`
	case MySQL:
		q = `SELECT SCHEMA_NAME FROM information_schema.SCHEMATA
			WHERE SCHEMA_NAME NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')
			ORDER BY SCHEMA_NAME`
	}
	rows, err := c.read.QueryContext(c.driverCtx(ctx), q)
	if err != nil {
		return nil, dbError(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, dbError(err)
		}
		if s != "temp" {
			out = append(out, utf8x.Valid(s)) // offered as options: protobuf strings
		}
	}
	return out, dbError(rows.Err())
}

// dbError classifies a driver error: connection failures become
// ErrUnavailable, the rest ErrQuery carrying the database's message.
func dbError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: timed out", ErrQuery)
	}
	if _, ok := errors.AsType[*pgproto3.ExceededMaxBodyLenErr](err); ok {
		return fmt.Errorf("%w: a row of the result is larger than %d MiB; select fewer or shorter values (left(col, n), length(col))", ErrQuery, MaxResultBytes>>20)
	}
	// A database's message may quote a stored value in whatever bytes it
	// holds; it is shown to the user in a protobuf string.
	msg := utf8x.Valid(err.Error())
	for _, s := range []string{"connect:", "connection refused", "no such host", "failed to connect", "unable to open database"} {
		if strings.Contains(msg, s) {
			return fmt.Errorf("%w: %s", ErrUnavailable, redactDSN(msg))
		}
	}
	return fmt.Errorf("%w: %s", ErrQuery, redactDSN(msg))
}

var passwordRE = regexp.MustCompile(`(?i)(password=|://[^:/@\s]+:)[^@\s]*`)

// redactDSN masks passwords a driver might echo in an error.
func redactDSN(msg string) string {
	return passwordRE.ReplaceAllString(msg, "${1}***")
}

// driverCtx is the context a statement on one of c's database/sql pools
// runs under: ctx, but on SQLite a context that is never cancelled (the
// caller bounds the work otherwise). modernc.org/sqlite interrupts the
// connection from a goroutine when a statement's context ends, and that
// interrupt can land after the statement returned, on the next statement
// of the connection; when it lands on a query whose first row is out, the
// driver drops the query's rows unfinalized, and the pooled connection
// then answers "interrupted" to every statement of every later job, a
// writer's keeping its write lock (seen in TestWritesCutByTheirTimeout
// under load: every write after one cut failed at once). The user's
// queries run on the guard's own handles, which are cut and discarded
// (sqliteGuard.stream); these pools run the writer's statements and short
// catalog reads. modernc.org/sqlite v1.62 closes that race (the embedded
// FerretDB met it too: libs/mongox TestCutCommandsLeaveTheStoreWritable);
// this stays, since no statement here needs cutting mid-way.
func (c *conn) driverCtx(ctx context.Context) context.Context {
	if c.spec.Dialect == SQLite {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// CurrentSchema returns the schema unqualified table names resolve to on
// the named connection, where WriteTable creates its tables: "main" on
// SQLite, current_schema() on PostgreSQL, DATABASE() on MySQL.
func (r *Registry) CurrentSchema(ctx context.Context, name string) (string, error) {
	c, err := r.get(name)
	if err != nil {
		return "", err
	}
	db := c.read
	if c.spec.DSN != "" && c.spec.Dialect != SQLite {
		// The write DSN's schema: the read user's may differ.
		if db, err = c.writePool(); err != nil {
			return "", err
		}
	}
	var q string
	switch c.spec.Dialect {
	case SQLite:
		return "main", nil
	case Postgres:
		q = `SELECT current_schema()`
	default:
		q = `SELECT DATABASE()`
	}
	var schema sql.NullString
	if err := db.QueryRowContext(ctx, q).Scan(&schema); err != nil {
		return "", dbError(err)
	}
	if !schema.Valid || schema.String == "" {
		return "", fmt.Errorf("%w: connection %s has no current schema", ErrQuery, name)
	}
	return schema.String, nil
}

// Writable reports whether results may be written to the named
// connection: only one configured with a write DSN (name=, not only
// name[read]=) takes writes.
func (r *Registry) Writable(name string) (bool, error) {
	c, err := r.get(name)
	if err != nil {
		return false, err
	}
	return c.spec.DSN != "", nil
}

// Tables lists the base tables (not views) of schema on the named
// connection, sorted, as its write DSN sees them when it has one (a
// table is written through it): the tables a result may replace or
// refill. An empty schema is the current one (CurrentSchema).
func (r *Registry) Tables(ctx context.Context, name, schema string) ([]string, error) {
	c, err := r.get(name)
	if err != nil {
		return nil, err
	}
	db := c.read
	if c.spec.DSN != "" && c.spec.Dialect != SQLite {
		if db, err = c.writePool(); err != nil {
			return nil, err
		}
	}
	var rows *sql.Rows
	switch c.spec.Dialect {
	case Postgres:
		rows, err = db.QueryContext(ctx, `SELECT table_name FROM information_schema.tables
			WHERE table_schema = coalesce(nullif($1, ''), current_schema()) AND table_type = 'BASE TABLE' ORDER BY table_name`, schema)
	case MySQL:
		rows, err = db.QueryContext(ctx, `SELECT TABLE_NAME FROM information_schema.TABLES
			WHERE TABLE_SCHEMA = coalesce(nullif(?, ''), DATABASE()) AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME`, schema)
	default:
		if schema == "" {
			schema = "main"
		}
		rows, err = db.QueryContext(c.driverCtx(ctx), `SELECT name FROM `+QuoteIdent(SQLite, schema)+`.sqlite_master
			WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name`)
	}
	if err != nil {
		return nil, dbError(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, dbError(err)
		}
		out = append(out, utf8x.Valid(t)) // offered as options: protobuf strings
	}
	return out, dbError(rows.Err())
}
