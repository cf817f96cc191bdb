package connections_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
)

// TestResultsBoundedInBytes: a read's rows stop at MaxResultBytes of
// values, on SQLite and PostgreSQL, and a PostgreSQL row larger than that
// fails the query without the driver reading it (a value may be 1 GB);
// the connection's next read works. Without the bound every row was held
// whole (this test's 200 MiB and 267 MiB), and PostgreSQL's 256 MiB row
// was read whole.
//
// Not parallel: it measures the process's allocations.
func TestResultsBoundedInBytes(t *testing.T) {
	ctx := context.Background()
	// 200 rows of 1 MiB (1.33 MiB as base64, the way non-UTF-8 bytes are
	// carried), then 200 of 1 MiB of text.
	const (
		blobs = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) SELECT i, randomblob(1048576) AS b FROM n"
		texts = "SELECT i, repeat('x', 1048576) AS b FROM generate_series(1, 200) i"
	)
	check := func(t *testing.T, res *connections.Result, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		size := 0
		for _, row := range res.Rows {
			size += 8 + len(row[1].(string))
		}
		if !res.TooLarge || !res.Truncated || size > connections.MaxResultBytes || size < connections.MaxResultBytes-2<<20 {
			t.Fatalf("%d rows of %d bytes in all, too large %v, truncated %v; want rows up to %d bytes, marked too large",
				len(res.Rows), size, res.TooLarge, res.Truncated, connections.MaxResultBytes)
		}
		t.Logf("%d of 200 rows kept, %d MiB", len(res.Rows), size>>20)
	}

	t.Run("sqlite", func(t *testing.T) {
		reg := openRegistry(t, connections.Spec{Name: "music", Dialect: connections.SQLite, DSN: connections.ChinookCopy(t)})
		res, err := reg.Query(ctx, "music", blobs, 200, 30*time.Second)
		check(t, res, err)
		// Under the bound: every row, nothing marked.
		res, err = reg.Query(ctx, "music", strings.Replace(blobs, "1048576", "1024", 1), 200, 30*time.Second)
		if err != nil || len(res.Rows) != 200 || res.TooLarge || res.Truncated {
			t.Fatalf("200 rows of 1 KiB: %d rows, too large %v, truncated %v, %v", len(res.Rows), res.TooLarge, res.Truncated, err)
		}
	})

	t.Run("postgres", func(t *testing.T) {
		dsn := testkit.Postgres(t)
		reg := openRegistry(t, connections.Spec{Name: "wh", Dialect: connections.Postgres, DSN: dsn})
		res, err := reg.Query(ctx, "wh", texts, 200, 30*time.Second)
		check(t, res, err)

		const big = 256 << 20
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = reg.Query(ctx, "wh", fmt.Sprintf("SELECT repeat('x', %d) AS v", big), 10, 30*time.Second)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, connections.ErrQuery) || !strings.Contains(err.Error(), "larger than 64 MiB") {
			t.Fatalf("a 256 MiB value: %v; want ErrQuery naming the 64 MiB bound", err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > big/4 {
			t.Fatalf("reading the refused 256 MiB row allocated %d MiB", n>>20)
		}
		res, err = reg.Query(ctx, "wh", "SELECT 1 AS one", 10, 5*time.Second)
		if err != nil || len(res.Rows) != 1 {
			t.Fatalf("the read after the refused row: %v, %v", res, err)
		}
	})
}
