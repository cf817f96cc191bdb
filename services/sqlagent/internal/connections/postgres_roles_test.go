package connections_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
)

// TestPostgresSessionReset: nothing a read job leaves on its pooled session
// survives into the next job. The functions here are labelled STABLE by
// their owner although they take a session-level advisory lock and change
// a setting, so the server-side check lets them run (it trusts the label);
// the reset after the job must undo what they did.
func TestPostgresSessionReset(t *testing.T) {
	t.Parallel()
	dsn := testkit.Postgres(t,
		`CREATE FUNCTION mislabeled_lock() RETURNS bool LANGUAGE sql STABLE AS 'SELECT pg_try_advisory_lock(4246)'`,
		`CREATE FUNCTION mislabeled_setting() RETURNS text LANGUAGE sql STABLE AS $$SELECT set_config('work_mem', '77MB', false)$$`,
	)
	reg, own := openPostgres(t, dsn, connections.Spec{Name: "wh", Dialect: connections.Postgres, DSN: dsn})
	ctx := context.Background()
	query := func(q string) []any {
		t.Helper()
		res, err := reg.Query(ctx, "wh", q, 10, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return res.Rows[0]
	}
	advisoryLocks := func() int {
		t.Helper()
		var n int
		if err := own.QueryRowContext(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	pid := query("SELECT pg_backend_pid()")[0]
	if got := query("SELECT mislabeled_lock()")[0]; got != true {
		t.Fatalf("mislabeled_lock() = %v, want true (it took the lock)", got)
	}
	if n := advisoryLocks(); n != 0 {
		t.Fatalf("%d advisory locks after the job, want 0: the session was not reset", n)
	}
	query("SELECT mislabeled_setting()")
	row := query("SELECT current_setting('work_mem'), pg_backend_pid(), (SELECT count(*) FROM pg_prepared_statements)")
	if row[1] != pid {
		t.Fatalf("the jobs ran on backends %v and %v; the test needs the pooled session reused", pid, row[1])
	}
	if row[0] != "4MB" || row[2] != int64(0) {
		t.Fatalf("next job sees work_mem %v and %v prepared statements; want the default 4MB and none", row[0], row[2])
	}
	var temps int
	if err := own.QueryRowContext(ctx, "SELECT count(*) FROM pg_class WHERE relpersistence = 't'").Scan(&temps); err != nil || temps != 0 {
		t.Fatalf("%d temporary relations left, %v; want none (the check's view is rolled back)", temps, err)
	}
	// Not vacuous: outside the agent the function's lock does stay.
	var took bool
	if err := own.QueryRowContext(ctx, "SELECT mislabeled_lock()").Scan(&took); err != nil || !took || advisoryLocks() != 1 {
		t.Fatalf("outside the agent: took %v, %d advisory locks, %v; want the lock held", took, advisoryLocks(), err)
	}
}

// TestPostgresReadRole: a connection reads through its read DSN's role and
// writes through its own; the writable connection never runs the user's
// SQL (the writer cannot even read the source table, yet the copy works,
// types and values intact); AuditReadRoles reports roles with more than
// read rights and roles the check cannot run under, and such a role's
// queries fail closed.
func TestPostgresReadRole(t *testing.T) {
	t.Parallel()
	dsn := testkit.Postgres(t,
		`CREATE ROLE reader LOGIN`,
		`CREATE ROLE writer LOGIN`,
		`CREATE ROLE signaler LOGIN`,
		`CREATE ROLE notemp LOGIN`,
		`CREATE ROLE watcher LOGIN`,
		`GRANT pg_signal_backend TO signaler`,
		`GRANT pg_monitor TO watcher`,
		`GRANT CREATE ON SCHEMA public TO writer`,
		`REVOKE TEMPORARY ON DATABASE postgres FROM PUBLIC`,
		`GRANT TEMPORARY ON DATABASE postgres TO reader, writer, signaler, watcher`,
		`CREATE TABLE src (id int, amount numeric(10,2), at timestamptz, tags text[], doc jsonb, raw bytea, note text, span int4range)`,
		`INSERT INTO src VALUES (1, 12.50, '2026-01-02T03:04:05.123456Z', '{a,"b c"}', '{"k": [1, 2]}', '\x00ff', 'it''s', '[1,5)'),
			(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL), (3, -0.01, '1999-12-31T23:59:59Z', '{}', 'null', '\x', E'tab\there', 'empty')`,
		`GRANT SELECT ON src TO reader`,
	)
	reg, own := openPostgres(t, dsn,
		connections.Spec{Name: "wh", Dialect: connections.Postgres, DSN: asUser(t, dsn, "writer"), ReadDSN: asUser(t, dsn, "reader")},
		connections.Spec{Name: "ro", Dialect: connections.Postgres, ReadDSN: asUser(t, dsn, "reader")},
		connections.Spec{Name: "su", Dialect: connections.Postgres, DSN: dsn},
		connections.Spec{Name: "sig", Dialect: connections.Postgres, DSN: asUser(t, dsn, "signaler")},
		connections.Spec{Name: "nt", Dialect: connections.Postgres, DSN: asUser(t, dsn, "notemp")},
		connections.Spec{Name: "mon", Dialect: connections.Postgres, DSN: asUser(t, dsn, "watcher")},
	)
	ctx := context.Background()

	res, err := reg.Query(ctx, "wh", "SELECT current_user", 1, 5*time.Second)
	if err != nil || res.Rows[0][0] != "reader" {
		t.Fatalf("reads run as %v, %v; want reader", res, err)
	}
	n, err := reg.WriteTable(ctx, "wh", "SELECT * FROM src", "copy", connections.WriteCreate, 5*time.Second)
	if err != nil || n != 3 {
		t.Fatalf("WriteTable: %d, %v; want 3 rows", n, err)
	}
	var types, owner string
	var same bool
	err = own.QueryRowContext(ctx, `SELECT string_agg(format_type(atttypid, atttypmod), ',' ORDER BY attnum),
			(SELECT tableowner FROM pg_tables WHERE tablename = 'copy'),
			(SELECT string_agg(s::text, ';' ORDER BY id) FROM src s) = (SELECT string_agg(c::text, ';' ORDER BY id) FROM copy c)
		FROM pg_attribute WHERE attrelid = 'copy'::regclass AND attnum > 0`).Scan(&types, &owner, &same)
	if err != nil {
		t.Fatal(err)
	}
	if want := "integer,numeric(10,2),timestamp with time zone,text[],jsonb,bytea,text,int4range"; types != want || owner != "writer" || !same {
		t.Fatalf("copy: types %s, owner %s, same rows %v; want %s, writer, true", types, owner, same, want)
	}
	// Columns with one name get told apart; other modes keep working.
	if _, err := reg.WriteTable(ctx, "wh", "SELECT id AS a, note AS a FROM src", "dup", connections.WriteCreate, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var cols string
	if err := own.QueryRowContext(ctx, `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = 'dup'::regclass AND attnum > 0`).Scan(&cols); err != nil || cols != "a,a_2" {
		t.Fatalf("dup columns %q, %v; want a,a_2", cols, err)
	}
	if n, err := reg.WriteTable(ctx, "wh", "SELECT id AS a, note AS a FROM src WHERE id = 1", "dup", connections.WriteTruncate, 5*time.Second); err != nil || n != 1 {
		t.Fatalf("truncate: %d, %v", n, err)
	}
	if _, err := reg.WriteTable(ctx, "wh", "SELECT 1", "dup", connections.WriteCreate, 5*time.Second); !errors.Is(err, connections.ErrQuery) || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("create over an existing table: %v", err)
	}
	// A refused query writes nothing, not even the table.
	if _, err := reg.WriteTable(ctx, "wh", "SELECT pg_terminate_backend(pg_backend_pid())", "nope", connections.WriteCreate, 5*time.Second); !errors.Is(err, connections.ErrRefused) {
		t.Fatalf("WriteTable of a refused query: %v, want ErrRefused", err)
	}
	var exists bool
	if err := own.QueryRowContext(ctx, "SELECT to_regclass('nope') IS NOT NULL").Scan(&exists); err != nil || exists {
		t.Fatalf("table nope exists %v, %v; want it never created", exists, err)
	}
	// A connection with only a read DSN takes no writes.
	if _, err := reg.WriteTable(ctx, "ro", "SELECT 1", "x", connections.WriteCreate, 5*time.Second); !errors.Is(err, connections.ErrQuery) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("WriteTable on a read-only connection: %v", err)
	}

	audits := reg.AuditReadRoles(ctx)
	got := map[string]connections.RoleAudit{}
	for _, a := range audits {
		got[a.Connection] = a
	}
	for name, want := range map[string]struct {
		role, excess string
		problem      bool
	}{
		"wh":  {"reader", "", false},
		"ro":  {"reader", "", false},
		"su":  {"am", "superuser", false},
		"sig": {"signaler", "pg_signal_backend", false},
		"mon": {"watcher", "pg_read_all_stats", false}, // through pg_monitor
		"nt":  {"notemp", "", true},
	} {
		a := got[name]
		if a.Err != nil || a.Role != want.role || strings.Join(a.Excess, ",") != want.excess || (len(a.Problems) > 0) != want.problem {
			t.Errorf("audit of %s = %+v; want role %s, excess %q, a problem: %v", name, a, want.role, want.excess, want.problem)
		}
	}
	// What the audit warns of: a member of pg_read_all_stats reads other
	// sessions' SQL as it runs.
	other, err := own.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.ExecContext(ctx, "SELECT 'a secret in another session', pg_sleep(0)"); err != nil {
		t.Fatal(err)
	}
	for name, sees := range map[string]bool{"mon": true, "ro": false} {
		res, err := reg.Query(ctx, name, "SELECT query FROM pg_stat_activity WHERE query LIKE '%a secret in another%' AND pid <> pg_backend_pid()", 10, 5*time.Second)
		if err != nil || (len(res.Rows) > 0 && res.Rows[0][0] != nil) != sees {
			t.Errorf("%s reading another session's SQL: %v, %v; want it seen: %v", name, res, err, sees)
		}
	}
	if !slices.IsSortedFunc(audits, func(a, b connections.RoleAudit) int { return strings.Compare(a.Connection, b.Connection) }) {
		t.Errorf("audits not sorted by connection: %v", audits)
	}
	if _, err := reg.Query(ctx, "nt", "SELECT 1", 1, 5*time.Second); !errors.Is(err, connections.ErrQuery) || !strings.Contains(err.Error(), "temporary") {
		t.Fatalf("query as a role without TEMPORARY: %v, want it to fail closed naming the privilege", err)
	}
}

// openPostgres opens a registry of specs and the test's own superuser
// handle on dsn, both closed in t.Cleanup.
func openPostgres(t *testing.T, dsn string, specs ...connections.Spec) (*connections.Registry, *sql.DB) {
	t.Helper()
	reg, err := connections.Open(specs, connections.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	own, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Close() })
	return reg, own
}
