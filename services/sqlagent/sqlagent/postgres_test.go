package sqlagent_test

import (
	"database/sql"
	"strings"
	"testing"

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
	)
	const question = "What did the Acme customers spend?"
	const acmeSQL = "SELECT customer, total::text AS amount FROM shop.orders WHERE customer ILIKE 'acme%' ORDER BY total DESC"
	sim, modelAddr := startModel(t)
	sim.When(providersim.Match{LastUserContains: question}).Text("```sql\n" + acmeSQL + ";\n```")
	sim.When(providersim.Match{LastUserContains: "password file"}).Text("```sql\nSELECT pg_read_file('/etc/passwd');\n```")
	c := startAgent(t, modelAddr, "wh=postgres:"+dsn, nil)

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
	r = send(t, c, id, "yes")
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

	// Write the result of typed SQL to a new table, after confirmation.
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_USER_SQL")
	wantStage(t, send(t, c, id, "SELECT customer, total FROM shop.orders WHERE total > 100"), "CONFIRM_USER_SQL")
	wantStage(t, send(t, c, id, "yes"), "SHOW_RESULTS")
	wantStage(t, send(t, c, id, "sel:write"), "NEED_TABLE_NAME")
	wantStage(t, send(t, c, id, "big_orders"), "ASK_WRITE_MODE")
	wantStage(t, send(t, c, id, "sel:create"), "CONFIRM_WRITE")
	wantStage(t, send(t, c, id, "yes"), "DONE")
	own, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	var n int
	if err := own.QueryRow(`SELECT count(*) FROM big_orders`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("big_orders has %d rows, %v; want 2", n, err)
	}
}
