package connections

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// WriteMode says what to do when the target table exists.
type WriteMode string

// Write modes.
const (
	// WriteCreate fails when the table exists.
	WriteCreate WriteMode = "create"
	// WriteDrop drops an existing table first.
	WriteDrop WriteMode = "drop"
	// WriteTruncate empties an existing table and inserts into it.
	WriteTruncate WriteMode = "truncate"
)

var tableRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidTableName returns an error saying why name cannot be a new table's
// name: only letters, digits and '_', not starting with a digit, and not a
// SQLite internal name.
func ValidTableName(name string) error {
	if !tableRE.MatchString(name) {
		return errors.New("a table name is 1-63 letters, digits or '_', not starting with a digit")
	}
	if strings.HasPrefix(strings.ToLower(name), "sqlite_") || strings.HasPrefix(strings.ToLower(name), "pg_") {
		return errors.New("table names starting with sqlite_ or pg_ are reserved")
	}
	return nil
}

// WriteTable writes the whole result of the read query selectSQL (checked
// by the caller with package safety) to table on the named connection and
// returns the number of rows written.
//
// The writable connection never executes user SQL: selectSQL runs the way
// Query runs it (the engine's check, then read-only: a READ ONLY
// transaction on PostgreSQL, the authorizer-guarded read-only handle on
// SQLite), without the row limit, and its rows stream into one transaction
// on the writable connection: CREATE TABLE with the result's column types
// (PostgreSQL's exact types; SQLite's declared types), then batched
// INSERTs whose values are parameters (PostgreSQL values travel as text
// and go through the column type's input function, so every type round
// trips). On MySQL, whose DDL commits any transaction, the rows go to a
// staging table that replaces or refills the target in one step
// (writeMySQL). Errors are ErrUnknown, ErrUnavailable, ErrRefused or ErrQuery
// (the table exists and mode is WriteCreate; a bad name; the database's
// own failure).
func (r *Registry) WriteTable(ctx context.Context, name, selectSQL, table string, mode WriteMode, timeout time.Duration) (int64, error) {
	return r.WriteTableIn(ctx, name, selectSQL, "", table, mode, timeout)
}

// WriteTableIn is WriteTable into schema ("" for the connection's current
// one), as WRITE_DATA's schema dropdown chose it.
func (r *Registry) WriteTableIn(ctx context.Context, name, selectSQL, schema, table string, mode WriteMode, timeout time.Duration) (int64, error) {
	c, err := r.get(name)
	if err != nil {
		return 0, err
	}
	return c.writeTo(ctx, schema, table, mode, timeout, func(w *tableWriter) error {
		switch c.spec.Dialect {
		case Postgres:
			return c.streamPostgres(w.ctx, selectSQL, timeout, w.columns, w.row)
		case MySQL:
			return c.streamMySQL(w.ctx, selectSQL, timeout, w.columns, w.row)
		}
		return c.guard.stream(w.ctx, selectSQL, w.columns, w.row)
	})
}

// writeTo creates (or, as mode says, replaces or empties) table in schema
// ("" for the connection's current schema) on c's writable pool and fills
// it through fill, which calls w.columns once and then w.row for each
// row, all in one transaction (MySQL: a staging table swapped in, see
// writeMySQL).
func (c *conn) writeTo(ctx context.Context, schema, table string, mode WriteMode, timeout time.Duration, fill func(w *tableWriter) error) (int64, error) {
	if err := ValidTableName(table); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrQuery, err)
	}
	wdb, err := c.writePool()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if c.spec.Dialect == MySQL {
		return c.writeMySQL(ctx, wdb, schema, table, mode, fill)
	}
	wconn, err := wdb.Conn(ctx)
	if err != nil {
		return 0, dbError(err)
	}
	defer wconn.Close()
	// The write's statements run under sctx (driverCtx), checked against
	// ctx before each (tableWriter.stmtCtx).
	sctx := c.driverCtx(ctx)
	if c.spec.Dialect == SQLite {
		// The rows are read through another handle on the same file while
		// this transaction writes; without spilling its cache the writer
		// needs the exclusive lock only at COMMIT, after the read is done.
		if _, err := wconn.ExecContext(sctx, "PRAGMA cache_spill = OFF"); err != nil {
			return 0, dbError(err)
		}
		// Another job writing the file holds its lock until it commits:
		// wait for it as long as this job may run (the transaction begins
		// IMMEDIATE, so that wait happens at BEGIN; see openSQLite).
		if _, err := wconn.ExecContext(sctx, fmt.Sprintf("PRAGMA busy_timeout = %d", max(timeout.Milliseconds(), 1))); err != nil {
			return 0, dbError(err)
		}
	}
	// Not bound to ctx (its statements are): see readOnlyTx.
	tx, err := wconn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return 0, dbError(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := ctx.Err(); err != nil {
		return 0, dbError(err)
	}
	exists, err := tableExists(sctx, tx, c.spec.Dialect, schema, table)
	if err != nil {
		return 0, dbError(err)
	}
	if exists && mode != WriteDrop && mode != WriteTruncate {
		return 0, fmt.Errorf("%w: table %s already exists", ErrQuery, table)
	}
	w := &tableWriter{ctx: ctx, sctx: sctx, tx: tx, dialect: c.spec.Dialect, table: qualified(c.spec.Dialect, schema, table), exists: exists, mode: mode}
	if err := fill(w); err != nil {
		return 0, err
	}
	if err := w.flush(); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, dbError(err)
	}
	return w.n, nil
}

