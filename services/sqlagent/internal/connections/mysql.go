package connections

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// openMySQL opens a pool on a go-sql-driver DSN
// (user:password@tcp(host:port)/database?params). One statement per
// message (no multiStatements), no LOAD DATA LOCAL INFILE from any file
// the server names, placeholders sent to the server rather than
// interpolated. Reads never return a connection to the pool (see
// mysqlSession), so the pool keeps only the agent's own catalog queries'
// connections.
func openMySQL(dsn string) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, errors.New("invalid MySQL DSN (want user:password@tcp(host:port)/database)")
	}
	if cfg.DBName == "" {
		return nil, errors.New("the MySQL DSN names no database (want user:password@tcp(host:port)/database)")
	}
	cfg.MultiStatements = false
	cfg.AllowAllFiles = false
	cfg.InterpolateParams = false
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, errors.New("invalid MySQL DSN")
	}
	return sql.OpenDB(connector), nil
}

// mysqlSession runs fn on a MySQL read connection of its own, set up for
// a job: the pinned sql_mode and the statement timeout. Afterwards the
// connection is closed, not pooled: the server then drops whatever fn's
// statements left in the session (user locks, variables, temporary
// tables, prepared statements).
func (c *conn) mysqlSession(ctx context.Context, timeout time.Duration, fn func(*sql.Conn) error) error {
	conn, err := c.read.Conn(ctx)
	if err != nil {
		return dbError(err)
	}
	defer func() {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
	}()
	var mariadb bool
	if err := conn.QueryRowContext(ctx, `SELECT VERSION() LIKE '%MariaDB%'`).Scan(&mariadb); err != nil {
		return dbError(err)
	}
	set := fmt.Sprintf("SET SESSION sql_mode = '%s', max_execution_time = %d", mysqlSQLMode, timeout.Milliseconds())
	if mariadb {
		set = fmt.Sprintf("SET SESSION sql_mode = '%s', max_statement_time = %.3f", mysqlSQLMode, timeout.Seconds())
	}
	// The client character set is utf8mb4 whatever the DSN or the server's
	// default says: under GBK, Big5 or SJIS a multibyte character can
	// swallow a backslash, so the server would end a string where package
	// safety does not (a "string" that is LOAD_FILE(...) to the server).
	for _, st := range []string{"SET NAMES utf8mb4", set} {
		if _, err := conn.ExecContext(ctx, st); err != nil {
			return dbError(err)
		}
	}
	return fn(conn)
}

// mysqlReadOnly runs fn in a READ ONLY transaction on conn and rolls it
// back. The statements are sent as text: database/sql's BeginTx would
// leave a rolled-back transaction to the pool, which this connection
// never returns to.
func mysqlReadOnly(ctx context.Context, conn *sql.Conn, fn func() error) error {
	if _, err := conn.ExecContext(ctx, "START TRANSACTION READ ONLY"); err != nil {
		return dbError(err)
	}
	defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK") }()
	return fn()
}

// queryMySQL is Query on a MariaDB/MySQL connection.
func (c *conn) queryMySQL(ctx context.Context, sqlText string, limit int, timeout time.Duration) (*Result, error) {
	var res *Result
	err := c.mysqlSession(ctx, timeout, func(conn *sql.Conn) error {
		if err := c.checkMySQL(ctx, conn, sqlText); err != nil {
			return err
		}
		// The row cap: the server stops after one row more than the
		// result shows (which tells that it was cut). Set after the
		// check, whose catalog reads it would cut too.
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION sql_select_limit = %d", limit+1)); err != nil {
			return dbError(err)
		}
		return mysqlReadOnly(ctx, conn, func() error {
			rows, err := conn.QueryContext(ctx, sqlText)
			if err != nil {
				return dbError(err)
			}
			defer rows.Close()
			res, err = readRows(rows, limit)
			return err
		})
	})
	return res, err
}

