package connections

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/agentmesh/agentmesh/libs/testkit"
)

// A node tree as PostgreSQL 15 stores a view rule (abridged): the reader
// must find every OID field, read lists, and not be fooled by names that
// look like fields (outToken escapes their spaces and parentheses).
func TestTreeRefsScan(t *testing.T) {
	t.Parallel()
	tree := `({QUERY :commandType 1 :utilityStmt <> :hasModifyingCTE false :hasForUpdate false :rtable ({RANGETBLENTRY :alias <> ` +
		`:eref {ALIAS :aliasname x\ :funcid\ 999 :colnames ("a\ :opno\ 998" "b")} :rtekind 0 :relid 16389 :relkind v} ` +
		`{RANGETBLENTRY :rtekind 1 :relid 0 :subquery {QUERY :commandType 1 :utilityStmt <> :targetList ({TARGETENTRY :expr ` +
		`{FUNCEXPR :funcid 871 :funcresulttype 25 :args ({CONST :consttype 25 :constvalue 5 [ 20 0 0 0 120 ]})} :resname upper}) ` +
		`:groupClause ({SORTGROUPCLAUSE :tleSortGroupRef 1 :eqop 96 :sortop 521 :hashable true}) ` +
		`:jointree {FROMEXPR :quals {SCALARARRAYOPEXPR :opno 96 :opfuncid 65 :hashfuncid 0 :negfuncid 0}} ` +
		`:windowClause ({WINDOWCLAUSE :startInRangeFunc 4131 :endInRangeFunc 0}) :rowMarks <>}}) ` +
		`:cteList ({COMMONTABLEEXPR :ctename x :cycle_clause {CTECYCLECLAUSE :cycle_mark_type 16 :cycle_mark_neop 85}}) ` +
		`:jointree {FROMEXPR :quals {ROWCOMPAREEXPR :opnos (o 97 666) :inputcollids (o 0 0)}} ` +
		`:targetList ({TARGETENTRY :expr {WINDOWFUNC :winfnoid 2803 :wintype 20} :resname count} ` +
		`{TARGETENTRY :expr {AGGREF :aggfnoid 2147 :aggtype 20}} {TARGETENTRY :expr {COERCETODOMAIN :arg <> :resulttype 16400}}) ` +
		`:rowMarks <>})`
	r := newTreeRefs()
	r.scan(tree)
	want := map[string][]uint32{
		"funcs": {871, 65, 4131, 2803, 2147},
		"ops":   {96, 521, 97, 666, 85},
		"rels":  {16389},
		"types": {25, 20, 16400, 16},
	}
	got := map[string]map[uint32]bool{"funcs": r.funcs, "ops": r.ops, "rels": r.rels, "types": r.types}
	for kind, oids := range want {
		for _, oid := range oids {
			if !got[kind][oid] {
				t.Errorf("%s lacks %d: %v", kind, oid, got[kind])
			}
		}
		if len(got[kind]) != len(oids) {
			t.Errorf("%s = %v, want exactly %v", kind, got[kind], oids)
		}
	}
	if r.rowLocks || r.notSelect {
		t.Errorf("rowLocks %v, notSelect %v; want neither", r.rowLocks, r.notSelect)
	}
	for _, tc := range []struct{ tree, what string }{
		{`({QUERY :commandType 1 :rowMarks ({ROWMARKCLAUSE :rti 1 :strength 4})})`, "row locks"},
		{`({QUERY :commandType 1 :hasForUpdate true :rowMarks <>})`, "row locks"},
		{`({QUERY :commandType 3 :rowMarks <>})`, "not a select"},
		{`({QUERY :commandType 1 :utilityStmt {NOTIFYSTMT :conditionname x} :rowMarks <>})`, "not a select"},
		{`({QUERY :commandType 1 :hasModifyingCTE true :rowMarks <>})`, "not a select"},
	} {
		r := newTreeRefs()
		r.scan(tc.tree)
		if (tc.what == "row locks" && !r.rowLocks) || (tc.what == "not a select" && !r.notSelect) {
			t.Errorf("scan(%s) missed %s", tc.tree, tc.what)
		}
	}
}

func TestReadOnlyURI(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dsn, want string }{
		{"/data/chinook.db", "file:/data/chinook.db?mode=ro"},
		{"/data/a b%#.db", "file:/data/a%20b%25%23.db?mode=ro"},
		{"rel/x.db?_pragma=foreign_keys(1)", "file:rel/x.db?_pragma=foreign_keys%281%29&mode=ro"},
		{"file:/data/x.db?mode=rwc&cache=shared", "file:/data/x.db?cache=shared&mode=ro"},
		{":memory:", ":memory:"},
	} {
		if got := readOnlyURI(tc.dsn); got != tc.want {
			t.Errorf("readOnlyURI(%q) = %q, want %q", tc.dsn, got, tc.want)
		}
	}
}

