package connections_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/safety"
)

// sqliteAttacks are statements a read job must not let change anything,
// from "SQL As Understood By SQLite" (every statement that writes,
// ATTACH, VACUUM INTO, PRAGMA and the PRAGMA table functions, RETURNING,
// UPSERT, CTEs before DML), the "Keywords" page's four identifier quotes,
// the shell's file functions, comments and parameters. {dir} is the
// database's directory and {db} its path.
var sqliteAttacks = []attack{
	{"delete", "DELETE FROM Artist"},
	{"delete bracket-quoted", "DELETE FROM [Artist]"},
	{"delete backtick-quoted", "DELETE FROM `Artist`"},
	{"delete double-quoted", `DELETE FROM "Artist"`},
	{"update", "UPDATE Artist SET Name = 'x'"},
	{"insert", "INSERT INTO Genre (Name) VALUES ('x')"},
	{"insert or replace", "INSERT OR REPLACE INTO Genre VALUES (1, 'x')"},
	{"replace", "REPLACE INTO Genre VALUES (1, 'x')"},
	{"upsert", "INSERT INTO Genre VALUES (1, 'x') ON CONFLICT (GenreId) DO UPDATE SET Name = 'y'"},
	{"delete returning", "DELETE FROM Genre RETURNING *"},
	{"update returning", "UPDATE Genre SET Name = Name || '!' RETURNING *"},
	{"insert returning", "INSERT INTO Genre (Name) VALUES ('x') RETURNING GenreId"},
	{"cte then delete", "WITH x AS (SELECT 1) DELETE FROM Genre"},
	{"cte then insert", "WITH x AS (SELECT 1) INSERT INTO Genre (Name) SELECT 'x' FROM x"},
	{"cte then update", "WITH x AS (SELECT 1) UPDATE Genre SET Name = 'x'"},
	{"drop table", "DROP TABLE Genre"},
	{"drop view", "DROP VIEW IF EXISTS v"},
	{"drop index", "DROP INDEX IF EXISTS IFK_AlbumArtistId"},
	{"drop trigger", "DROP TRIGGER IF EXISTS t"},
	{"create table", "CREATE TABLE evil (x)"},
	{"create table as", "CREATE TABLE evil AS SELECT * FROM Genre"},
	{"create table if not exists", "CREATE TABLE IF NOT EXISTS Artist (x)"},
	{"create temp table", "CREATE TEMP TABLE t (x)"},
	{"insert into temp", "INSERT INTO temp.x VALUES (1)"},
	{"create index", "CREATE INDEX ix ON Genre (Name)"},
	{"create view", "CREATE VIEW v AS SELECT 1"},
	{"create trigger", "CREATE TRIGGER tr AFTER INSERT ON Genre BEGIN DELETE FROM Artist; END"},
	{"create virtual table fts5", "CREATE VIRTUAL TABLE ft USING fts5(a)"},
	{"create virtual table temp", "CREATE VIRTUAL TABLE temp.j USING json_each"},
	{"alter add column", "ALTER TABLE Genre ADD COLUMN x"},
	{"alter rename", "ALTER TABLE Genre RENAME TO g2"},
	{"attach a new file", "ATTACH DATABASE '{dir}/new.db' AS n"},
	{"attach with mode=rwc", "ATTACH 'file:{dir}/new2.db?mode=rwc' AS n"},
	{"attach the database again", "ATTACH DATABASE '{db}' AS again"},
	{"attach memory", "ATTACH ':memory:' AS m"},
	{"detach", "DETACH DATABASE main"},
	{"pragma journal_mode", "PRAGMA journal_mode = WAL"},
	{"pragma user_version", "PRAGMA user_version = 5"},
	{"pragma writable_schema", "PRAGMA writable_schema = 1"},
	{"pragma query_only off", "PRAGMA query_only = 0"},
	{"pragma locking_mode", "PRAGMA locking_mode = EXCLUSIVE"},
	{"pragma wal_checkpoint", "PRAGMA wal_checkpoint"},
	{"pragma optimize", "PRAGMA optimize"},
	{"pragma incremental_vacuum", "PRAGMA incremental_vacuum"},
	{"pragma foreign_keys", "PRAGMA foreign_keys = ON"},
	{"pragma schema_version", "PRAGMA schema_version = 1"},
	{"pragma page_size", "PRAGMA main.page_size = 1024"},
	{"pragma table_info statement", "PRAGMA table_info('Artist')"},
	{"pragma data_version statement", "PRAGMA data_version"},
	{"vacuum", "VACUUM"},
	{"vacuum into", "VACUUM INTO '{dir}/copy.db'"},
	{"reindex", "REINDEX"},
	{"analyze", "ANALYZE"},
	{"begin", "BEGIN"},
	{"begin immediate", "BEGIN IMMEDIATE"},
	{"begin exclusive", "BEGIN EXCLUSIVE"},
	{"commit", "COMMIT"},
	{"savepoint", "SAVEPOINT s"},
	{"release", "RELEASE s"},
	{"rollback", "ROLLBACK"},
	{"explain delete", "EXPLAIN DELETE FROM Artist"},
	{"explain query plan", "EXPLAIN QUERY PLAN SELECT 1"},
	{"delete from sqlite_master", "DELETE FROM sqlite_master"},
	{"update sqlite_master", "UPDATE sqlite_master SET sql = 'x'"},
	// A second statement, however it is hidden.
	{"second statement", "SELECT 1; DELETE FROM Artist"},
	{"semicolon in a comment", "SELECT 1 /* ; */; DELETE FROM Artist"},
	{"after a line comment", "SELECT 1 -- x\n; DELETE FROM Artist"},
	{"comment ends at the first close", "SELECT 1 /* /* */ ; DELETE FROM Artist -- */"},
	{"line comment runs past a carriage return", "SELECT 1 -- x\r; DELETE FROM Artist"},
	{"quote in a string", "SELECT 'a'';DELETE FROM Artist;--'"},
	{"after a quoted identifier", `SELECT "a"; DELETE FROM Artist`},
	{"after a bracket identifier", "SELECT [a;b] FROM Artist; DELETE FROM Artist"},
	{"after a blob", "SELECT x'00'; DROP TABLE Genre"},
	{"after values", "VALUES (1); DELETE FROM Artist"},
	{"after a table function", "SELECT * FROM json_each('[1]'); DROP TABLE Genre"},
	{"then vacuum", "SELECT * FROM Artist; VACUUM"},
	{"then pragma", "SELECT * FROM Artist WHERE ArtistId = 1 OR 1 = 1; PRAGMA writable_schema = ON"},
	{"then attach", "SELECT * FROM Artist LIMIT 1; ATTACH '{dir}/x.db' AS x"},
	// Functions with effects, in every quoting.
	{"load_extension", "SELECT load_extension('{dir}/evil.so')"},
	{"load_extension double-quoted", `SELECT "load_extension"('x')`},
	{"load_extension bracket-quoted", "SELECT [load_extension]('x')"},
	{"load_extension backtick-quoted", "SELECT `load_extension`('x')"},
	{"load_extension upper case", "SELECT LOAD_EXTENSION('x')"},
	{"load_extension with entry point", "SELECT load_extension('x', 'sqlite3_x_init')"},
	{"writefile", "SELECT writefile('{dir}/w', 'x')"},
	{"readfile", "SELECT readfile('/etc/hostname')"},
	{"edit", "SELECT edit('x')"},
	{"fts3_tokenizer", "SELECT fts3_tokenizer('simple')"},
	{"zipfile", "SELECT * FROM zipfile('{dir}/x.zip')"},
	// Raw pages, freed ones (deleted rows) included.
	{"sqlite_dbpage", "SELECT * FROM sqlite_dbpage"},
	{"sqlite_dbpage schema-qualified", "SELECT data FROM main.sqlite_dbpage WHERE pgno = 2"},
	{"sqlite_dbpage with a schema argument", "SELECT data FROM sqlite_dbpage('main')"},
	{"sqlite_dbpage double-quoted", `SELECT * FROM "sqlite_dbpage"`},
	{"sqlite_dbpage upper case", "SELECT * FROM SQLITE_DBPAGE"},
	{"sqlite_dbpage in a subquery", "SELECT (SELECT count(*) FROM sqlite_dbpage)"},
	{"sqlite_dbpage in a cte", "WITH p AS (SELECT data FROM sqlite_dbpage) SELECT hex(data) FROM p LIMIT 1"},
	{"update sqlite_dbpage", "UPDATE sqlite_dbpage SET data = zeroblob(4096) WHERE pgno = 2"},
	{"view over sqlite_dbpage", "SELECT * FROM v_pages"},
	{"sqlar_compress", "SELECT sqlar_compress('x')"},
	// PRAGMA table functions outside the read-only list.
	{"pragma function without parentheses", "SELECT * FROM pragma_database_list"},
	{"pragma function", "SELECT * FROM pragma_database_list()"},
	{"pragma function bracket-quoted", "SELECT * FROM [pragma_database_list]"},
	{"pragma function double-quoted", `SELECT * FROM "pragma_database_list"`},
	{"pragma function backtick-quoted", "SELECT * FROM `pragma_database_list`"},
	{"pragma function as a string", "SELECT * FROM 'pragma_database_list'"},
	{"pragma function schema-qualified", "SELECT * FROM main.pragma_database_list"},
	{"pragma function upper case", "SELECT * FROM PRAGMA_DATABASE_LIST"},
	{"compile options", "SELECT * FROM pragma_compile_options"},
	{"function list", "SELECT * FROM pragma_function_list"},
	{"module list", "SELECT * FROM pragma_module_list"},
	{"pragma list", "SELECT * FROM pragma_pragma_list"},
	{"integrity check", "SELECT * FROM pragma_integrity_check"},
	{"quick check", "SELECT * FROM pragma_quick_check"},
	{"user_version function", "SELECT * FROM pragma_user_version"},
	{"user_version with an argument", "SELECT * FROM pragma_user_version(7)"},
	{"journal_mode function", "SELECT * FROM pragma_journal_mode"},
	{"journal_mode with an argument", "SELECT * FROM pragma_journal_mode('wal')"},
	{"foreign key check", "SELECT * FROM pragma_foreign_key_check"},
	{"allowed then refused pragma", "SELECT * FROM pragma_table_info('Artist') JOIN pragma_database_list"},
	{"pragma function in a subquery", "SELECT (SELECT file FROM pragma_database_list)"},
	{"pragma function in a join list", "SELECT * FROM pragma_index_list('Artist'), pragma_compile_options"},
	// Parameters (run unbound they would read NULL).
	{"question mark", "SELECT ?"},
	{"numbered", "SELECT ?1"},
	{"colon name", "SELECT :a"},
	{"at name", "SELECT @a"},
	{"dollar name", "SELECT $a"},
	// Views the database's owner made over what a query may not reach.
	{"view over load_extension", "SELECT * FROM v_ext"},
	{"view over a PRAGMA function", "SELECT * FROM v_paths"},
	{"view over that view", "SELECT * FROM v_paths2"},
	// Endless recursion: the row limit ends it.
	{"endless recursive cte", "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r"},
	// One function call that builds a gigabyte, never looking at an
	// interrupt: past the statement timeout without the length limit.
	{"gigabyte blob", "SELECT length(randomblob(999999999))"},
	{"gigabyte zero blob as text", "SELECT length(hex(zeroblob(600000000)))"},
}

