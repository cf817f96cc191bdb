package safety_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/safety"
)

func TestRejectsWritesAndTricks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, sql string
		dialect   safety.Dialect
		reason    string // substring of the rejection reason
	}{
		{"delete", "DELETE FROM Track", safety.SQLite, "DELETE"},
		{"lower-case update", "update track set name = 'x'", safety.SQLite, "only SELECT"},
		{"insert", "INSERT INTO Artist (Name) VALUES ('x')", safety.SQLite, "only SELECT"},
		{"drop", "DROP TABLE Artist", safety.SQLite, "only SELECT"},
		{"create table as", "CREATE TABLE t AS SELECT * FROM Artist", safety.SQLite, "only SELECT"},
		{"alter", "ALTER TABLE Artist ADD COLUMN x", safety.Postgres, "only SELECT"},
		{"truncate", "TRUNCATE Artist", safety.Postgres, "only SELECT"},
		{"pragma", "PRAGMA writable_schema = 1", safety.SQLite, "only SELECT"},
		{"attach", "ATTACH DATABASE '/tmp/x.db' AS x", safety.SQLite, "only SELECT"},
		{"vacuum into", "VACUUM INTO '/tmp/copy.db'", safety.SQLite, "only SELECT"},
		{"replace statement", "REPLACE INTO Artist VALUES (1, 'x')", safety.SQLite, "only SELECT"},
		{"explain analyze", "EXPLAIN ANALYZE DELETE FROM t", safety.Postgres, "only SELECT"},
		{"begin", "BEGIN", safety.Postgres, "only SELECT"},
		{"second statement", "SELECT 1; DROP TABLE Artist", safety.SQLite, "one statement"},
		{"second statement after comment", "SELECT 1 /* ; */; DELETE FROM t", safety.SQLite, "one statement"},
		{"second select", "SELECT 1; SELECT 2", safety.SQLite, "one statement"},
		{"statement after line comment", "SELECT 1 -- harmless\n; DROP TABLE t", safety.SQLite, "one statement"},
		{"dml in cte", "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", safety.Postgres, "only SELECT"},
		{"update in cte", "WITH x AS (SELECT 1), d AS (UPDATE t SET a = 1 RETURNING a) SELECT * FROM d", safety.Postgres, "only SELECT"},
		{"with then insert", "WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", safety.Postgres, "only SELECT"},
		{"with then delete", "WITH x AS (SELECT 1) DELETE FROM t", safety.SQLite, "only SELECT"},
		{"select into", "SELECT * INTO newtable FROM Artist", safety.Postgres, "INTO"},
		{"for update", "SELECT * FROM Artist FOR UPDATE", safety.Postgres, "UPDATE"},
		{"for share", "SELECT * FROM Artist FOR SHARE", safety.Postgres, "row locking"},
		{"insert in subquery", "SELECT * FROM (INSERT INTO t VALUES (1) RETURNING *) s", safety.Postgres, "INSERT"},
		{"load_extension", "SELECT load_extension('/tmp/evil.so')", safety.SQLite, "load_extension"},
		{"writefile", "SELECT writefile('/tmp/x', 'data')", safety.SQLite, "writefile"},
		{"quoted function name", `SELECT "writefile"('/tmp/x', 'data')`, safety.SQLite, "writefile"},
		{"pg_read_file", "SELECT pg_read_file('/etc/passwd')", safety.Postgres, "pg_read_file"},
		{"qualified pg_sleep", "SELECT pg_catalog.pg_sleep(100)", safety.Postgres, "pg_sleep"},
		{"lo_export", "SELECT lo_export(1234, '/tmp/x')", safety.Postgres, "lo_export"},
		{"nextval", "SELECT nextval('seq')", safety.Postgres, "nextval"},
		{"set_config", "SELECT set_config('search_path', 'evil', false)", safety.Postgres, "set_config"},
		{"query_to_xml", "SELECT query_to_xml('DELETE FROM t', true, true, '')", safety.Postgres, "query_to_xml"},
		{"dblink_exec", "SELECT dblink_exec('host=x', 'DROP TABLE t')", safety.Postgres, "dblink_exec"},
		{"pragma function", "SELECT * FROM pragma_database_list()", safety.SQLite, "pragma_database_list"},
		{"pragma function without parentheses", "SELECT * FROM pragma_compile_options", safety.SQLite, "pragma_compile_options"},
		{"copy", "COPY (SELECT 1) TO '/tmp/x'", safety.Postgres, "only SELECT"},
		{"unterminated string", "SELECT 'abc", safety.SQLite, "unterminated"},
		{"unterminated comment", "SELECT 1 /* DROP TABLE t", safety.SQLite, "unterminated"},
		{"comment that SQLite ends early", "SELECT 1 /* /* */ ; DROP TABLE t; -- */", safety.SQLite, "one statement"},
		{"nested comment in MySQL", "SELECT 1 /* /* */ ; DROP TABLE t; -- */", safety.MySQL, "nested"},
		{"dollar quote hides statement end", "SELECT $x$ ; $x$; DROP TABLE t", safety.Postgres, "one statement"},
		{"backslash escape string", `SELECT E'\''; DROP TABLE t; --'`, safety.Postgres, "one statement"},
		{"bind parameter", "SELECT * FROM Artist WHERE ArtistId = ?", safety.SQLite, "bind parameters"},
		{"named parameter", "SELECT * FROM Artist WHERE ArtistId = :id", safety.SQLite, "bind parameters"},
		{"empty", "   ", safety.SQLite, "empty"},
		{"only comment", "-- nothing", safety.SQLite, "empty"},
		{"only semicolon", ";", safety.SQLite, "empty"},
		{"unbalanced parentheses", "SELECT (1", safety.SQLite, "unbalanced"},
		{"not sql", "show me the top customers", safety.SQLite, "only SELECT"},
		{"prose starting with punctuation", "[draft] the top customers", safety.SQLite, `starts with SELECT or WITH, not "[draft]"`},
		{"a quoted word, cut", `"abcdefghijklmnopqrstuvwxyzé" is the answer`, safety.SQLite, `not "\"abcdefghijklmnopqrstuvw…"`},
		// Names are decoded before they are judged.
		{"unicode-escaped function", `SELECT U&"\0070g_sleep"(1)`, safety.Postgres, "pg_sleep"},
		{"uescape function", `SELECT U&"!0070g_terminate_backend" UESCAPE '!' (1)`, safety.Postgres, "pg_terminate_backend"},
		{"unicode-escaped dblink", `SELECT U&"dblink\005Fexec"('x', 'DELETE FROM t')`, safety.Postgres, "dblink_exec"},
		{"bracket-quoted function", "SELECT [load_extension]('x')", safety.SQLite, "load_extension"},
		{"backtick-quoted function", "SELECT `load_extension`('x')", safety.SQLite, "load_extension"},
		{"pragma function as a string", "SELECT * FROM 'pragma_database_list'", safety.SQLite, "pragma_database_list"},
		{"pragma function bracket-quoted", "SELECT * FROM [PRAGMA_DATABASE_LIST]", safety.SQLite, "pragma_database_list"},
		{"lo_export", "SELECT lo_export(1, '/tmp/x')", safety.Postgres, "lo_export"},
		{"advisory lock", "SELECT pg_catalog.pg_advisory_lock(1)", safety.Postgres, "pg_advisory_lock"},
		{"listen", "SELECT 1 FROM t WHERE x IN (SELECT 1) LISTEN", safety.Postgres, "LISTEN"},
		{"nested comment hides a statement from SQLite only", "SELECT 1 /* /* */ ; DELETE FROM t", safety.SQLite, "one statement"},
		{"backslash before a quote", `SELECT 'a\'; DELETE FROM t; --'`, safety.Postgres, "ambiguous"},
		// MySQL.
		{"mysql executable comment hides a statement", "SELECT 1 /*! ; DROP TABLE t */", safety.MySQL, "semicolon"},
		{"mysql versioned executable comment", "SELECT 1 /*!50000 , SLEEP(5) */", safety.MySQL, "sleep"},
		{"mysql sleep", "SELECT SLEEP(5)", safety.MySQL, "sleep"},
		{"mysql benchmark", "SELECT BENCHMARK(1000000, md5('x'))", safety.MySQL, "benchmark"},
		{"mysql load_file", "SELECT LOAD_FILE('/etc/passwd')", safety.MySQL, "load_file"},
		{"mysql get_lock", "SELECT GET_LOCK('x', 10)", safety.MySQL, "get_lock"},
		{"mysql backtick function", "SELECT `sleep`(1)", safety.MySQL, "sleep"},
		{"mysql into outfile", "SELECT * FROM t INTO OUTFILE '/tmp/x'", safety.MySQL, "INTO"},
		{"mysql variable assignment", "SELECT @a := 1", safety.MySQL, "variables"},
		{"mysql system variable", "SELECT @@global.secure_file_priv", safety.MySQL, "variables"},
		{"mysql statement after hash comment", "SELECT 1 # x\n; DROP TABLE t", safety.MySQL, "one statement"},
		{"mysql backslash before a quote", `SELECT 'a\'; DROP TABLE t; -- '`, safety.MySQL, "ambiguous"},
		// A version-gated executable comment is read both ways: as code
		// (a newer server) and as a comment (an older one).
		{"mysql version gate hiding a call's parenthesis", "SELECT GET_LOCK /*!99999 x */ ('a', 0)", safety.MySQL, "get_lock"},
		{"mysql version gate hiding a comma", "SELECT 1 /*!99999 , 2 */ SLEEP(1)", safety.MySQL, "sleep"},
		{"mysql next value for", "SELECT NEXT VALUE FOR s", safety.MySQL, "NEXT VALUE"},
		{"mysql previous value for", "SELECT PREVIOUS VALUE FOR s", safety.MySQL, "PREVIOUS VALUE"},
		{"mysql procedure analyse", "SELECT * FROM t PROCEDURE ANALYSE()", safety.MySQL, "PROCEDURE"},
		{"mysql master_gtid_wait", "SELECT MASTER_GTID_WAIT('0-1-1', 1)", safety.MySQL, "master_gtid_wait"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := safety.Check(tc.sql, tc.dialect)
			if !errors.Is(err, safety.ErrRejected) {
				t.Fatalf("Check(%q) = %v, want a rejection", tc.sql, err)
			}
			var se *safety.Error
			if !errors.As(err, &se) || !strings.Contains(se.Reason, tc.reason) {
				t.Fatalf("Check(%q) reason = %v, want it to mention %q", tc.sql, err, tc.reason)
			}
		})
	}
}