// The handle SQLite queries run on is a lock on its own: with its
// authorizer removed it still refuses writes, and ATTACH and VACUUM INTO
// cannot create files (it is opened SQLITE_OPEN_READONLY; the driver's
// read-write open would leave empty files behind even with query_only).
func TestSQLiteHandleAloneIsReadOnly(t *testing.T) {
	t.Parallel()
	db := ChinookCopy(t)
	dir := filepath.Dir(db)
	h, err := openSQLiteHandle(readOnlyURI(db))
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	sqlite3.Xsqlite3_set_authorizer(h.tls, h.db, 0, 0)
	for _, q := range []string{
		"DELETE FROM Artist",
		"CREATE TABLE evil (x)",
		"PRAGMA user_version = 3",
		"ATTACH '" + dir + "/new.db' AS n; CREATE TABLE n.t (x)",
		"VACUUM INTO '" + dir + "/copy.db'",
		"VACUUM",
		"PRAGMA query_only = 0; DELETE FROM Artist",
	} {
		if err := h.exec(q); err == nil {
			t.Errorf("%q ran on the read-only handle", q)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("the directory holds %v after the attempts, want only the database", names)
	}
	own, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	var n, version int
	if err := own.QueryRow("SELECT (SELECT count(*) FROM Artist), (SELECT user_version FROM pragma_user_version)").Scan(&n, &version); err != nil || n != 275 || version != 0 {
		t.Errorf("artists %d, user_version %d, %v; want 275 and 0", n, version, err)
	}
}

// The PostgreSQL locks one at a time: the server-side check executes
// nothing (a refused volatile function with an effect outside the
// transaction leaves no trace, also where the planner would look at it),
// and the READ ONLY transaction on its own stops writes.
func TestPostgresLocksAlone(t *testing.T) {
	t.Parallel()
	dsn := testkit.Postgres(t,
		`CREATE EXTENSION dblink`,
		`CREATE TABLE effects (n int)`,
		`CREATE TABLE target (id int PRIMARY KEY, v text)`,
		`INSERT INTO target VALUES (1, 'a')`,
		`CREATE SEQUENCE s`,
	)
	u, _ := url.Parse(dsn)
	conninfo := "host=" + u.Hostname() + " port=" + u.Port() + " user=am dbname=postgres"
	own, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	ctx := context.Background()
	// A function whose effect outlives any transaction: it commits a row
	// through a second connection.
	if _, err := own.ExecContext(ctx, `CREATE FUNCTION side_effect() RETURNS int LANGUAGE sql VOLATILE AS $$
		SELECT CASE WHEN dblink_exec('`+conninfo+`', 'INSERT INTO effects VALUES (1)') IS NOT NULL THEN 1 ELSE 0 END $$`); err != nil {
		t.Fatal(err)
	}
	effects := func() int {
		var n int
		if err := own.QueryRowContext(ctx, "SELECT count(*) FROM effects").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The function works when called outside the agent.
	if _, err := own.ExecContext(ctx, "SELECT side_effect()"); err != nil || effects() != 1 {
		t.Fatalf("side_effect() outside the agent: %v, %d effects; want 1", err, effects())
	}
	pool, err := openPostgres(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c := &conn{spec: Spec{Name: "pg", Dialect: Postgres, DSN: dsn}, read: pool}

	for _, q := range []string{
		"SELECT side_effect()",
		"SELECT * FROM target WHERE id = side_effect()",
		"SELECT * FROM side_effect()",
		"SELECT * FROM target ORDER BY side_effect()",
		"WITH x AS MATERIALIZED (SELECT side_effect()) SELECT * FROM x",
	} {
		err := c.readSession(ctx, func(conn *sql.Conn) error { return checkPostgres(ctx, conn, q, 5*time.Second) })
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "side_effect") {
			t.Errorf("check(%q) = %v, want a refusal naming side_effect", q, err)
		}
	}
	if n := effects(); n != 1 {
		t.Fatalf("the check ran side_effect(): %d effects, want still 1", n)
	}

	for _, q := range []string{"DELETE FROM target", "INSERT INTO target VALUES (2, 'b')", "UPDATE target SET v = 'x'", "SELECT nextval('s')", "CREATE TABLE evil (x int)"} {
		err := c.readSession(ctx, func(conn *sql.Conn) error {
			return readOnlyTx(ctx, conn, 5*time.Second, func(tx *sql.Tx) error {
				rows, err := tx.QueryContext(ctx, q)
				if err != nil {
					return dbError(err)
				}
				defer rows.Close()
				for rows.Next() {
				}
				return dbError(rows.Err())
			})
		})
		if !errors.Is(err, ErrQuery) || !strings.Contains(err.Error(), "read-only transaction") {
			t.Errorf("%q in the READ ONLY transaction: %v, want it refused as read-only", q, err)
		}
	}
	var rows int
	var exists bool
	if err := own.QueryRowContext(ctx, "SELECT (SELECT count(*) FROM target WHERE v = 'a'), to_regclass('evil') IS NOT NULL").Scan(&rows, &exists); err != nil || rows != 1 || exists {
		t.Fatalf("target rows %d, evil exists %v, %v; want 1 and false", rows, exists, err)
	}
}

// A database's message quoting a stored value in bytes that are not
// UTF-8 (PostgreSQL's SQL_ASCII databases, SQLite's TEXT) reaches the
// user in a protobuf string: each such byte shows as U+FFFD.
func TestDBErrorIsUTF8(t *testing.T) {
	t.Parallel()
	err := dbError(errors.New("invalid input syntax for type integer: \"caf\xe9\""))
	if want := "invalid input syntax for type integer: \"caf\uFFFD\""; !errors.Is(err, ErrQuery) || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("dbError = %q, want ErrQuery ending %q", err, want)
	}
}