// streamMySQL runs query as queryMySQL does, with no row limit, and hands
// the columns to cols and each row to row.
func (c *conn) streamMySQL(ctx context.Context, query string, timeout time.Duration, cols func([]column) error, row func([]any) error) error {
	return c.mysqlSession(ctx, timeout, func(conn *sql.Conn) error {
		if err := c.checkMySQL(ctx, conn, query); err != nil {
			return err
		}
		return mysqlReadOnly(ctx, conn, func() error {
			rows, err := conn.QueryContext(ctx, query)
			if err != nil {
				return dbError(err)
			}
			defer rows.Close()
			types, err := rows.ColumnTypes()
			if err != nil {
				return dbError(err)
			}
			described := make([]column, len(types))
			for i, t := range types {
				described[i] = column{name: t.Name(), decl: mysqlColumnType(t)}
			}
			if err := cols(described); err != nil {
				return err
			}
			for rows.Next() {
				vals := make([]any, len(types))
				ptrs := make([]any, len(types))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				if err := rows.Scan(ptrs...); err != nil {
					return dbError(err)
				}
				if err := row(vals); err != nil {
					return err
				}
			}
			return dbError(rows.Err())
		})
	})
}

// mysqlColumnType is the CREATE TABLE type for a result column: integers
// widen to BIGINT, decimals keep precision and scale, times keep
// microseconds, text becomes LONGTEXT and bytes LONGBLOB, so every value
// fits.
func mysqlColumnType(t *sql.ColumnType) string {
	name := t.DatabaseTypeName()
	switch {
	case strings.HasSuffix(name, "INT"):
		if strings.HasPrefix(name, "UNSIGNED") {
			return "BIGINT UNSIGNED"
		}
		return "BIGINT"
	case name == "DECIMAL":
		p, s, ok := t.DecimalSize()
		if !ok || p <= 0 || p > 65 || s < 0 || s > 30 || s > p {
			return "DECIMAL(65,30)"
		}
		return fmt.Sprintf("DECIMAL(%d,%d)", p, s)
	case name == "FLOAT", name == "DOUBLE", name == "DATE", name == "YEAR":
		return name
	case name == "DATETIME", name == "TIMESTAMP":
		return "DATETIME(6)"
	case name == "TIME":
		return "TIME(6)"
	case name == "BINARY", name == "VARBINARY", name == "BIT", name == "GEOMETRY", strings.HasSuffix(name, "BLOB"):
		return "LONGBLOB"
	default:
		return "LONGTEXT"
	}
}

// mysqlPrivileges are the privileges whose holder may do more than read:
// write or reshape data, reach the server's files, other sessions or its
// configuration.
var mysqlPrivileges = map[string]bool{
	"FILE": true, "SUPER": true, "INSERT": true, "UPDATE": true, "DELETE": true, "CREATE": true,
	"DROP": true, "ALTER": true, "INDEX": true, "CREATE VIEW": true, "CREATE ROUTINE": true,
	"ALTER ROUTINE": true, "TRIGGER": true, "EVENT": true, "LOCK TABLES": true, "SHUTDOWN": true,
	"PROCESS": true, "RELOAD": true, "CREATE USER": true, "GRANT OPTION": true, "DELETE HISTORY": true,
	"CONNECTION ADMIN": true, "READ_ONLY ADMIN": true, "BINLOG ADMIN": true, "REPLICATION MASTER ADMIN": true,
	"SET USER": true, "FEDERATED ADMIN": true,
}

// auditMySQL reports what the read user of c may do beyond reading, from
// information_schema's USER_PRIVILEGES, SCHEMA_PRIVILEGES and
// TABLE_PRIVILEGES for the current account (privileges through a role
// that is not active are not seen).
func (c *conn) auditMySQL(ctx context.Context) RoleAudit {
	a := RoleAudit{Connection: c.spec.Name}
	conn, err := c.read.Conn(ctx)
	if err != nil {
		a.Err = dbError(err)
		return a
	}
	defer conn.Close()
	if err := conn.QueryRowContext(ctx, `SELECT CURRENT_USER()`).Scan(&a.Role); err != nil {
		a.Err = dbError(err)
		return a
	}
	user, host, _ := strings.Cut(a.Role, "@")
	grantee := "'" + user + "'@'" + host + "'"
	seen := map[string]bool{}
	for _, q := range []struct{ where, query string }{
		{"", `SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = ?`},
		{" on a database", `SELECT PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE = ?`},
		{" on a table", `SELECT PRIVILEGE_TYPE FROM information_schema.TABLE_PRIVILEGES WHERE GRANTEE = ?`},
	} {
		rows, err := conn.QueryContext(ctx, q.query, grantee)
		if err != nil {
			a.Err = dbError(err)
			return a
		}
		for rows.Next() {
			var p string
			if err := rows.Scan(&p); err != nil {
				rows.Close()
				a.Err = dbError(err)
				return a
			}
			if mysqlPrivileges[p] && !seen[p+q.where] {
				seen[p+q.where] = true
				a.Excess = append(a.Excess, p+q.where)
			}
		}
		rows.Close()
	}
	b, err := c.loadBuiltins(ctx, conn)
	switch {
	case err != nil:
		a.Problems = append(a.Problems, "the server's keyword list (information_schema.KEYWORDS) cannot be read, so every query is refused: "+err.Error())
	case b.natives == nil:
		a.Problems = append(a.Problems, "the server does not list its native functions (information_schema.SQL_FUNCTIONS, MariaDB 10.6 and later): an unqualified call that is no stored function is taken for a built-in, so a loadable function is not told apart")
	}
	return a
}

