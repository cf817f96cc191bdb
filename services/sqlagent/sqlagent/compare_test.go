package sqlagent_test

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql" // the test's own handle on MariaDB
	_ "github.com/jackc/pgx/v5/stdlib" // the test's own handle on PostgreSQL

	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/mariadbtest"
)

// The two queries compared: Chinook's customers, and the same with three
// known differences — customer 5's country changed, customer 7 left out,
// a customer 60 added (Chinook has 59).
const (
	customersSQL        = "SELECT CustomerId, FirstName, LastName, Country FROM Customer ORDER BY CustomerId"
	customersChangedSQL = "SELECT CustomerId AS customer_id, FirstName AS first_name, LastName, CASE WHEN CustomerId = 5 THEN 'Czechia' ELSE Country END AS Country FROM Customer WHERE CustomerId <> 7 UNION ALL SELECT 60, 'Nina', 'New', 'Norway'"
	// The same on PostgreSQL's Chinook, whose names are snake case.
	pgCustomersSQL        = "SELECT customer_id, first_name, last_name, country FROM customer ORDER BY customer_id"
	pgCustomersChangedSQL = "SELECT customer_id, first_name, last_name, CASE WHEN customer_id = 5 THEN 'Czechia' ELSE country END AS country FROM customer WHERE customer_id <> 7 UNION ALL SELECT 60, 'Nina', 'New', 'Norway'"
)

// wantThreeDiffs reads the diff table back through db (the test's own
// handle) with query, which selects diff_status, the key and the country
// of both sides ordered by key, and fails unless it holds exactly the
// three known differences.
func wantThreeDiffs(t *testing.T, db *sql.DB, query string) {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var status string
		var key int64
		var first, second sql.NullString
		if err := rows.Scan(&status, &key, &first, &second); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %d %s/%s", status, key, first.String, second.String))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := "changed 5 Czech Republic/Czechia; only_in_first 7 Austria/; only_in_second 60 /Norway"
	if strings.Join(got, "; ") != want {
		t.Fatalf("diff table holds\n  %s\nwant\n  %s", strings.Join(got, "; "), want)
	}
}

