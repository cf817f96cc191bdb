package connections_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
)

// TestPostgres runs the registry against a real PostgreSQL server: the
// dialect-specific paths (read-only transaction with a statement timeout,
// schema text from information_schema, table existence, the write modes)
// do what they do on SQLite.
func TestPostgres(t *testing.T) {
	t.Parallel()
	dsn := testkit.Postgres(t,
		`CREATE TABLE artist (artist_id integer PRIMARY KEY, name text NOT NULL)`,
		`INSERT INTO artist SELECT g, 'artist ' || g FROM generate_series(1, 20) g`,
		`CREATE SCHEMA sales`,
		`CREATE TABLE sales.invoice (invoice_id bigint, total numeric(10,2), issued timestamptz)`,
		`INSERT INTO sales.invoice VALUES (1, 9.99, '2026-01-02T03:04:05Z')`,
	)
	ctx := context.Background()
	reg := openRegistry(t, connections.Spec{Name: "wh", Dialect: connections.Postgres, DSN: dsn})

	res, err := reg.Query(ctx, "wh", "SELECT artist_id, name FROM artist ORDER BY artist_id", 3, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || len(res.Rows) != 3 || res.Columns[1] != "name" || res.Rows[0][1] != "artist 1" || res.Rows[0][0] != int64(1) {
		t.Fatalf("result = %+v, want 3 rows starting with artist 1, truncated", res)
	}
	res, err = reg.Query(ctx, "wh", "SELECT total, issued FROM sales.invoice", 10, 5*time.Second)
	if err != nil || len(res.Rows) != 1 {
		t.Fatalf("invoice = %+v, %v", res, err)
	}

	// The server-side check refuses a write that got past the token
	// checker (it is not a query), and nothing changes.
	if _, err := reg.Query(ctx, "wh", "DELETE FROM artist", 10, 5*time.Second); !errors.Is(err, connections.ErrQuery) {
		t.Fatalf("DELETE through Query: %v, want the server to reject it", err)
	}
	if res, err := reg.Query(ctx, "wh", "SELECT count(*) FROM artist", 1, 5*time.Second); err != nil || res.Rows[0][0] != int64(20) {
		t.Fatalf("artists after the refused DELETE = %v, %v; want 20", res, err)
	}
	// Queries run under the statement timeout.
	start := time.Now()
	if _, err := reg.Query(ctx, "wh", "SELECT count(*) FROM generate_series(1, 1000000000)", 1, 300*time.Millisecond); !errors.Is(err, connections.ErrQuery) && !errors.Is(err, connections.ErrUnavailable) {
		t.Fatalf("slow query: %v, want it stopped by the timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("slow query stopped after %v, want about 300ms", d)
	}

	schema, err := reg.SchemaText(ctx, "wh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"artist(artist_id integer, name text)", "sales.invoice(invoice_id bigint, total numeric, issued timestamp with time zone)"} {
		if !strings.Contains(schema, want) {
			t.Errorf("schema lacks %q:\n%s", want, schema)
		}
	}
	schemas, err := reg.Schemas(ctx, "wh")
	if err != nil || strings.Join(schemas, ",") != "public,sales" {
		t.Fatalf("Schemas = %v, %v; want [public sales]", schemas, err)
	}

	// Writes: create, then refuse to overwrite, drop, truncate.
	n, err := reg.WriteTable(ctx, "wh", "SELECT artist_id, name FROM artist WHERE artist_id <= 5", "top_artists", connections.WriteCreate, 5*time.Second)
	if err != nil || n != 5 {
		t.Fatalf("create: %d, %v; want 5 rows", n, err)
	}
	if _, err := reg.WriteTable(ctx, "wh", "SELECT 1", "top_artists", connections.WriteCreate, 5*time.Second); !errors.Is(err, connections.ErrQuery) || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("create over an existing table: %v", err)
	}
	if n, err = reg.WriteTable(ctx, "wh", "SELECT artist_id, name FROM artist WHERE artist_id <= 2", "top_artists", connections.WriteTruncate, 5*time.Second); err != nil || n != 2 {
		t.Fatalf("truncate: %d, %v; want 2 rows", n, err)
	}
	if n, err = reg.WriteTable(ctx, "wh", "SELECT name FROM artist", "top_artists", connections.WriteDrop, 5*time.Second); err != nil || n != 20 {
		t.Fatalf("drop: %d, %v; want 20 rows", n, err)
	}
	own, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	var cols int
	if err := own.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'top_artists'`).Scan(&cols); err != nil || cols != 1 {
		t.Fatalf("top_artists has %d columns, %v; want the dropped table recreated with 1", cols, err)
	}
}
