package connections_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the test's own handle on the server

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/mariadbtest"
)

// TestMariaDB runs the registry against a real MariaDB server with the
// Chinook data: reads with the row cap and the statement timeout, schema
// text and schemas from information_schema, a session that does not
// outlive its job, the write modes (the target replaced or refilled in one
// step), and the audit of the read user.
func TestMariaDB(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.Start(t, mariadbtest.Chinook(t),
		`CREATE DATABASE sales`,
		`CREATE TABLE sales.Region (RegionId INT PRIMARY KEY, Name VARCHAR(40))`,
		`CREATE USER 'reader'@'%' IDENTIFIED BY ''`,
		`GRANT SELECT ON Chinook.* TO 'reader'@'%'`,
	)
	dsn := srv.DSN("am", "Chinook")
	ctx := context.Background()
	reg, err := connections.Open([]connections.Spec{
		{Name: "chinook", Dialect: connections.MySQL, DSN: dsn},
		{Name: "least", Dialect: connections.MySQL, DSN: dsn, ReadDSN: srv.DSN("reader", "Chinook")},
	}, connections.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)

	res, err := reg.Query(ctx, "chinook", "SELECT ArtistId, Name, 1.5 AS ratio FROM Artist ORDER BY ArtistId", 3, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || len(res.Rows) != 3 || res.Columns[1] != "Name" || res.Rows[0][0] != int64(1) || res.Rows[0][1] != "AC/DC" || res.Rows[0][2] != "1.5" {
		t.Fatalf("result = %+v, want 3 rows starting with 1 AC/DC 1.5, truncated", res)
	}
	res, err = reg.Query(ctx, "chinook", "SELECT COUNT(*) FROM Track", 3, 5*time.Second)
	if err != nil || res.Truncated || res.Rows[0][0] != int64(3503) {
		t.Fatalf("track count = %+v, %v; want 3503", res, err)
	}

	// Session state one job leaves is gone in the next: each job has a
	// session of its own (LAST_INSERT_ID(n) sets the session's value).
	if _, err := reg.Query(ctx, "chinook", "SELECT LAST_INSERT_ID(42)", 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if res, err := reg.Query(ctx, "chinook", "SELECT LAST_INSERT_ID()", 1, 5*time.Second); err != nil || res.Rows[0][0] != uint64(0) && res.Rows[0][0] != int64(0) {
		t.Fatalf("LAST_INSERT_ID() in the next job = %+v, %v; want 0", res, err)
	}
	// A variable assignment is refused by the registry's own check too.
	if _, err := reg.Query(ctx, "chinook", "SELECT @leak := 1", 1, 5*time.Second); !errors.Is(err, connections.ErrRefused) {
		t.Fatalf("variable assignment: %v, want refused", err)
	}
	// A write that gets past everything else is stopped by the read-only
	// transaction, and nothing changes.
	if _, err := reg.Query(ctx, "chinook", "DELETE FROM Genre", 10, 5*time.Second); !errors.Is(err, connections.ErrRefused) {
		t.Fatalf("DELETE through Query: %v, want refused", err)
	}
	// Queries run under the statement timeout.
	start := time.Now()
	if _, err := reg.Query(ctx, "chinook", "SELECT COUNT(*) FROM Track a, Track b, Track c", 1, 500*time.Millisecond); !errors.Is(err, connections.ErrQuery) && !errors.Is(err, connections.ErrUnavailable) {
		t.Fatalf("slow query: %v, want it stopped by the timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("slow query stopped after %v, want about 500ms", d)
	}
	own, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Close() })
	// The server stops it too (max_statement_time), not only the client.
	testkit.Eventually(t, 5*time.Second, func() bool {
		var running int
		err := own.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT COUNT(*) FROM Track a%'`).Scan(&running)
		return err == nil && running == 0
	}, "the slow query stopped on the server")

	schema, err := reg.SchemaText(ctx, "chinook")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Album(AlbumId int(11), Title varchar(160), ArtistId int(11))", "sales.Region(RegionId int(11), Name varchar(40))"} {
		if !strings.Contains(schema, want) {
			t.Errorf("schema lacks %q:\n%s", want, schema)
		}
	}
	if strings.Index(schema, "sales.Region") < strings.Index(schema, "Track(") {
		t.Errorf("the connection's own database should come first:\n%s", schema)
	}
	schemas, err := reg.Schemas(ctx, "chinook")
	if err != nil || strings.Join(schemas, ",") != "Chinook,sales" {
		t.Fatalf("Schemas = %v, %v; want [Chinook sales]", schemas, err)
	}

	// Writes: create, refuse to overwrite, truncate, drop.
	q := "SELECT g.Name AS Genre, COUNT(*) AS Tracks, SUM(t.UnitPrice) AS Value, MIN(i.InvoiceDate) AS FirstSale FROM Track t JOIN Genre g ON g.GenreId = t.GenreId JOIN InvoiceLine il ON il.TrackId = t.TrackId JOIN Invoice i ON i.InvoiceId = il.InvoiceId GROUP BY g.Name"
	count := func(q string) int64 {
		t.Helper()
		var n int64
		if err := own.QueryRow("SELECT COUNT(*) FROM (" + q + ") q").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	n, err := reg.WriteTable(ctx, "chinook", q, "genre_sales", connections.WriteCreate, 10*time.Second)
	if want := count(q); err != nil || n != want || n == 0 {
		t.Fatalf("create: %d, %v; want %d rows", n, err, want)
	}
	var genre string
	var tracks int
	var value, first string
	if err := own.QueryRow("SELECT Genre, Tracks, Value, FirstSale FROM genre_sales WHERE Genre = 'Rock'").Scan(&genre, &tracks, &value, &first); err != nil {
		t.Fatal(err)
	}
	var wantFirst string
	if err := own.QueryRow(`SELECT DATE_FORMAT(MIN(i.InvoiceDate), '%Y-%m-%d %H:%i:%s.%f') FROM Invoice i JOIN InvoiceLine il ON il.InvoiceId = i.InvoiceId
		JOIN Track t ON t.TrackId = il.TrackId JOIN Genre g ON g.GenreId = t.GenreId WHERE g.Name = 'Rock'`).Scan(&wantFirst); err != nil {
		t.Fatal(err)
	}
	if tracks != 835 || value != "826.65" || first != wantFirst {
		t.Fatalf("Rock = %d tracks, value %s, first sale %s; want 835, 826.65, %s", tracks, value, first, wantFirst)
	}
	if _, err := reg.WriteTable(ctx, "chinook", "SELECT 1", "genre_sales", connections.WriteCreate, 5*time.Second); !errors.Is(err, connections.ErrQuery) || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("create over an existing table: %v", err)
	}
	few := q + " HAVING COUNT(*) > 100"
	if n, err = reg.WriteTable(ctx, "chinook", few, "genre_sales", connections.WriteTruncate, 10*time.Second); err != nil || n != count(few) || n >= count(q) {
		t.Fatalf("truncate: %d, %v; want %d rows", n, err, count(few))
	}
	var kept int64
	if err := own.QueryRow("SELECT COUNT(*) FROM genre_sales").Scan(&kept); err != nil || kept != n {
		t.Fatalf("genre_sales holds %d rows after truncate, %v; want %d", kept, err, n)
	}
	if n, err = reg.WriteTable(ctx, "chinook", "SELECT Name FROM Artist", "genre_sales", connections.WriteDrop, 10*time.Second); err != nil || n != 275 {
		t.Fatalf("drop: %d, %v; want 275 rows", n, err)
	}
	var cols, rows int
	if err := own.QueryRow(`SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'Chinook' AND TABLE_NAME = 'genre_sales'`).Scan(&cols); err != nil || cols != 1 {
		t.Fatalf("genre_sales has %d columns, %v; want the dropped table recreated with 1", cols, err)
	}
	// A write whose query fails leaves the table as it was, and no
	// staging table behind.
	if _, err := reg.WriteTable(ctx, "chinook", "SELECT Name, no_such_column FROM Artist", "genre_sales", connections.WriteDrop, 5*time.Second); err == nil {
		t.Fatal("a write of a failing query succeeded")
	}
	if err := own.QueryRow(`SELECT COUNT(*) FROM genre_sales`).Scan(&rows); err != nil || rows != 275 {
		t.Fatalf("genre_sales has %d rows after a failed write, %v; want 275", rows, err)
	}
	var staging int
	if err := own.QueryRow(`SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_NAME LIKE 'agentmesh\_%'`).Scan(&staging); err != nil || staging != 0 {
		t.Fatalf("%d staging tables left, %v", staging, err)
	}

	// The least-privilege read user reads; the audit flags only the
	// all-privileged one.
	res, err = reg.Query(ctx, "least", "SELECT CURRENT_USER() AS who, COUNT(*) FROM Genre", 5, 5*time.Second)
	if err != nil || !strings.HasPrefix(res.Rows[0][0].(string), "reader@") {
		t.Fatalf("reads ran as %+v, %v; want reader", res, err)
	}
	audits := reg.AuditReadRoles(ctx)
	if len(audits) != 2 || audits[0].Connection != "chinook" || audits[1].Connection != "least" {
		t.Fatalf("audits = %+v", audits)
	}
	if a := audits[0]; a.Err != nil || !slices.Contains(a.Excess, "FILE") || !slices.Contains(a.Excess, "SUPER") || !slices.Contains(a.Excess, "INSERT") {
		t.Fatalf("audit of the all-privileged user = %+v, want FILE, SUPER and INSERT flagged", a)
	}
	if a := audits[1]; a.Err != nil || len(a.Excess) != 0 || len(a.Problems) != 0 || !strings.HasPrefix(a.Role, "reader@") {
		t.Fatalf("audit of the read user = %+v, want nothing to flag", a)
	}
}