// wantRefused sends input that must be refused as InvalidArgument naming
// field, and checks the session did not change (stage, turns, parameters).
func wantRefused(t *testing.T, c sqlagentv1.SqlAgentServiceClient, id, input, field string) {
	t.Helper()
	before, err := c.GetSession(ctxTimeout(t), &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	req := &sqlagentv1.SendInputRequest{Scope: scopeA, SessionId: id, Text: input}
	if sel, ok := cutPrefix(input, "sel:"); ok {
		req.Text, req.Selection = "", sel
	}
	_, err = c.SendInput(ctxTimeout(t), req)
	wantInvalid(t, err, field)
	after, err := c.GetSession(ctxTimeout(t), &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	b, a := before.GetSession(), after.GetSession()
	if a.GetStage() != b.GetStage() || len(a.GetTurns()) != len(b.GetTurns()) || a.GetUpdateTime().AsTime() != b.GetUpdateTime().AsTime() ||
		fmt.Sprint(a.GetParameters().AsMap()) != fmt.Sprint(b.GetParameters().AsMap()) {
		t.Fatalf("%q changed the session: %s -> %s", input, b.GetStage(), a.GetStage())
	}
}

// TestCompareSQL walks every COMPARE_SQL stage on SQLite Chinook through
// the session API: a generated first query and a typed second one,
// columns matched automatically (by name, and by kind where the names
// differ), CustomerId as key, only the differences written to a new table
// and read back: exactly the three rows that differ. Then in the same
// session a typed first query and a generated second one, mapped by hand,
// compared without a key as summary counts. Bad mappings, keys and
// selections are refused naming the field, the session unchanged.
func TestCompareSQL(t *testing.T) {
	t.Parallel()
	dbPath := chinookCopy(t)
	const firstQuestion = "List every customer with their country"
	const secondQuestion = "The customers as the new CRM has them"
	sim, modelAddr := startModel(t)
	sim.When(providersim.Match{LastUserContains: firstQuestion}).Text("```sql\n" + customersSQL + ";\n```")
	sim.When(providersim.Match{LastUserContains: secondQuestion}).Text("```sql\n" + customersChangedSQL + "\n```")
	c := startAgent(t, modelAddr, "music=sqlite:"+dbPath, nil)
	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "music"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	if !strings.Contains(strings.Join(optionValues(created.GetOptions()), ","), "compare") {
		t.Fatalf("options %v do not offer compare", optionValues(created.GetOptions()))
	}

	r := send(t, c, id, "sel:compare")
	wantStage(t, r, "ASK_FIRST_SQL_METHOD")
	if r.GetSession().GetJobKind() != sqlagentv1.JobKind_JOB_KIND_COMPARE_SQL {
		t.Fatalf("job kind = %v", r.GetSession().GetJobKind())
	}
	wantRefused(t, c, id, "sel:connection:nowhere", "selection")
	wantStage(t, send(t, c, id, "sel:generate"), "NEED_FIRST_NATURAL_LANGUAGE")
	r = send(t, c, id, firstQuestion)
	wantStage(t, r, "CONFIRM_FIRST_GENERATED_SQL")
	if r.GetSqlToConfirm() != customersSQL {
		t.Fatalf("first sql_to_confirm = %q", r.GetSqlToConfirm())
	}
	r = send(t, c, id, "yes")
	wantStage(t, r, "ASK_SECOND_SQL_METHOD")
	if !strings.Contains(r.GetReply(), "CustomerId, FirstName, LastName, Country") {
		t.Fatalf("reply after the first query = %q, want its columns", r.GetReply())
	}
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_SECOND_USER_SQL")
	// A write is refused as the second query like any read.
	r = send(t, c, id, "DELETE FROM Customer")
	wantStage(t, r, "NEED_SECOND_USER_SQL")
	wantStage(t, send(t, c, id, customersChangedSQL), "CONFIRM_SECOND_USER_SQL")
	r = send(t, c, id, "yes")
	wantStage(t, r, "ASK_AUTO_MATCH")
	if !strings.Contains(r.GetReply(), "CustomerId=customer_id, FirstName=first_name, LastName=LastName, Country=Country") {
		t.Fatalf("auto match reply = %q", r.GetReply())
	}
	r = send(t, c, id, "sel:auto")
	wantStage(t, r, "ASK_COMPARE_KEY")
	wantRefused(t, c, id, "Email", "text")
	wantRefused(t, c, id, "sel:key:Email", "selection")
	wantStage(t, send(t, c, id, "customer_id"), "ASK_REPORTING_TYPE")
	wantRefused(t, c, id, "sel:everything", "selection")
	r = send(t, c, id, "sel:differences")
	wantStage(t, r, "ASK_COMPARE_SCHEMA")
	if got := strings.Join(optionValues(r.GetOptions()), ","); got != "music/main" {
		t.Fatalf("schema options = %s, want music/main", got)
	}
	wantRefused(t, c, id, "sel:music/elsewhere", "selection")
	wantStage(t, send(t, c, id, "sel:music/main"), "ASK_COMPARE_TABLE_NAME")
	wantStage(t, send(t, c, id, "okay"), "ASK_COMPARE_TABLE_NAME")
	wantStage(t, send(t, c, id, "customer_diff"), "ASK_COMPARE_JOB_NAME")
	// "okay" after a question is no job name.
	wantStage(t, send(t, c, id, "okay"), "ASK_COMPARE_JOB_NAME")
	r = send(t, c, id, "CRM against Chinook")
	wantStage(t, r, "EXECUTE_COMPARE_SQL")
	if !strings.Contains(r.GetSqlToConfirm(), customersSQL) || !strings.Contains(r.GetSqlToConfirm(), customersChangedSQL) {
		t.Fatalf("EXECUTE_COMPARE_SQL shows %q, want both queries", r.GetSqlToConfirm())
	}
	own := openSQLite(t, dbPath)
	r = send(t, c, id, "yes")
	wantStage(t, r, "NEED_WRITE_OR_EMAIL")
	if n := len(r.GetResult().GetRows()); n != 3 || strings.Join(r.GetResult().GetColumns(), ",") !=
		"diff_status,CustomerId,FirstName_first,first_name_second,LastName_first,LastName_second,Country_first,Country_second" {
		t.Fatalf("shown diff: %d rows, columns %v", n, r.GetResult().GetColumns())
	}
	params := r.GetSession().GetParameters().AsMap()
	if params["compare_job_name"] != "CRM against Chinook" || params["row_count"] != "3" || params["compare_same"] != "57" {
		t.Fatalf("parameters after the comparison = %v", params)
	}
	// The comparison is kept with both queries as approved.
	if j := r.GetJob(); j.GetKind() != sqlagentv1.JobKind_JOB_KIND_COMPARE_SQL || j.GetSql() != customersSQL || j.GetSecondSql() != customersChangedSQL ||
		j.GetName() != "CRM against Chinook" || j.GetRowCount() != 3 || j.GetDestination() != "table main.customer_diff on music" {
		t.Fatalf("comparison job = %v", j)
	}
	wantThreeDiffs(t, own, "SELECT diff_status, CustomerId, Country_first, Country_second FROM customer_diff ORDER BY CustomerId")

	// Again, the other way round: typed, then generated; mapped by hand;
	// no key; summary counts.
	wantStage(t, send(t, c, id, "sel:compare"), "ASK_FIRST_SQL_METHOD")
	if p := send(t, c, id, "sel:user_sql").GetSession().GetParameters().AsMap(); p["compare_mapping"] != nil || p["compare_table"] != nil {
		t.Fatalf("a new comparison kept the last one's parameters: %v", p)
	}
	wantStage(t, send(t, c, id, customersSQL), "CONFIRM_FIRST_USER_SQL")
	wantStage(t, send(t, c, id, "yes"), "ASK_SECOND_SQL_METHOD")
	wantStage(t, send(t, c, id, "sel:generate"), "NEED_SECOND_NATURAL_LANGUAGE")
	wantStage(t, send(t, c, id, secondQuestion), "CONFIRM_SECOND_GENERATED_SQL")
	wantStage(t, send(t, c, id, "yes"), "ASK_AUTO_MATCH")
	wantStage(t, send(t, c, id, "sel:manual"), "WAITING_MAP_TABLE")
	wantRefused(t, c, id, "CustomerId=customer_id, Country=Nation", "text")
	wantRefused(t, c, id, "Region=Country", "text")
	wantRefused(t, c, id, "sel:CustomerId=first_name", "selection")
	wantStage(t, send(t, c, id, "CustomerId=customer_id, Country=Country"), "ASK_COMPARE_KEY")
	wantRefused(t, c, id, "FirstName", "text")
	wantStage(t, send(t, c, id, "sel:none"), "ASK_REPORTING_TYPE")
	wantStage(t, send(t, c, id, "sel:summary"), "ASK_COMPARE_SCHEMA")
	wantStage(t, send(t, c, id, "sel:music/main"), "ASK_COMPARE_TABLE_NAME")
	// An existing table is not overwritten: the name is asked again, at
	// once, whatever its case (SQLite folds it).
	for _, name := range []string{"customer_diff", "CUSTOMER_DIFF", "customer"} {
		r = send(t, c, id, name)
		wantStage(t, r, "ASK_COMPARE_TABLE_NAME")
		if !strings.Contains(r.GetReply(), "already exists") || r.GetSession().GetParameters().AsMap()["compare_table"] != nil {
			t.Fatalf("%s: reply = %q, parameters %v; want the table said to exist", name, r.GetReply(), r.GetSession().GetParameters().AsMap())
		}
	}
	wantThreeDiffs(t, own, "SELECT diff_status, CustomerId, Country_first, Country_second FROM customer_diff ORDER BY CustomerId")
	wantStage(t, send(t, c, id, "customer_counts"), "ASK_COMPARE_JOB_NAME")
	wantStage(t, send(t, c, id, "sel:default"), "EXECUTE_COMPARE_SQL")
	wantStage(t, send(t, c, id, "yes"), "NEED_WRITE_OR_EMAIL")
	counts := map[string]int{}
	rows, err := own.Query("SELECT diff_status, rows FROM customer_counts")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		counts[s] = n
	}
	if fmt.Sprint(counts) != "map[changed:0 only_in_first:2 only_in_second:2 same:57]" {
		t.Fatalf("summary = %v", counts)
	}
}

// createSession starts a session on connection and returns its id.
func createSession(t *testing.T, c sqlagentv1.SqlAgentServiceClient, connection string) string {
	t.Helper()
	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: connection})
	if err != nil {
		t.Fatal(err)
	}
	return created.GetSession().GetId()
}

