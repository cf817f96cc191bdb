package connections

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// Result is a query result cut at the row limit and at MaxResultBytes.
type Result struct {
	// Columns are the column names in order.
	Columns []string
	// Rows hold JSON-friendly values: nil, bool, int64, float64, string
	// (times as RFC 3339, non-UTF-8 bytes as base64).
	Rows [][]any
	// Truncated is true when the query had more rows than Rows holds:
	// more than the limit, or TooLarge.
	Truncated bool
	// TooLarge is true when the rows after Rows were left out because
	// their values would have passed MaxResultBytes.
	TooLarge bool
}

// MaxResultBytes bounds the values one Query holds in memory (a text or
// bytes value counts its length as the result carries it, any other value
// 8 bytes): the rows past it are left out, the result marked TooLarge. It
// also bounds one PostgreSQL protocol message, so a row larger than this
// (one value may be up to 1 GB) fails the query before the driver reads
// it (ErrQuery, "a row of the result is larger than 64 MiB"); on SQLite
// a row's values share sqliteRowBytes, and MySQL's server bounds a row by
// its max_allowed_packet. Without it a read of ten rows of 60 MB blobs
// took agentmesh up to 1.45 GB, and 200 would have held 12 GB: one user's
// read could take the whole process down.
const MaxResultBytes = 64 << 20

// collector gathers a Result up to a row limit and MaxResultBytes.
type collector struct {
	res   *Result
	limit int
	bytes int
}

func newCollector(columns []string, limit int) *collector {
	c := &collector{res: &Result{Rows: [][]any{}}, limit: limit}
	c.addColumns(columns...)
	return c
}

// addColumns appends result columns, their names made valid UTF-8 as
// jsonValue makes text values: SQLite keeps whatever bytes a TEXT value or
// a name was given (an application's Latin-1, say), and a result travels
// as protobuf strings, which must be UTF-8. A result written to a table is
// read again from the database, unchanged.
func (c *collector) addColumns(names ...string) {
	for _, n := range names {
		c.res.Columns = append(c.res.Columns, utf8x.Valid(n))
	}
}

// atLimit reports whether the result holds limit rows, and then marks it
// cut: a row is there past them.
func (c *collector) atLimit() bool {
	if len(c.res.Rows) < c.limit {
		return false
	}
	c.res.Truncated = true
	return true
}

// add converts vals (jsonValue) and appends them as a row, or marks the
// result cut and returns errEnough when the row limit is reached or the
// row would pass MaxResultBytes.
func (c *collector) add(vals []any) error {
	if c.atLimit() {
		return errEnough
	}
	size := 0
	for i, v := range vals {
		vals[i] = jsonValue(v)
		switch x := vals[i].(type) {
		case string:
			size += len(x)
		default:
			size += 8
		}
	}
	if c.bytes+size > MaxResultBytes {
		c.res.Truncated, c.res.TooLarge = true, true
		return errEnough
	}
	c.bytes += size
	c.res.Rows = append(c.res.Rows, vals)
	return nil
}

// Query runs sqlText (which the caller has checked with package safety) on
// the named connection, reading at most limit rows, and gives up after
// timeout. The engine checks the statement first (RefusedError when it
// refuses it); then it runs read-only. Errors are ErrUnknown,
// ErrUnavailable, ErrRefused or ErrQuery.
func (r *Registry) Query(ctx context.Context, name, sqlText string, limit int, timeout time.Duration) (*Result, error) {
	c, err := r.get(name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if c.spec.Dialect == MySQL {
		return c.queryMySQL(ctx, sqlText, limit, timeout)
	}
	if c.spec.Dialect == Postgres {
		var res *Result
		err := c.readSession(ctx, func(conn *sql.Conn) error {
			if err := checkPostgres(ctx, conn, sqlText, timeout); err != nil {
				return err
			}
			return readOnlyTx(ctx, conn, timeout, func(tx *sql.Tx) error {
				rows, err := tx.QueryContext(ctx, sqlText)
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
	rows := newCollector(nil, limit)
	err = c.guard.stream(ctx, sqlText, func(cols []column) error {
		for _, col := range cols {
			rows.addColumns(col.name)
		}
		return nil
	}, rows.add)
	if err != nil && !errors.Is(err, errEnough) {
		return nil, err
	}
	return rows.res, nil
}

// errEnough stops a stream once the row limit or MaxResultBytes is passed.
var errEnough = errors.New("row limit reached")

// readSession runs fn on a PostgreSQL read connection of its own and then
// resets the session with DISCARD ALL (which also releases advisory locks,
// settings, prepared statements, LISTENs and temporary objects), so
// nothing fn's statements left survives into the next job. A connection
// that cannot be reset is closed instead of going back to the pool.
func (c *conn) readSession(ctx context.Context, fn func(*sql.Conn) error) error {
	conn, err := c.read.Conn(ctx)
	if err != nil {
		return dbError(err)
	}
	defer conn.Close()
	ferr := fn(conn)
	// The job's context may have run out; the reset gets its own.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := conn.ExecContext(rctx, "DISCARD ALL"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	return ferr
}

// readOnlyTx runs fn in a READ ONLY transaction with a statement timeout,
// and rolls it back.
func readOnlyTx(ctx context.Context, conn *sql.Conn, timeout time.Duration, fn func(*sql.Tx) error) error {
	// The transaction is not bound to ctx, whose statements still are: a
	// Tx bound to it is rolled back from another goroutine when ctx ends,
	// which closes conn there while readSession goes on to reset it — and
	// database/sql can then hand that reset a closed connection (a nil
	// driver connection: it panicked once in CI after a read's timeout).
	// The deferred Rollback ends it here instead.
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return dbError(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("SET LOCAL statement_timeout = %d", timeout.Milliseconds())); err != nil {
		return dbError(err)
	}
	return fn(tx)
}

// readRows reads up to limit rows and MaxResultBytes, and notes whether
// more were there.
func readRows(rows *sql.Rows, limit int) (*Result, error) {
	cols, err := rows.Columns()
	if err != nil {
		return nil, dbError(err)
	}
	c := newCollector(cols, limit)
	for rows.Next() {
		if c.atLimit() {
			break
		}
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, dbError(err)
		}
		if c.add(vals) != nil {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return nil, dbError(err)
	}
	return c.res, nil
}

// jsonValue turns a driver value into one JSON can carry.
func jsonValue(v any) any {
	switch x := v.(type) {
	case nil, bool, int64, float64:
		return x
	case string:
		return utf8x.Valid(x)
	case int:
		return int64(x)
	case uint64:
		// MySQL's unsigned BIGINT (COUNT, RANK): a number while it fits.
		if x <= math.MaxInt64 {
			return int64(x)
		}
		return strconv.FormatUint(x, 10)
	case int32:
		return int64(x)
	case float32:
		return float64(x)
	case []byte:
		if utf8.Valid(x) {
			return string(x)
		}
		return base64.StdEncoding.EncodeToString(x)
	case time.Time:
		return x.Format(time.RFC3339Nano)
	default:
		return fmt.Sprint(x)
	}
}
