package sqlagent_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the test's own handle on the server

	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// TestPostgresSession runs a whole session against a real PostgreSQL
// server: the model sees the server's schema, its PostgreSQL-only SQL
// (casts, ILIKE, a schema-qualified table) passes the checker and runs, a
// server function that reads files is refused, and a write creates a table.
func TestPostgresSession(t *testing.T) {
	t.Parallel()
	dsn := testkit.Postgres(t,
		`CREATE SCHEMA shop`,
		`CREATE TABLE shop.orders (order_id serial PRIMARY KEY, customer text NOT NULL, total numeric(10,2) NOT NULL)`,
		`INSERT INTO shop.orders (customer, total) VALUES ('Acme Corp', 120.50), ('acme labs', 80), ('Globex', 42.25), ('Initech', 300)`,
		`CREATE FUNCTION shop.bump() RETURNS bigint LANGUAGE sql VOLATILE AS 'SELECT pg_try_advisory_lock(7)::int::bigint'`,
	)
	const question = "What did the Acme customers spend?"
	const acmeSQL = "SELECT customer, total::text AS amount FROM shop.orders WHERE customer ILIKE 'acme%' ORDER BY total DESC"
	sim, modelAddr := startModel(t)
	sim.When(providersim.Match{LastUserContains: question}).Text("```sql\n" + acmeSQL + ";\n```")
	sim.When(providersim.Match{LastUserContains: "password file"}).Text("```sql\nSELECT pg_read_file('/etc/passwd');\n```")
	sim.When(providersim.Match{LastUserContains: "bump the counter"}).Text("```sql\nSELECT shop.bump();\n```")
	var logs testkit.Buffer
	c, running := startAgentLogged(t, modelAddr, "wh=postgres:"+dsn, nil, &logs)

	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "wh"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	wantStage(t, send(t, c, id, "sel:generate"), "NEED_NATURAL_LANGUAGE")
	r := send(t, c, id, question)
	wantStage(t, r, "CONFIRM_GENERATED_SQL")
	if r.GetSqlToConfirm() != acmeSQL {
		t.Fatalf("sql_to_confirm = %q, want %q", r.GetSqlToConfirm(), acmeSQL)
	}
	var system string
	for _, m := range sim.ChatRequests()[0].Messages {
		if m.Role == "system" {
			system += m.Content
		}
	}
	if !strings.Contains(system, "shop.orders(order_id integer, customer text, total numeric)") {
		t.Fatalf("the model was not shown the server's schema:\n%s", system)
	}
	r = runRead(t, c, id, "yes")
	wantStage(t, r, "SHOW_RESULTS")
	rows := r.GetResult().GetRows()
	if len(rows) != 2 || rows[0].GetValues()[0].GetStringValue() != "Acme Corp" || rows[0].GetValues()[1].GetStringValue() != "120.50" ||
		rows[1].GetValues()[0].GetStringValue() != "acme labs" {
		t.Fatalf("rows = %v, want Acme Corp 120.50 then acme labs", rows)
	}

	// A generated call to a file-reading server function never runs.
	wantStage(t, send(t, c, id, "sel:generate"), "NEED_NATURAL_LANGUAGE")
	r = send(t, c, id, "show me the password file")
	if r.GetSqlToConfirm() != "" || !strings.Contains(r.GetReply(), "pg_read_file") {
		t.Fatalf("pg_read_file: reply %q, sql_to_confirm %q; want a refusal naming it", r.GetReply(), r.GetSqlToConfirm())
	}

	// SQL the token checker passes but the server's catalog refuses (the
	// function is volatile) is refused before it runs.
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_USER_SQL")
	wantStage(t, send(t, c, id, "SELECT shop.bump()"), "CONFIRM_USER_SQL")
	r = runRead(t, c, id, "yes")
	wantStage(t, r, "NEED_USER_SQL")
	if r.GetResult() != nil || !strings.Contains(r.GetReply(), "shop.bump()") || !strings.Contains(r.GetReply(), "VOLATILE") {
		t.Fatalf("volatile function: reply %q, result %v; want a refusal naming it", r.GetReply(), r.GetResult())
	}

	// The same for SQL the model wrote: back to the question.
	wantStage(t, send(t, c, id, "sel:generate"), "NEED_NATURAL_LANGUAGE")
	wantStage(t, send(t, c, id, "bump the counter"), "CONFIRM_GENERATED_SQL")
	r = runRead(t, c, id, "yes")
	wantStage(t, r, "NEED_NATURAL_LANGUAGE")
	if r.GetResult() != nil || !strings.Contains(r.GetReply(), "shop.bump()") {
		t.Fatalf("generated volatile call: reply %q, result %v; want a refusal naming it", r.GetReply(), r.GetResult())
	}

	// Write the result of typed SQL to a new table, after confirmation;
	// the server has two schemas, so the validator offers them
	// (FETCH_SCHEMAS) and the table goes to the one picked.
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_USER_SQL")
	wantStage(t, send(t, c, id, "SELECT customer, total FROM shop.orders WHERE total > 100"), "CONFIRM_USER_SQL")
	wantStage(t, runRead(t, c, id, "yes"), "SHOW_RESULTS")
	r = send(t, c, id, "sel:write")
	wantStage(t, r, "ASK_WRITE_SCHEMA")
	if got := optionValues(r.GetOptions()); r.GetAction() != sqlagentv1.Action_ACTION_FETCH_SCHEMAS || strings.Join(got, ",") != "public,shop" {
		t.Fatalf("action %v, schema options %v; want FETCH_SCHEMAS with public,shop", r.GetAction(), got)
	}
	_, err = c.SendInput(ctxTimeout(t), &sqlagentv1.SendInputRequest{Scope: scopeA, SessionId: id, Selection: "pg_catalog"})
	wantInvalid(t, err, "selection")
	r = send(t, c, id, "sel:shop")
	wantStage(t, r, "NEED_TABLE_NAME")
	// The tables of shop, not of public or the catalog: FETCH_TABLES.
	if got := strings.Join(optionValues(r.GetOptions()), ","); r.GetAction() != sqlagentv1.Action_ACTION_FETCH_TABLES || got != "orders" ||
		r.GetSession().GetParameters().AsMap()["write_schema"] != "shop" {
		t.Fatalf("after the schema: action %v, options %s, parameters %v", r.GetAction(), got, r.GetSession().GetParameters().AsMap())
	}
	for _, sel := range []string{"pg_class", "shop.orders", "ORDERS"} {
		_, err = c.SendInput(ctxTimeout(t), &sqlagentv1.SendInputRequest{Scope: scopeA, SessionId: id, Selection: sel})
		wantInvalid(t, err, "selection")
	}
	wantStage(t, send(t, c, id, "big_orders"), "ASK_WRITE_MODE")
	wantStage(t, send(t, c, id, "sel:create"), "CONFIRM_WRITE")
	wantStage(t, send(t, c, id, "yes"), "NEED_WRITE_OR_EMAIL")
	own, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	var n int
	if err := own.QueryRow(`SELECT count(*) FROM shop.big_orders`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("shop.big_orders has %d rows, %v; want 2", n, err)
	}
	var elsewhere bool
	if err := own.QueryRow(`SELECT to_regclass('public.big_orders') IS NOT NULL`).Scan(&elsewhere); err != nil || elsewhere {
		t.Fatalf("public.big_orders exists: %v, %v; the table belongs in shop only", elsewhere, err)
	}
	var locks int
	if err := own.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'`).Scan(&locks); err != nil || locks != 0 {
		t.Fatalf("%d advisory locks, %v; want none", locks, err)
	}
	// Written again, into the table just made, picked from the dropdown.
	wantStage(t, send(t, c, id, "sel:write"), "ASK_WRITE_SCHEMA")
	r = send(t, c, id, "sel:shop")
	if got := strings.Join(optionValues(r.GetOptions()), ","); r.GetAction() != sqlagentv1.Action_ACTION_FETCH_TABLES || got != "big_orders,orders" {
		t.Fatalf("tables of shop after the write: action %v, options %s", r.GetAction(), got)
	}
	wantStage(t, send(t, c, id, "sel:big_orders"), "ASK_WRITE_MODE")
	wantStage(t, send(t, c, id, "sel:truncate"), "CONFIRM_WRITE")
	wantStage(t, send(t, c, id, "yes"), "NEED_WRITE_OR_EMAIL")
	if err := own.QueryRow(`SELECT count(*) FROM shop.big_orders`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("shop.big_orders refilled has %d rows, %v; want 2", n, err)
	}

	// The read role here is the superuser: the audit, which runs in the
	// background from the start, warns about it.
	testkit.Eventually(t, 30*time.Second, func() bool { return strings.Contains(logs.String(), "the read role may do more than read") }, "the read role audited")
	running.Stop()
	if !strings.Contains(logs.String(), "the read role may do more than read") || !strings.Contains(logs.String(), `"rights":"superuser"`) {
		t.Fatalf("no warning about the superuser read role in the log:\n%s", logs.String())
	}
	// With a least-privilege read role there is nothing to warn about.
	if _, err := own.Exec(`CREATE ROLE reader LOGIN; GRANT USAGE ON SCHEMA shop TO reader; GRANT SELECT ON ALL TABLES IN SCHEMA shop TO reader`); err != nil {
		t.Fatal(err)
	}
	var quiet testkit.Buffer
	reader := strings.Replace(dsn, "//am@", "//reader@", 1)
	c, running = startAgentLogged(t, modelAddr, "wh=postgres:"+dsn+"; wh[read]=postgres:"+reader, nil, &quiet)
	created, err = c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "wh"})
	if err != nil {
		t.Fatal(err)
	}
	id = created.GetSession().GetId()
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_USER_SQL")
	wantStage(t, send(t, c, id, "SELECT current_user AS who, count(*) AS orders FROM shop.orders GROUP BY 1"), "CONFIRM_USER_SQL")
	r = runRead(t, c, id, "yes")
	if rows := r.GetResult().GetRows(); len(rows) != 1 || rows[0].GetValues()[0].GetStringValue() != "reader" {
		t.Fatalf("reads ran as %v, want reader", rows)
	}
	testkit.Eventually(t, 30*time.Second, func() bool { return strings.Contains(quiet.String(), "read role audited") }, "the read role audited")
	running.Stop()
	if q := quiet.String(); strings.Contains(q, "may do more than read") || strings.Contains(q, "cannot run the server-side check") || strings.Contains(q, "could not audit") {
		t.Fatalf("a warning for the least-privilege read role:\n%s", quiet.String())
	}
}