// openDB opens the test's own handle on a server.
func openDB(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// postgresChinook starts PostgreSQL holding Chinook (the shared script,
// without its CREATE DATABASE) and returns its DSN, or skips the test.
func postgresChinook(t *testing.T, setup ...string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "shared", "data", "chinook", "Chinook_PostgreSql.sql"))
		if err == nil {
			_, script, ok := strings.Cut(string(b), `\c chinook;`)
			if !ok {
				t.Fatal("Chinook_PostgreSql.sql has no \\c chinook line to start after")
			}
			return testkit.Postgres(t, append([]string{strings.TrimSpace(script)}, setup...)...)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("shared/data/chinook/Chinook_PostgreSql.sql not found above the package directory")
		}
		dir = parent
	}
}

// compareTyped drives a session at ASK_SQL_METHOD through a comparison of
// two typed queries, the first on the session's connection and the
// second on second (empty: the same), matched automatically, keyed by
// key, only the differences written to target/table.
func compareTyped(t *testing.T, c sqlagentv1.SqlAgentServiceClient, id, firstSQL, second, secondSQL, key, target, table string) *sqlagentv1.SendInputResponse {
	t.Helper()
	wantStage(t, send(t, c, id, "sel:compare"), "ASK_FIRST_SQL_METHOD")
	wantStage(t, send(t, c, id, firstSQL), "CONFIRM_FIRST_USER_SQL")
	wantStage(t, send(t, c, id, "yes"), "ASK_SECOND_SQL_METHOD")
	if second != "" {
		wantStage(t, send(t, c, id, "sel:connection:"+second), "ASK_SECOND_SQL_METHOD")
	}
	wantStage(t, send(t, c, id, secondSQL), "CONFIRM_SECOND_USER_SQL")
	wantStage(t, send(t, c, id, "yes"), "ASK_AUTO_MATCH")
	wantStage(t, send(t, c, id, "sel:auto"), "ASK_COMPARE_KEY")
	wantStage(t, send(t, c, id, key), "ASK_REPORTING_TYPE")
	wantStage(t, send(t, c, id, "sel:differences"), "ASK_COMPARE_SCHEMA")
	wantStage(t, send(t, c, id, "sel:"+target), "ASK_COMPARE_TABLE_NAME")
	wantStage(t, send(t, c, id, table), "ASK_COMPARE_JOB_NAME")
	wantStage(t, send(t, c, id, "sel:default"), "EXECUTE_COMPARE_SQL")
	r := send(t, c, id, "yes")
	wantStage(t, r, "NEED_WRITE_OR_EMAIL")
	if n := len(r.GetResult().GetRows()); n != 3 {
		t.Fatalf("shown diff has %d rows, want 3", n)
	}
	return r
}

