package connections

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// WriteRows writes rows, values as Query returns them (nil, bool, int64,
// float64, string), under columns to table in schema ("" for the
// connection's current schema) on the named connection's writable pool,
// the way WriteTable writes: one transaction (MySQL: a staging table
// swapped in), the table created, or dropped or emptied first as mode
// says, values sent as parameters. It is for results computed here (a
// comparison of two queries): nothing of the user's runs on the writable
// connection. A column whose values are all integers is BIGINT, all
// numbers a double, all booleans BOOLEAN, anything else text. Errors are
// ErrUnknown, ErrUnavailable and ErrQuery (a connection without a write
// DSN, a bad name, an existing table with WriteCreate, the database's own
// failure).
func (r *Registry) WriteRows(ctx context.Context, name, schema, table string, mode WriteMode, columns []string, rows [][]any, timeout time.Duration) (int64, error) {
	c, err := r.get(name)
	if err != nil {
		return 0, err
	}
	kinds := make([]valueKind, len(columns))
	for i := range columns {
		kinds[i] = columnKind(rows, i)
	}
	return c.writeTo(ctx, schema, table, mode, timeout, func(w *tableWriter) error {
		cols := make([]column, len(columns))
		for i, name := range columns {
			cols[i] = kinds[i].column(c.spec.Dialect, name)
		}
		if err := w.columns(cols); err != nil {
			return err
		}
		for _, row := range rows {
			if len(row) != len(columns) {
				return fmt.Errorf("%w: a row has %d values for %d columns", ErrQuery, len(row), len(columns))
			}
			vals := make([]any, len(row))
			for i, v := range row {
				vals[i] = kinds[i].value(v)
			}
			if err := w.row(vals); err != nil {
				return err
			}
		}
		return nil
	})
}

// valueKind is the type WriteRows gives a column.
type valueKind int

const (
	kindText valueKind = iota
	kindInteger
	kindFloat
	kindBool
)

// columnKind is the narrowest kind that holds every value of column i.
func columnKind(rows [][]any, i int) valueKind {
	kind, seen := kindText, false
	for _, row := range rows {
		if i >= len(row) || row[i] == nil {
			continue
		}
		var k valueKind
		switch row[i].(type) {
		case int64:
			k = kindInteger
		case float64:
			k = kindFloat
		case bool:
			k = kindBool
		default:
			return kindText
		}
		switch {
		case !seen:
			kind, seen = k, true
		case kind == k:
		case (kind == kindInteger && k == kindFloat) || (kind == kindFloat && k == kindInteger):
			kind = kindFloat
		default:
			return kindText
		}
	}
	return kind
}

// column describes a column of kind k for tableWriter: PostgreSQL by type
// OID (int8, float8, bool, text), the others by declared type.
func (k valueKind) column(dialect, name string) column {
	col := column{name: name, typmod: -1}
	switch k {
	case kindInteger:
		col.oid, col.decl = 20, "BIGINT"
	case kindFloat:
		col.oid, col.decl = 701, "DOUBLE"
		if dialect == SQLite {
			col.decl = "REAL"
		}
	case kindBool:
		col.oid, col.decl = 16, "BOOLEAN"
	default:
		col.oid, col.decl = 25, "TEXT"
		if dialect == MySQL {
			col.decl = "LONGTEXT"
		}
	}
	return col
}

// value converts v for a column of kind k.
func (k valueKind) value(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case int64:
		switch k {
		case kindFloat:
			return float64(x)
		case kindText:
			return strconv.FormatInt(x, 10)
		}
	case float64:
		if k == kindText {
			return strconv.FormatFloat(x, 'g', -1, 64)
		}
	case bool:
		if k == kindText {
			return strconv.FormatBool(x)
		}
	case string:
	default:
		return fmt.Sprint(x)
	}
	return v
}