// qualified is table quoted, after schema when one is named.
func qualified(dialect, schema, table string) string {
	if schema == "" {
		return QuoteIdent(dialect, table)
	}
	return QuoteIdent(dialect, schema) + "." + QuoteIdent(dialect, table)
}

// column describes a result column: its name, and its type as the source
// reports it (PostgreSQL: type OID and modifier; SQLite: declared type).
type column struct {
	name   string
	oid    uint32
	typmod int32
	decl   string
}

// streamPostgres runs query as Query does (check, READ ONLY transaction,
// statement timeout, session reset) with no row limit, and hands each row
// to row as text values (nil for NULL), after the columns to cols.
func (c *conn) streamPostgres(ctx context.Context, query string, timeout time.Duration, cols func([]column) error, row func([]any) error) error {
	return c.readSession(ctx, func(conn *sql.Conn) error {
		if err := checkPostgres(ctx, conn, query, timeout); err != nil {
			return err
		}
		return conn.Raw(func(dc any) error {
			sc, ok := dc.(*stdlib.Conn)
			if !ok {
				return fmt.Errorf("%w: unexpected driver connection %T", ErrUnavailable, dc)
			}
			pg := sc.Conn().PgConn()
			begin := fmt.Sprintf("BEGIN READ ONLY; SET LOCAL statement_timeout = %d", timeout.Milliseconds())
			if _, err := pg.Exec(ctx, begin).ReadAll(); err != nil {
				return dbError(err)
			}
			// A failed rollback leaves the session unusable; readSession's
			// reset then fails and the connection is dropped.
			defer func() { _, _ = pg.Exec(context.WithoutCancel(ctx), "ROLLBACK").ReadAll() }()
			// ExecParams: the extended protocol, one statement only; nil
			// result formats ask for text.
			rr := pg.ExecParams(ctx, query, nil, nil, nil, nil)
			fields := rr.FieldDescriptions()
			described := make([]column, len(fields))
			for i, f := range fields {
				described[i] = column{name: f.Name, oid: f.DataTypeOID, typmod: f.TypeModifier}
			}
			if len(fields) > 0 {
				if err := cols(described); err != nil {
					_, _ = rr.Close()
					return err
				}
			}
			for rr.NextRow() {
				vals := make([]any, len(fields))
				for i, v := range rr.Values() {
					if v != nil {
						vals[i] = string(v)
					}
				}
				if err := row(vals); err != nil {
					_, _ = rr.Close()
					return err
				}
			}
			if _, err := rr.Close(); err != nil {
				return dbError(err)
			}
			if len(fields) == 0 {
				return fmt.Errorf("%w: the query returns no columns", ErrQuery)
			}
			return nil
		})
	})
}

// execer is what tableWriter writes through: a transaction, or (MySQL,
// whose DDL commits any transaction) a connection.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// tableWriter creates the target table from the first columns it sees and
// inserts rows in batches, all through tx.
type tableWriter struct {
	// ctx bounds the job; the rows are read under it. The writer's own
	// statements run under sctx (stmtCtx).
	ctx, sctx context.Context
	tx        execer
	dialect   string
	table     string // quoted
	exists    bool
	mode      WriteMode
	// insert is "INSERT INTO t VALUES " and ncols its width, set by columns.
	insert  string
	ncols   int
	batch   []any
	batched int
	bytes   int // of the batch's texts and blobs
	n       int64
}

// maxBatchParams bounds the parameters of one INSERT (SQLite allows 32766
// and PostgreSQL 65535).
const maxBatchParams = 10000

// maxBatchBytes bounds the texts and blobs one INSERT holds: a batch is
// flushed past it, whatever its rows. Without it 500 rows of 60 MB values
// would have been held at once (30 GB; 30 rows took the process to 8.9 GB).
const maxBatchBytes = 16 << 20