// TestComparePostgres compares two queries on PostgreSQL's Chinook, the
// diff written to PostgreSQL (a connection with only a read role is not
// offered as a target, and picking it is refused); then a query on SQLite
// Chinook against one on PostgreSQL, the diff written to SQLite.
func TestComparePostgres(t *testing.T) {
	t.Parallel()
	dsn := postgresChinook(t, `CREATE ROLE reader LOGIN`, `GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader`)
	reader := strings.Replace(dsn, "//am@", "//reader@", 1)
	dbPath := chinookCopy(t)
	_, modelAddr := startModel(t)
	c := startAgent(t, modelAddr, "wh=postgres:"+dsn+"; ro[read]=postgres:"+reader+"; music=sqlite:"+dbPath, nil)
	own := openDB(t, "pgx", dsn)

	id := createSession(t, c, "wh")
	wantStage(t, send(t, c, id, "sel:compare"), "ASK_FIRST_SQL_METHOD")
	wantStage(t, send(t, c, id, "sel:connection:ro"), "ASK_FIRST_SQL_METHOD")
	wantStage(t, send(t, c, id, pgCustomersSQL), "CONFIRM_FIRST_USER_SQL")
	wantStage(t, send(t, c, id, "yes"), "ASK_SECOND_SQL_METHOD")
	wantStage(t, send(t, c, id, pgCustomersChangedSQL), "CONFIRM_SECOND_USER_SQL")
	wantStage(t, send(t, c, id, "yes"), "ASK_AUTO_MATCH")
	wantStage(t, send(t, c, id, "yes"), "ASK_COMPARE_KEY")
	wantStage(t, send(t, c, id, "sel:key:customer_id"), "ASK_REPORTING_TYPE")
	r := send(t, c, id, "sel:differences")
	wantStage(t, r, "ASK_COMPARE_SCHEMA")
	if got := strings.Join(optionValues(r.GetOptions()), ","); got != "music/main,wh/public" {
		t.Fatalf("schema options = %s, want music/main,wh/public (not the read-only ro)", got)
	}
	wantRefused(t, c, id, "sel:ro/public", "selection")
	wantStage(t, send(t, c, id, "sel:wh/public"), "ASK_COMPARE_TABLE_NAME")
	wantStage(t, send(t, c, id, "customer_diff"), "ASK_COMPARE_JOB_NAME")
	wantStage(t, send(t, c, id, "sel:default"), "EXECUTE_COMPARE_SQL")
	wantStage(t, send(t, c, id, "yes"), "NEED_WRITE_OR_EMAIL")
	wantThreeDiffs(t, own, "SELECT diff_status, customer_id, country_first, country_second FROM customer_diff ORDER BY customer_id")

	// SQLite against PostgreSQL, into SQLite.
	compareTyped(t, c, createSession(t, c, "music"), customersSQL, "wh", pgCustomersChangedSQL, "CustomerId", "music/main", "postgres_vs_sqlite")
	wantThreeDiffs(t, openSQLite(t, dbPath), "SELECT diff_status, CustomerId, Country_first, country_second FROM postgres_vs_sqlite ORDER BY CustomerId")
}

// TestCompareMariaDB compares two queries on MariaDB's Chinook, the diff
// written to MariaDB; then MariaDB against SQLite, into MariaDB.
func TestCompareMariaDB(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.Start(t, mariadbtest.Chinook(t))
	dsn := srv.DSN("am", "Chinook")
	dbPath := chinookCopy(t)
	_, modelAddr := startModel(t)
	c := startAgent(t, modelAddr, "maria=mysql:"+dsn+"; music=sqlite:"+dbPath, nil)
	own := openDB(t, "mysql", dsn)

	id := createSession(t, c, "maria")
	compareTyped(t, c, id, customersSQL, "", customersChangedSQL, "CustomerId", "maria/Chinook", "customer_diff")
	wantThreeDiffs(t, own, "SELECT diff_status, CustomerId, Country_first, Country_second FROM customer_diff ORDER BY CustomerId")

	compareTyped(t, c, id, customersSQL, "music", customersChangedSQL, "CustomerId", "maria/Chinook", "maria_vs_sqlite")
	wantThreeDiffs(t, own, "SELECT diff_status, CustomerId, Country_first, Country_second FROM maria_vs_sqlite ORDER BY CustomerId")
}