// writeMySQL is WriteTable on a MariaDB/MySQL connection. Their DDL
// commits any open transaction, so the rows go first into a staging table
// of their own, and the target changes in one step only when all of them
// are in: RENAME TABLE (atomic, also when it swaps two tables) for a new
// or replaced table, DELETE and INSERT ... SELECT in one transaction to
// empty and refill one. A failure leaves the target as it was; the
// staging table (and a replaced table) is dropped either way.
//
// The job's timeout (ctx) cuts the statements that read and write rows,
// but not the swap: past the last row the renames run to their end, so
// that a job that reports failure has left its target as it was. A
// statement cut by ctx closes the job's connection on the client (so the
// clean-up cannot use it: staging tables stayed behind when it did) while
// the server may still be running it, or not have read it yet: the
// clean-up ends that session on the server (KILL, which a user may do to
// its own), so that no cut statement runs on, or creates a table after
// the DROP, and drops the tables from another connection.
func (c *conn) writeMySQL(ctx context.Context, wdb *sql.DB, schema, table string, mode WriteMode, fill func(*tableWriter) error) (int64, error) {
	wconn, err := wdb.Conn(ctx)
	if err != nil {
		return 0, dbError(err)
	}
	defer wconn.Close()
	var session int64
	if err := wconn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&session); err != nil {
		return 0, dbError(err)
	}
	exists, err := tableExists(ctx, wconn, MySQL, schema, table)
	if err != nil {
		return 0, dbError(err)
	}
	if exists && mode != WriteDrop && mode != WriteTruncate {
		return 0, fmt.Errorf("%w: table %s already exists", ErrQuery, table)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	// The staging table lives beside the target: RENAME TABLE then
	// stays within one database.
	staging, old := qualified(MySQL, schema, "agentmesh_stage_"+suffix), qualified(MySQL, schema, "agentmesh_old_"+suffix)
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mysqlCleanupTimeout)
		defer cancel()
		if ctx.Err() != nil {
			_, _ = wdb.ExecContext(dctx, fmt.Sprintf("KILL %d", session))
		}
		_, _ = wdb.ExecContext(dctx, "DROP TABLE IF EXISTS "+staging+", "+old)
	}()
	w := &tableWriter{ctx: ctx, sctx: ctx, tx: wconn, dialect: MySQL, table: staging, mode: WriteCreate}
	if err := fill(w); err != nil {
		return 0, err
	}
	if err := w.flush(); err != nil {
		return 0, err
	}
	target := qualified(MySQL, schema, table)
	if !exists || mode == WriteDrop {
		if err := ctx.Err(); err != nil {
			return 0, dbError(err) // out of time before the swap
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mysqlCleanupTimeout)
		defer cancel()
		swap := "RENAME TABLE " + staging + " TO " + target
		if exists {
			swap = "RENAME TABLE " + target + " TO " + old + ", " + staging + " TO " + target
		}
		if _, err := wconn.ExecContext(sctx, swap); err != nil {
			return 0, dbError(err)
		}
		return w.n, nil // the replaced table, now old, goes in the clean-up
	}
	if err := refill(ctx, wconn, target, staging); err != nil {
		return 0, dbError(err)
	}
	return w.n, nil
}

// mysqlCleanupTimeout bounds a MySQL write's swap, and its clean-up.
const mysqlCleanupTimeout = 10 * time.Second

// refill empties target and copies staging into it, in one transaction.
// The statements run under ctx; the transaction is not bound to it (see
// readOnlyTx): it is rolled back here.
func refill(ctx context.Context, conn *sql.Conn, target, staging string) error {
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+target); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+target+" SELECT * FROM "+staging); err != nil {
		return err
	}
	return tx.Commit()
}
