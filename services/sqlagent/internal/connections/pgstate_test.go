package connections_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
)

// pgLab is a PostgreSQL server set up for attacks: the Chinook data, the
// extensions a read must not reach (dblink, adminpack, tsm_system_rows),
// objects a database owner might have made that hide volatile functions
// (a view, an operator, a cast, a domain, an aggregate, a row-level
// security policy), a sequence and a large object to tamper with, an idle
// "victim" session to kill, and a directory the server may write to.
type pgLab struct {
	// dsn logs in as the superuser "am" (the worst read role there is);
	// readerDSN as "reader", which may only SELECT.
	dsn, readerDSN string
	observer       *sql.DB
	victim         *sql.Conn
	victimPID      int
	dir, dataDir   string
	conninfo       string
}

// pgLabSetup is the SQL that pgLab runs after the Chinook script.
var pgLabSetup = []string{
	`CREATE EXTENSION dblink`,
	`CREATE EXTENSION adminpack`,
	`CREATE EXTENSION tsm_system_rows`,
	`CREATE EXTENSION tablefunc`,
	`CREATE EXTENSION xml2`,
	`CREATE TABLE target (id int PRIMARY KEY, v text)`,
	`INSERT INTO target VALUES (1, 'a'), (2, 'b')`,
	`CREATE SEQUENCE order_seq`,
	`SELECT lo_from_bytea(424242, 'secret')`,
	// A volatile function of the database owner's, and views over it.
	`CREATE FUNCTION grab_lock(k int DEFAULT 4242) RETURNS bool LANGUAGE sql VOLATILE AS 'SELECT pg_try_advisory_lock(k)'`,
	`CREATE FUNCTION with_default(k bool DEFAULT pg_try_advisory_lock(73)) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT k'`,
	`CREATE VIEW v_sneaky AS SELECT album_id, pg_try_advisory_lock(4243) AS took FROM album`,
	`CREATE VIEW v_nested AS SELECT album_id FROM v_sneaky`,
	`CREATE VIEW v_terminate AS SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity WHERE application_name = 'victim'`,
	// An operator, a cast (explicit and implicit), a domain and an
	// aggregate, each over a volatile function.
	`CREATE FUNCTION lock_eq(a int, b int) RETURNS bool LANGUAGE sql VOLATILE AS 'SELECT pg_try_advisory_lock(a) AND a = b'`,
	`CREATE OPERATOR === (LEFTARG = int, RIGHTARG = int, FUNCTION = lock_eq)`,
	`CREATE TYPE pair AS (a int, b int)`,
	`CREATE FUNCTION int_to_pair(int) RETURNS pair LANGUAGE sql VOLATILE AS 'SELECT ROW($1, CASE WHEN pg_try_advisory_lock($1) THEN 1 ELSE 0 END)::pair'`,
	`CREATE CAST (int AS pair) WITH FUNCTION int_to_pair(int) AS IMPLICIT`,
	`CREATE FUNCTION pair_a(pair) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT ($1).a'`,
	`CREATE DOMAIN locked_int AS int CHECK (grab_lock(VALUE))`,
	`CREATE FUNCTION lock_add(s int, v int) RETURNS int LANGUAGE sql VOLATILE AS 'SELECT CASE WHEN pg_try_advisory_lock(4244) THEN coalesce(s, 0) + v ELSE coalesce(s, 0) + v END'`,
	`CREATE AGGREGATE sneaky_sum(int) (SFUNC = lock_add, STYPE = int)`,
	`CREATE TABLE secret (id int, v text)`,
	`INSERT INTO secret VALUES (1, 'x')`,
	`ALTER TABLE secret ENABLE ROW LEVEL SECURITY`,
	`CREATE POLICY p_lock ON secret USING (grab_lock(4245))`,
	`CREATE PROCEDURE wipe() LANGUAGE sql AS 'DELETE FROM target'`,
	`CREATE MATERIALIZED VIEW mv AS SELECT 1 AS x`,
	// Partitions and an inheritance child, all local: read through their
	// parents by analysts' queries.
	`CREATE TABLE sales (id int, region text) PARTITION BY LIST (region)`,
	`CREATE TABLE sales_eu PARTITION OF sales FOR VALUES IN ('eu')`,
	`CREATE TABLE sales_us PARTITION OF sales FOR VALUES IN ('us')`,
	`INSERT INTO sales VALUES (1, 'eu'), (2, 'us'), (3, 'us')`,
	`CREATE TABLE readings (id int, v int)`,
	`CREATE TABLE readings_2024 () INHERITS (readings)`,
	// Functions whose owner labelled them STABLE although they change
	// session state: the catalog check trusts the label, so these run;
	// the session reset after the job must undo what they did.
	`CREATE FUNCTION mislabeled_lock() RETURNS bool LANGUAGE sql STABLE AS 'SELECT pg_try_advisory_lock(4246)'`,
	`CREATE FUNCTION mislabeled_setting() RETURNS text LANGUAGE sql STABLE AS $$SELECT set_config('work_mem', '77MB', false)$$`,
	// A role that may only read.
	`CREATE ROLE reader LOGIN`,
	`GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader`,
}

