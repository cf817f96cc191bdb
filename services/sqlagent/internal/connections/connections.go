// Package connections holds the databases the SQL agent may query: one
// database/sql pool per configured connection, their live schemas, and
// read-only execution with a row limit and a timeout.
//
// Connections come from configuration only (SQLAGENT_CONNECTIONS), so users
// pick among names and never see or send a DSN. Queries run read-only a
// second time over: SQLite handles are opened with PRAGMA query_only, and
// PostgreSQL queries run inside a READ ONLY transaction that is rolled back.
package connections

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // registers the "sqlite" database/sql driver
)

// Dialects of connections.
const (
	// SQLite is a SQLite database file (modernc.org/sqlite, pure Go).
	SQLite = "sqlite"
	// Postgres is a PostgreSQL server (pgx).
	Postgres = "postgres"
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
)

// Spec is one configured connection.
type Spec struct {
	// Name is what users pick.
	Name string
	// Dialect is SQLite or Postgres.
	Dialect string
	// DSN is the data source name: a file path or file: URI for SQLite, a
	// URL or key=value string for PostgreSQL. It is a secret.
	DSN string
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// Parse reads a connection list: entries separated by ';' or newlines, each
// "name=driver:dsn" with driver sqlite, postgres (or postgresql, pgx). Errors
// name the entry by position and name, never quoting the DSN.
func Parse(list string) ([]Spec, error) {
	var out []Spec
	seen := map[string]bool{}
	entries := strings.FieldsFunc(list, func(r rune) bool { return r == ';' || r == '\n' })
	for i, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		name, rest, ok := strings.Cut(e, "=")
		name = strings.TrimSpace(name)
		if !ok || !nameRE.MatchString(name) {
			return nil, fmt.Errorf("connection %d: want name=driver:dsn with a name of letters, digits, '_', '-' or '.'", i+1)
		}
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
		default:
			return nil, fmt.Errorf("connection %q: unknown driver %q (want sqlite or postgres)", name, driver)
		}
		if seen[name] {
			return nil, fmt.Errorf("connection %q: named twice", name)
		}
		seen[name] = true
		out = append(out, Spec{Name: name, Dialect: dialect, DSN: strings.TrimSpace(dsn)})
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
	// read is the pool queries run on (read-only for SQLite).
	read *sql.DB
	// write is the pool for writing results (nil until first needed).
	writeOnce sync.Once
	write     *sql.DB
	writeErr  error
}

// Open opens a pool per spec. database/sql connects lazily, so a database
// that is down does not stop the start; its queries fail with
// ErrUnavailable.
func Open(specs []Spec, opts Options) (*Registry, error) {
	if opts.MaxSchemaChars <= 0 {
		opts.MaxSchemaChars = 24000
	}
	r := &Registry{opts: opts, conns: map[string]*conn{}}
	for _, s := range specs {
		db, err := openDB(s, true)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("connection %q: %w", s.Name, err)
		}
		r.conns[s.Name] = &conn{spec: s, read: db}
	}
	return r, nil
}

// openDB opens a pool for s, read-only when readOnly is set and the dialect
// can enforce it on the handle.
func openDB(s Spec, readOnly bool) (*sql.DB, error) {
	switch s.Dialect {
	case SQLite:
		dsn := s.DSN
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + "_pragma=busy_timeout(5000)"
		if readOnly {
			dsn += "&_pragma=query_only(1)"
		}
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			return nil, errors.New("cannot open the SQLite database")
		}
		return db, nil
	case Postgres:
		db, err := sql.Open("pgx", s.DSN)
		if err != nil {
			return nil, errors.New("invalid PostgreSQL DSN")
		}
		return db, nil
	}
	return nil, fmt.Errorf("unknown dialect %q", s.Dialect)
}

// Close closes every pool.
func (r *Registry) Close() {
	for _, c := range r.conns {
		_ = c.read.Close()
		if c.write != nil {
			_ = c.write.Close()
		}
	}
}

// Info describes a connection without its DSN.
type Info struct {
	// Name is the connection name.
	Name string
	// Dialect is SQLite or Postgres.
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
	if c.spec.Dialect == Postgres {
		q = `SELECT schema_name FROM information_schema.schemata
			WHERE schema_name NOT IN ('pg_catalog', 'information_schema') AND schema_name NOT LIKE 'pg\_%'
			ORDER BY schema_name`
	}
	rows, err := c.read.QueryContext(ctx, q)
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
			out = append(out, s)
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
	msg := err.Error()
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
