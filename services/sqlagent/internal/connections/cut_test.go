package connections_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/mariadbtest"
)

// A WRITE_DATA job stopped by its timeout at any point — while the rows are
// read, while they are written, before the swap or the commit — leaves the
// target table as it was, never part-filled, replaced or gone, and no
// staging or old table behind; when the job reports success the target
// holds the new rows. The timeouts sweep from less than the
// connect time to more than the whole write, so that the cut falls in
// every phase on a fast machine or a slow one. (A transaction bound to the
// job's context is rolled back by database/sql's own goroutine when the
// context ends, which once closed a connection another statement was
// about to use: see readOnlyTx.)
func TestWritesCutByTheirTimeout(t *testing.T) {
	t.Parallel()
	t.Run("mariadb", func(t *testing.T) {
		t.Parallel()
		srv := mariadbtest.Start(t, mariadbtest.Chinook(t))
		dsn := srv.DSN("am", "Chinook")
		cutWrites(t, connections.Spec{Name: "db", Dialect: connections.MySQL, DSN: dsn}, "mysql",
			"SELECT TrackId, Name, Milliseconds FROM Track WHERE TrackId <= %d",
			`SELECT COUNT(*), COALESCE(GROUP_CONCAT(TABLE_NAME), '') FROM information_schema.TABLES WHERE TABLE_NAME LIKE 'agentmesh\_%'`)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := testkit.Postgres(t, `CREATE TABLE track (track_id integer PRIMARY KEY, name text NOT NULL, ms integer)`,
			`INSERT INTO track SELECT g, 'track ' || g, g * 1000 FROM generate_series(1, 20000) g`)
		cutWrites(t, connections.Spec{Name: "db", Dialect: connections.Postgres, DSN: dsn}, "pgx",
			"SELECT track_id, name, ms FROM track WHERE track_id <= %d",
			`SELECT count(*), COALESCE(string_agg(tablename, ','), '') FROM pg_tables WHERE tablename LIKE 'agentmesh\_%'`)
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		db := connections.ChinookCopy(t)
		cutWrites(t, connections.Spec{Name: "db", Dialect: connections.SQLite, DSN: db}, "sqlite",
			"SELECT TrackId, Name, Milliseconds FROM Track WHERE TrackId <= %d",
			`SELECT count(*), COALESCE(group_concat(name, ','), '') FROM sqlite_master WHERE name LIKE 'agentmesh\_%' ESCAPE '\'`)
	})
}

// cutWrites writes query (with a row bound) into table cut_target again
// and again, replacing or emptying it, each time with a longer timeout,
// and checks the target after each write against what the write reported,
// reading it through a connection of its own (database/sql driver).
func cutWrites(t *testing.T, spec connections.Spec, driver, query, leftovers string) {
	t.Helper()
	ctx := context.Background()
	own, err := sql.Open(driver, spec.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Close() })
	reg := openRegistry(t, spec)
	rows := func() int64 {
		t.Helper()
		var n int64
		if err := own.QueryRowContext(ctx, "SELECT COUNT(*) FROM cut_target").Scan(&n); err != nil {
			t.Fatalf("the target table after a cut write: %v", err)
		}
		return n
	}
	have, err := reg.WriteTable(ctx, "db", fmt.Sprintf(query, 3000), "cut_target", connections.WriteCreate, time.Minute)
	if err != nil || have != 3000 {
		t.Fatalf("first write: %d, %v; want 3000 rows", have, err)
	}
	// Timeouts grow by a quarter up to the first that lets a write
	// through (first), then sweep the last stretch below it, where the cut
	// falls past the rows, into the swap or the commit.
	var cut, done int
	var lastCut error
	var first time.Duration
	firstAt := 0
	next := func(i int, timeout time.Duration) time.Duration {
		if first == 0 {
			return timeout * 5 / 4
		}
		return first/2 + first*time.Duration(i-firstAt)/16
	}
	for i, timeout := 0, 500*time.Microsecond; timeout < 10*time.Second && (first == 0 || i < firstAt+16); i, timeout = i+1, next(i+1, timeout) {
		want := int64(3000 - 1 - i%2*1000 - i%1000) // differs from the last write's count
		mode := []connections.WriteMode{connections.WriteDrop, connections.WriteTruncate}[i%2]
		n, err := reg.WriteTable(ctx, "db", fmt.Sprintf(query, want), "cut_target", mode, timeout)
		got := rows()
		switch {
		case err == nil && (n != want || got != want):
			t.Fatalf("write %d (%v): reported %d rows, the table holds %d; want %d", i, timeout, n, got, want)
		case err == nil:
			done++
			have = want
			if first == 0 {
				first, firstAt = timeout, i
			}
		case got != have:
			t.Fatalf("write %d cut after %v (%v): the table holds %d rows, want %d as before", i, timeout, err, got, have)
		default:
			cut++
			lastCut = err
		}
		var left int
		var names string
		if lerr := own.QueryRowContext(ctx, leftovers).Scan(&left, &names); lerr != nil || left != 0 {
			t.Fatalf("write %d (%v, %v): staging or old tables left behind: %s, %v", i, timeout, err, names, lerr)
		}
	}
	t.Logf("%d writes cut by their timeout, %d done; the first done had %v; the last cut: %v", cut, done, first, lastCut)
	if cut == 0 || done == 0 {
		t.Fatalf("%d cut, %d done: the timeouts did not span the write", cut, done)
	}
}