// chinookPostgres returns the Chinook PostgreSQL script without its
// database switching (the server's "postgres" database is used), or skips.
func chinookPostgres(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(connections.SharedData(t, filepath.Join("chinook", "Chinook_PostgreSql.sql")))
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "DATABASE") && !strings.HasPrefix(line, `\c`) {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// withParam adds a query parameter to a URL DSN.
func withParam(t *testing.T, dsn, key, value string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// asUser returns dsn logging in as user.
func asUser(t *testing.T, dsn, user string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(user)
	return u.String()
}

func startPGLab(t *testing.T) *pgLab {
	t.Helper()
	chinook := chinookPostgres(t)
	dsn := testkit.Postgres(t, append([]string{chinook}, pgLabSetup...)...)
	lab := &pgLab{dsn: withParam(t, dsn, "application_name", "agentmesh_read")}
	lab.readerDSN = asUser(t, lab.dsn, "reader")
	var err error
	if lab.observer, err = sql.Open("pgx", withParam(t, dsn, "application_name", "observer")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lab.observer.Close() })
	victimDB, err := sql.Open("pgx", withParam(t, dsn, "application_name", "victim"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victimDB.Close() })
	ctx := context.Background()
	if lab.victim, err = victimDB.Conn(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lab.victim.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&lab.victimPID); err != nil {
		t.Fatal(err)
	}
	if err := lab.observer.QueryRowContext(ctx, "SHOW data_directory").Scan(&lab.dataDir); err != nil {
		t.Fatal(err)
	}
	// A directory the server (user postgres when the test runs as root) may
	// write to, with a file in it for the attacks to delete or rename.
	if lab.dir, err = os.MkdirTemp("", "agentmesh-attack-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(lab.dir) })
	if err := os.Chmod(lab.dir, 0o777); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(lab.dir, "keep.txt")
	if err := os.WriteFile(keep, []byte("keep"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(keep, 0o666); err != nil { // past the umask
		t.Fatal(err)
	}
	u, _ := url.Parse(dsn)
	lab.conninfo = fmt.Sprintf("host=%s port=%s user=am dbname=postgres application_name=dblink", u.Hostname(), u.Port())
	// Foreign tables (postgres_fdw) over this same server: reading one runs
	// a query on the remote side, whose views and functions no check here
	// can see; and ways to read one without naming it.
	for _, st := range []string{
		`CREATE EXTENSION postgres_fdw`,
		fmt.Sprintf(`CREATE SERVER loopback FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '%s', port '%s', dbname 'postgres', application_name 'fdw')`, u.Hostname(), u.Port()),
		`CREATE USER MAPPING FOR PUBLIC SERVER loopback OPTIONS (user 'am')`,
		`CREATE FOREIGN TABLE ft_sneaky (album_id int, took bool) SERVER loopback OPTIONS (table_name 'v_sneaky')`,
		`CREATE FOREIGN TABLE ft_target (id int, v text) SERVER loopback OPTIONS (table_name 'target')`,
		`CREATE FUNCTION remote_write() RETURNS int LANGUAGE sql VOLATILE AS 'SELECT nextval(''public.order_seq''); INSERT INTO public.target VALUES (99, ''fdw'') ON CONFLICT (id) DO UPDATE SET v = ''fdw again'' RETURNING id'`,
		`CREATE VIEW v_writes AS SELECT remote_write() AS id`,
		`CREATE FOREIGN TABLE ft_writes (id int) SERVER loopback OPTIONS (table_name 'v_writes')`,
		`CREATE VIEW v_foreign AS SELECT album_id FROM ft_sneaky`,
		`CREATE TABLE parted (album_id int, took bool) PARTITION BY LIST (album_id)`,
		`CREATE TABLE parted_local PARTITION OF parted FOR VALUES IN (0)`,
		`CREATE FOREIGN TABLE parted_remote PARTITION OF parted DEFAULT SERVER loopback OPTIONS (table_name 'v_sneaky')`,
		`CREATE TABLE inh_parent (album_id int, took bool)`,
		`CREATE FOREIGN TABLE inh_child () INHERITS (inh_parent) SERVER loopback OPTIONS (table_name 'v_sneaky')`,
	} {
		if _, err := lab.observer.ExecContext(ctx, st); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
	return lab
}

// expand fills the placeholders of an attack: {victim} (the victim's
// pid), {conninfo} (a libpq string for this server), {dir} (the writable
// directory).
func (lab *pgLab) expand(sqlText string) string {
	return strings.NewReplacer("{victim}", fmt.Sprint(lab.victimPID), "{conninfo}", lab.conninfo, "{dir}", lab.dir).Replace(sqlText)
}

// serverState is everything an attack could change, by aspect.
type serverState map[string]string

// state reads it: table contents and the schema, sequences, large objects,
// settings, roles, extensions, locks held by any other session, client
// backends other than the agent's own, replication slots, statistics reset
// times, the victim session's liveness, and the files in the attack
// directory and at the top of the data directory.
func (lab *pgLab) state(t *testing.T) serverState {
	t.Helper()
	ctx := context.Background()
	st := serverState{}
	one := func(aspect, q string) {
		var v sql.NullString
		if err := lab.observer.QueryRowContext(ctx, q).Scan(&v); err != nil {
			t.Fatalf("state %s: %v", aspect, err)
		}
		st[aspect] = v.String
	}
	rows, err := lab.observer.QueryContext(ctx, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p', 'm') AND n.nspname NOT LIKE 'pg\_%' AND n.nspname <> 'information_schema' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	rows.Close()
	for _, tbl := range tables {
		one("table "+tbl, `SELECT md5(coalesce(string_agg(x::text, E'\n' ORDER BY x::text), '')) FROM `+tbl+` x`)
	}
	one("schema", `SELECT md5(string_agg(format('%s.%s:%s:%s', n.nspname, c.relname, c.relkind, a.attname), ',' ORDER BY 1))
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
		WHERE n.nspname NOT LIKE 'pg\_%' AND n.nspname <> 'information_schema'`)
	one("functions", `SELECT string_agg(p.oid::regprocedure::text, ',' ORDER BY 1) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname NOT LIKE 'pg\_%' AND n.nspname <> 'information_schema'`)
	one("namespaces", `SELECT string_agg(nspname, ',' ORDER BY 1) FROM pg_namespace WHERE nspname NOT LIKE 'pg\_temp\_%' AND nspname NOT LIKE 'pg\_toast\_temp\_%'`)
	one("extensions", `SELECT string_agg(extname, ',' ORDER BY 1) FROM pg_extension`)
	one("roles", `SELECT string_agg(format('%s:%s:%s', rolname, rolsuper, rolcanlogin), ',' ORDER BY 1) FROM pg_roles`)
	one("grants", `SELECT md5(string_agg(coalesce(relacl::text, ''), ',' ORDER BY oid)) FROM pg_class WHERE relnamespace = 'public'::regnamespace`)
	one("sequence", `SELECT format('%s:%s', last_value, is_called) FROM order_seq`)
	one("large objects", `SELECT md5(coalesce(string_agg(format('%s:%s:%s', loid, pageno, encode(data, 'hex')), ',' ORDER BY loid, pageno), '')) FROM pg_largeobject`)
	one("settings", `SELECT md5(pg_read_file('postgresql.auto.conf')) || (SELECT count(*) FROM pg_db_role_setting)::text`)
	one("locks", `SELECT string_agg(format('%s/%s/%s/%s/%s', locktype, mode, granted, classid, objid), ',' ORDER BY 1) FROM pg_locks WHERE pid <> pg_backend_pid()`)
	one("backends", `SELECT string_agg(format('%s:%s', application_name, pid), ',' ORDER BY 1) FROM pg_stat_activity
		WHERE backend_type IN ('client backend', 'walsender') AND application_name <> 'agentmesh_read'`)
	one("slots", `SELECT string_agg(slot_name, ',' ORDER BY 1) FROM pg_replication_slots`)
	one("stats resets", `SELECT format('%s|%s|%s|%s', (SELECT stats_reset FROM pg_stat_database WHERE datname = current_database()),
		(SELECT stats_reset FROM pg_stat_bgwriter), (SELECT stats_reset FROM pg_stat_archiver), (SELECT stats_reset FROM pg_stat_wal))`)
	one("replication origins", `SELECT string_agg(roname, ',' ORDER BY 1) FROM pg_replication_origin`)
	var alive int
	if err := lab.victim.QueryRowContext(ctx, "SELECT 1").Scan(&alive); err != nil {
		st["victim"] = "dead: " + err.Error()
	} else {
		st["victim"] = "alive"
	}
	st["attack dir"] = listDir(t, lab.dir)
	st["data dir"] = listDir(t, lab.dataDir)
	return st
}

// listDir lists a directory's regular files with their sizes (not
// modification times: the server touches postmaster.pid on its own).
func listDir(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name()+"/")
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed while listing
		}
		if e.Name() == "postmaster.pid" {
			out = append(out, e.Name())
			continue
		}
		out = append(out, fmt.Sprintf("%s:%d", e.Name(), info.Size()))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// diff names the aspects that differ between two states.
func (s serverState) diff(after serverState) []string {
	var out []string
	for k, v := range s {
		if after[k] != v {
			out = append(out, fmt.Sprintf("%s: %q -> %q", k, v, after[k]))
		}
	}
	for k, v := range after {
		if _, ok := s[k]; !ok {
			out = append(out, fmt.Sprintf("%s: new %q", k, v))
		}
	}
	sort.Strings(out)
	return out
}