// columns prepares the table for the result's columns: drops or empties an
// existing one as mode says, creates it unless it is kept.
func (w *tableWriter) columns(cols []column) error {
	if len(cols) == 0 {
		return fmt.Errorf("%w: the query returns no columns", ErrQuery)
	}
	defs := make([]string, len(cols))
	used := map[string]bool{}
	for i, col := range cols {
		name := col.name
		for k := 2; used[strings.ToLower(name)] || name == ""; k++ {
			name = fmt.Sprintf("%s_%d", col.name, k)
		}
		used[strings.ToLower(name)] = true
		typ, err := w.columnType(col)
		if err != nil {
			return err
		}
		defs[i] = strings.TrimSpace(QuoteIdent(w.dialect, name) + " " + typ)
	}
	var stmts []string
	switch {
	case w.exists && w.mode == WriteTruncate:
		stmts = []string{"DELETE FROM " + w.table}
	case w.exists:
		stmts = []string{"DROP TABLE " + w.table, "CREATE TABLE " + w.table + " (" + strings.Join(defs, ", ") + ")"}
	default:
		stmts = []string{"CREATE TABLE " + w.table + " (" + strings.Join(defs, ", ") + ")"}
	}
	for _, st := range stmts {
		sctx, err := w.stmtCtx()
		if err != nil {
			return err
		}
		if _, err := w.tx.ExecContext(sctx, st); err != nil {
			return dbError(err)
		}
	}
	w.insert, w.ncols = "INSERT INTO "+w.table+" VALUES ", len(cols)
	return nil
}

// sqliteTypeRE is what a declared SQLite type copied into CREATE TABLE may
// look like (e.g. NVARCHAR(120), NUMERIC(10,2)).
var sqliteTypeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_ ]*(\([0-9]+( *, *[0-9]+)?\))?$`)

// columnType is the column's type in CREATE TABLE: format_type of the
// result's type on PostgreSQL; the declared type on SQLite (none for an
// expression, which gives the column no affinity); on MySQL the one
// mysqlColumnType chose.
func (w *tableWriter) columnType(col column) (string, error) {
	if w.dialect == MySQL {
		return col.decl, nil
	}
	if w.dialect == SQLite {
		if sqliteTypeRE.MatchString(col.decl) {
			return col.decl, nil
		}
		return "", nil
	}
	var typ string
	err := w.tx.QueryRowContext(w.ctx, `SELECT format_type($1::text::oid, $2::text::int4)`,
		strconv.FormatUint(uint64(col.oid), 10), strconv.FormatInt(int64(col.typmod), 10)).Scan(&typ)
	if err != nil {
		return "", dbError(err)
	}
	return typ, nil
}

// stmtCtx is the context of the writer's next statement (its sctx, see
// conn.driverCtx), or the job's timeout when it has passed: on SQLite a
// statement of the writer is checked against the job's context before it
// starts, not cut by it. One is a batch of at most 500 rows (and about
// maxBatchBytes of values), or DDL; the
// read, on handles of the guard's own, is cut at once.
func (w *tableWriter) stmtCtx() (context.Context, error) {
	if err := w.ctx.Err(); err != nil {
		return nil, dbError(err)
	}
	return w.sctx, nil
}

// row adds one row, flushing a full batch.
func (w *tableWriter) row(vals []any) error {
	w.batch = append(w.batch, vals...)
	w.batched++
	for _, v := range vals {
		switch x := v.(type) {
		case string:
			w.bytes += len(x)
		case []byte:
			w.bytes += len(x)
		}
	}
	if (w.batched+1)*w.ncols > maxBatchParams || w.batched == 500 || w.bytes >= maxBatchBytes {
		return w.flush()
	}
	return nil
}

// flush inserts the batched rows with one INSERT.
func (w *tableWriter) flush() error {
	if w.batched == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString(w.insert)
	p := 0
	for r := 0; r < w.batched; r++ {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for col := 0; col < w.ncols; col++ {
			if col > 0 {
				b.WriteString(", ")
			}
			p++
			if w.dialect == Postgres {
				fmt.Fprintf(&b, "$%d", p)
			} else {
				b.WriteByte('?')
			}
		}
		b.WriteByte(')')
	}
	sctx, err := w.stmtCtx()
	if err != nil {
		return err
	}
	if _, err := w.tx.ExecContext(sctx, b.String(), w.batch...); err != nil {
		return dbError(err)
	}
	w.n += int64(w.batched)
	clear(w.batch) // the values are not kept past their INSERT
	w.batch, w.batched, w.bytes = w.batch[:0], 0, 0
	return nil
}

// QuoteIdent quotes a name as an SQL identifier of dialect ("..." in
// SQLite and PostgreSQL, `...` in MySQL, whose "..." is a string).
func QuoteIdent(dialect, name string) string {
	if dialect == MySQL {
		return "`" + strings.ReplaceAll(name, "`", "``") + "`"
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

func tableExists(ctx context.Context, tx execer, dialect, schema, table string) (bool, error) {
	var n int
	var err error
	switch dialect {
	case Postgres:
		err = tx.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = coalesce(nullif($1, ''), current_schema()) AND table_name = $2`, schema, table).Scan(&n)
	case MySQL:
		err = tx.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = coalesce(nullif(?, ''), DATABASE()) AND TABLE_NAME = ?`, schema, table).Scan(&n)
	default:
		if schema == "" {
			schema = "main"
		}
		err = tx.QueryRowContext(ctx, `SELECT count(*) FROM `+QuoteIdent(SQLite, schema)+`.sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&n)
	}
	return n > 0, err
}
