package connections

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
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

// WriteTable runs the read query selectSQL (checked by the caller) and
// stores its full result in table on the named connection, in one
// transaction, and returns the number of rows written. This is the only
// write path of the agent; it uses a separate, writable pool.
func (r *Registry) WriteTable(ctx context.Context, name, selectSQL, table string, mode WriteMode, timeout time.Duration) (int64, error) {
	c, err := r.get(name)
	if err != nil {
		return 0, err
	}
	if err := ValidTableName(table); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrQuery, err)
	}
	c.writeOnce.Do(func() { c.write, c.writeErr = openDB(c.spec, false) })
	if c.writeErr != nil {
		return 0, fmt.Errorf("%w: %v", ErrUnavailable, c.writeErr)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tx, err := c.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, dbError(err)
	}
	defer func() { _ = tx.Rollback() }()
	q := `"` + table + `"`
	exists, err := tableExists(ctx, tx, c.spec.Dialect, table)
	if err != nil {
		return 0, dbError(err)
	}
	var stmts []string
	switch {
	case exists && mode == WriteDrop:
		stmts = []string{"DROP TABLE " + q, "CREATE TABLE " + q + " AS " + selectSQL}
	case exists && mode == WriteTruncate:
		stmts = []string{"DELETE FROM " + q, "INSERT INTO " + q + " " + selectSQL}
	case exists:
		return 0, fmt.Errorf("%w: table %s already exists", ErrQuery, table)
	default:
		stmts = []string{"CREATE TABLE " + q + " AS " + selectSQL}
	}
	for _, st := range stmts {
		if _, err := tx.ExecContext(ctx, st); err != nil {
			return 0, dbError(err)
		}
	}
	var n int64
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM "+q).Scan(&n); err != nil {
		return 0, dbError(err)
	}
	if err := tx.Commit(); err != nil {
		return 0, dbError(err)
	}
	return n, nil
}

func tableExists(ctx context.Context, tx *sql.Tx, dialect, table string) (bool, error) {
	var n int
	q := `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`
	if dialect == Postgres {
		q = `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1`
	}
	err := tx.QueryRowContext(ctx, q, table).Scan(&n)
	return n > 0, err
}