// sqliteLegitimate are analyst queries on Chinook that must run.
var sqliteLegitimate = []attack{
	{"top artists", "SELECT ar.Name, count(*) AS albums FROM Artist ar JOIN Album al ON al.ArtistId = ar.ArtistId GROUP BY ar.Name ORDER BY albums DESC LIMIT 10"},
	{"cte", "WITH sales AS (SELECT CustomerId, sum(Total) AS spent FROM Invoice GROUP BY CustomerId) SELECT c.FirstName, c.LastName, s.spent FROM sales s JOIN Customer c USING (CustomerId) ORDER BY s.spent DESC LIMIT 5"},
	{"recursive cte", "WITH RECURSIVE chain(id, depth) AS (SELECT EmployeeId, 1 FROM Employee WHERE ReportsTo IS NULL UNION ALL SELECT e.EmployeeId, c.depth + 1 FROM Employee e JOIN chain c ON e.ReportsTo = c.id) SELECT * FROM chain"},
	{"recursive series", "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 10) SELECT sum(x) FROM n"},
	{"row_number", "SELECT * FROM (SELECT GenreId, Name, row_number() OVER (PARTITION BY GenreId ORDER BY Milliseconds DESC) AS rn FROM Track) WHERE rn = 1"},
	{"rank", "SELECT BillingCountry, Total, rank() OVER (PARTITION BY BillingCountry ORDER BY Total DESC) FROM Invoice LIMIT 20"},
	{"dense_rank", "SELECT Name, dense_rank() OVER (ORDER BY UnitPrice DESC) FROM Track LIMIT 5"},
	{"running total", "SELECT InvoiceDate, Total, sum(Total) OVER (ORDER BY InvoiceDate, InvoiceId) AS running FROM Invoice LIMIT 20"},
	{"moving average", "SELECT InvoiceId, avg(Total) OVER (ORDER BY InvoiceId ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM Invoice LIMIT 10"},
	{"lag lead", "SELECT InvoiceId, Total - lag(Total) OVER (ORDER BY InvoiceId), lead(Total) OVER (ORDER BY InvoiceId) FROM Invoice LIMIT 10"},
	{"ntile", "SELECT TrackId, ntile(4) OVER (ORDER BY UnitPrice, TrackId) FROM Track LIMIT 10"},
	{"percent_rank and cume_dist", "SELECT Total, percent_rank() OVER (ORDER BY Total), cume_dist() OVER (ORDER BY Total) FROM Invoice LIMIT 10"},
	{"first and last value", "SELECT DISTINCT GenreId, first_value(Name) OVER w, last_value(Name) OVER w FROM Track WINDOW w AS (PARTITION BY GenreId ORDER BY Name ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)"},
	{"nth_value", "SELECT AlbumId, nth_value(Name, 2) OVER (PARTITION BY AlbumId ORDER BY TrackId) FROM Track LIMIT 5"},
	{"filter", "SELECT count(*) FILTER (WHERE Total > 10) AS big, count(*) FILTER (WHERE Total <= 10) AS small FROM Invoice"},
	{"case", "SELECT Name, CASE WHEN Milliseconds > 300000 THEN 'long' WHEN Milliseconds > 180000 THEN 'medium' ELSE 'short' END FROM Track LIMIT 10"},
	{"iif", "SELECT Name, iif(UnitPrice > 0.99, 'video', 'audio') FROM Track LIMIT 5"},
	{"json_object", "SELECT json_object('artist', Name, 'id', ArtistId) FROM Artist LIMIT 5"},
	{"json_group_array", "SELECT ar.Name, json_group_array(al.Title) FROM Artist ar JOIN Album al ON al.ArtistId = ar.ArtistId GROUP BY ar.Name LIMIT 5"},
	{"json_extract", `SELECT json_extract('{"a": {"b": [1, 2, 3]}}', '$.a.b[1]')`},
	{"json arrow operators", `SELECT '{"a": {"b": 2}}' -> '$.a', '{"a": {"b": 2}}' ->> '$.a.b'`},
	{"json_each", `SELECT key, value FROM json_each('{"a": 1, "b": [1, 2]}')`},
	{"json_tree", `SELECT fullkey FROM json_tree('{"a": {"b": 1}}')`},
	{"json_array_length", "SELECT json_array_length(json_group_array(Name)) FROM Genre"},
	{"strftime", "SELECT strftime('%Y-%m', InvoiceDate) AS ym, sum(Total) FROM Invoice GROUP BY ym ORDER BY ym LIMIT 12"},
	{"date arithmetic", "SELECT InvoiceDate, date(InvoiceDate, '+1 month'), date(InvoiceDate, 'start of month', '-1 day') FROM Invoice LIMIT 5"},
	{"julianday", "SELECT julianday(HireDate) - julianday(BirthDate) FROM Employee"},
	{"datetime now", "SELECT datetime('now') > InvoiceDate FROM Invoice LIMIT 3"},
	{"weekday", "SELECT strftime('%w', InvoiceDate) AS dow, count(*) FROM Invoice GROUP BY dow"},
	{"having", "SELECT BillingCountry, count(*) FROM Invoice GROUP BY BillingCountry HAVING count(*) > 20"},
	{"exists", "SELECT Name FROM Artist ar WHERE EXISTS (SELECT 1 FROM Album al WHERE al.ArtistId = ar.ArtistId) LIMIT 5"},
	{"not in", "SELECT Name FROM Artist WHERE ArtistId NOT IN (SELECT ArtistId FROM Album) LIMIT 5"},
	{"union intersect except", "SELECT BillingCountry FROM Invoice EXCEPT SELECT Country FROM Employee UNION SELECT 'USA' INTERSECT SELECT Country FROM Customer"},
	{"like and glob", "SELECT Name FROM Track WHERE Name LIKE 'love%' OR Name GLOB 'A*' LIMIT 10"},
	{"string functions", "SELECT upper(Name), lower(Name), length(Name), substr(Name, 1, 3), instr(Name, 'a'), replace(Name, ' ', '_'), trim(Name) FROM Artist LIMIT 5"},
	{"printf", "SELECT printf('%s: %.2f', BillingCountry, sum(Total)) FROM Invoice GROUP BY BillingCountry LIMIT 5"},
	{"group_concat", "SELECT AlbumId, group_concat(Name, ', ') FROM Track GROUP BY AlbumId LIMIT 3"},
	{"aggregates", "SELECT round(avg(Total), 2), total(Total), max(Total), min(Total), count(DISTINCT CustomerId) FROM Invoice"},
	{"coalesce ifnull nullif", "SELECT coalesce(Company, 'none'), ifnull(State, '-'), nullif(Country, 'USA') FROM Customer LIMIT 5"},
	{"typeof and cast", "SELECT typeof(Total), CAST(Total AS INTEGER), CAST('42' AS REAL) FROM Invoice LIMIT 3"},
	{"left join", "SELECT ar.Name, al.Title FROM Artist ar LEFT JOIN Album al ON al.ArtistId = ar.ArtistId WHERE al.AlbumId IS NULL LIMIT 5"},
	{"cross join", "SELECT g.Name, v.x FROM Genre g CROSS JOIN (SELECT 1 AS x UNION ALL SELECT 2) v LIMIT 4"},
	{"limit offset", "SELECT Name FROM Track ORDER BY TrackId LIMIT 5 OFFSET 100"},
	{"distinct", "SELECT DISTINCT BillingCountry FROM Invoice ORDER BY 1"},
	{"sqlite_master", "SELECT name, type FROM sqlite_master WHERE type = 'table' ORDER BY name"},
	{"read-only pragma function", "SELECT name, type FROM pragma_table_info('Artist')"},
	{"pragma index list", "SELECT * FROM pragma_index_list('Track')"},
	{"values", "VALUES (1, 'one'), (2, 'two')"},
	{"hex and unicode", "SELECT hex(Name), unicode(Name), char(65, 66) FROM Genre LIMIT 3"},
	{"quoted identifiers and keywords in strings", `SELECT Name AS "delete", [Name] AS [update], 'DROP TABLE x; PRAGMA y' AS note FROM Genre LIMIT 2`},
	{"abs and random", "SELECT abs(random()) >= 0, randomblob(4) IS NOT NULL"},
	{"between and in", "SELECT count(*) FROM Track WHERE Milliseconds BETWEEN 200000 AND 300000 AND GenreId IN (1, 2, 3)"},
	{"scalar subquery", "SELECT Name, (SELECT count(*) FROM Track t WHERE t.AlbumId = a.AlbumId) FROM Album a JOIN Artist USING (ArtistId) LIMIT 5"},
}