func TestAcceptsReadOnlyQueries(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, sql string
		dialect   safety.Dialect
		want      string // the statement Check returns
	}{
		{"trailing semicolons", "SELECT * FROM Artist;; ", safety.SQLite, "SELECT * FROM Artist"},
		{"keywords in literals", "SELECT 'DROP TABLE x; DELETE' AS s FROM Artist WHERE Name <> 'update'", safety.SQLite, ""},
		{"keywords as quoted identifiers", `SELECT "update", [delete], ` + "`insert`" + ` FROM "create"`, safety.SQLite, ""},
		{"keywords in comments", "SELECT 1 -- DROP TABLE t\n/* DELETE FROM t */", safety.SQLite, "SELECT 1 -- DROP TABLE t\n/* DELETE FROM t */"},
		{"cte", "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 5) SELECT x FROM n", safety.SQLite, ""},
		{"materialized cte", "WITH a AS MATERIALIZED (SELECT 1 AS v), b AS NOT MATERIALIZED (SELECT v FROM a) SELECT * FROM b", safety.Postgres, ""},
		{"parenthesised compound", "(SELECT 1) UNION (SELECT 2)", safety.Postgres, ""},
		{"values", "VALUES (1, 'a'), (2, 'b')", safety.SQLite, ""},
		{"replace function", "SELECT replace(Name, 'a', 'b') FROM Artist", safety.SQLite, ""},
		{"postgres casts and operators", "SELECT x::text, data->>'k', data @> '{}'::jsonb, data ? 'k' FROM t", safety.Postgres, ""},
		{"dollar quoted literal", "SELECT $$it's; DROP TABLE t$$ AS s", safety.Postgres, ""},
		{"escape string", `SELECT E'a\'b; DELETE'`, safety.Postgres, ""},
		{"allowed pg function", "SELECT pg_size_pretty(pg_total_relation_size('t'))", safety.Postgres, ""},
		{"strftime and case", "SELECT strftime('%Y', InvoiceDate) AS y, CASE WHEN Total > 10 THEN 'big' ELSE 'small' END FROM Invoice", safety.SQLite, ""},
		{"blob literal", "SELECT X'00ff' AS b", safety.SQLite, ""},
		{"unicode identifiers", "SELECT nombre_artístico FROM artistas", safety.SQLite, ""},
		{"substring from for", "SELECT substring(name FROM 1 FOR 3) FROM t", safety.Postgres, ""},
		{"nested comment in PostgreSQL", "SELECT 1 /* /* */ ; DROP TABLE t; -- */", safety.Postgres, ""},
		{"read-only pragma function", "SELECT name FROM pragma_table_info('Artist')", safety.SQLite, ""},
		{"table statement", "TABLE genre", safety.Postgres, ""},
		{"unicode identifier column", `SELECT U&"\0074otal" FROM invoice`, safety.Postgres, ""},
		{"mysql backticks and comments", "SELECT `order`, 'it''s' -- note\nFROM t # more", safety.MySQL, ""},
		{"mysql double minus is not a comment", "SELECT 1 --1", safety.MySQL, ""},
		{"mysql optimizer hint", "SELECT /*+ MAX_EXECUTION_TIME(1000) */ id FROM t", safety.MySQL, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := safety.Check(tc.sql, tc.dialect)
			if err != nil {
				t.Fatalf("Check(%q): %v", tc.sql, err)
			}
			want := tc.want
			if want == "" {
				want = strings.TrimSpace(tc.sql)
			}
			if got != want {
				t.Fatalf("Check(%q) = %q, want %q", tc.sql, got, want)
			}
		})
	}
}
