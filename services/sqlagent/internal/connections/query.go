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
)

// Result is a query result cut at the row limit.
type Result struct {
	// Columns are the column names in order.
	Columns []string
	// Rows hold JSON-friendly values: nil, bool, int64, float64, string
	// (times as RFC 3339, non-UTF-8 bytes as base64).
	Rows [][]any
	// Truncated is true when the query had more rows than the limit.
	Truncated bool
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
	res := &Result{Rows: [][]any{}}
	err = c.guard.stream(ctx, sqlText, func(cols []column) error {
		for _, col := range cols {
			res.Columns = append(res.Columns, col.name)
		}
		return nil
	}, func(vals []any) error {
		if len(res.Rows) == limit {
			res.Truncated = true
			return errEnough
		}
		for i, v := range vals {
			vals[i] = jsonValue(v)
		}
		res.Rows = append(res.Rows, vals)
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, err
	}
	return res, nil
}

// errEnough stops a stream once the row limit is passed.
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

// readRows reads up to limit rows and notes whether more were there.
func readRows(rows *sql.Rows, limit int) (*Result, error) {
	cols, err := rows.Columns()
	if err != nil {
		return nil, dbError(err)
	}
	res := &Result{Columns: cols, Rows: [][]any{}}
	for rows.Next() {
		if len(res.Rows) == limit {
			res.Truncated = true
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
		for i, v := range vals {
			vals[i] = jsonValue(v)
		}
		res.Rows = append(res.Rows, vals)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError(err)
	}
	return res, nil
}

// jsonValue turns a driver value into one JSON can carry.
func jsonValue(v any) any {
	switch x := v.(type) {
	case nil, bool, int64, float64, string:
		return x
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