// sqliteState hashes the database file and lists its directory.
func sqliteState(t *testing.T, dir, db string) serverState {
	t.Helper()
	b, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return serverState{"database": hex.EncodeToString(sum[:]), "directory": listDir(t, dir)}
}

// TestSQLiteAdversarial runs every attack twice on a copy of Chinook:
// through the whole chain (the token check, then the registry: SQLite's
// authorizer on a read-only handle) and straight into the registry (its
// locks alone), and compares the database file and its directory before
// and after each run. Then every analyst query must run, and the
// calibration shows the state check sees what the attacks would have done.
func TestSQLiteAdversarial(t *testing.T) {
	t.Parallel()
	db := connections.ChinookCopy(t)
	dir := filepath.Dir(db)
	own, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	ctx := context.Background()
	for _, q := range []string{
		"CREATE VIEW v_ext AS SELECT load_extension('x') AS x",
		"CREATE VIEW v_paths AS SELECT file FROM pragma_database_list",
		"CREATE VIEW v_paths2 AS SELECT * FROM v_paths",
		"CREATE VIEW v_pages AS SELECT pgno, data FROM sqlite_dbpage",
	} {
		if _, err := own.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	reg := openRegistry(t, connections.Spec{Name: "music", Dialect: connections.SQLite, DSN: db})
	s := attackSuite{
		dialect: safety.SQLite,
		expand:  strings.NewReplacer("{dir}", dir, "{db}", db).Replace,
		query:   func(q string) (*connections.Result, error) { return reg.Query(ctx, "music", q, 100, 5*time.Second) },
		state:   func() serverState { return sqliteState(t, dir, db) },
		harmless: map[string]bool{
			"line comment runs past a carriage return": true, // SQLite ends "--" only at \n
			"quote in a string":                        true, // the "statement" is a string
			"endless recursive cte":                    true, // the row limit ends it
			"pragma table_info statement":              true, // a read-only PRAGMA, allowed by the authorizer
			"explain query plan":                       true, // returns the plan, runs nothing
		},
	}
	s.runAll(t, "SQLite", sqliteAttacks, sqliteLegitimate, []string{
		"DELETE FROM Genre WHERE GenreId = 25",
		"PRAGMA user_version = 9",
		"CREATE TABLE evil (x)",
		"ATTACH '{dir}/new.db' AS n; CREATE TABLE n.t (x); DETACH n",
		"VACUUM INTO '{dir}/copy.db'",
	}, func(q string) error { _, err := own.ExecContext(ctx, q); return err })
}

// TestSQLiteReadEndsNearItsTimeout: a value built by one function call
// (randomblob, zeroblob made text) never reaches an interrupt, so the
// timeout alone let a read of one gigabyte run 18 s past a 5 s bound. The
// length limit fails it at once.
func TestSQLiteReadEndsNearItsTimeout(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "t.db")
	own, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := own.Exec("CREATE TABLE t (x)"); err != nil {
		t.Fatal(err)
	}
	own.Close()
	reg := openRegistry(t, connections.Spec{Name: "t", Dialect: connections.SQLite, DSN: db})
	const timeout = time.Second
	for _, q := range []string{
		"SELECT length(randomblob(999999999))",
		"SELECT length(hex(zeroblob(600000000)))",
		"SELECT length(randomblob(400000000)) + length(randomblob(400000000))",
	} {
		start := time.Now()
		_, err := reg.Query(context.Background(), "t", q, 10, timeout)
		took := time.Since(start)
		if err == nil || took > timeout+time.Second {
			t.Errorf("%s: ended after %v (%v); want an error within the %v timeout", q, took.Round(time.Millisecond), err, timeout)
		}
	}
}
