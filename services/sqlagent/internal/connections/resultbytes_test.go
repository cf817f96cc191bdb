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
		// SQLite builds a whole row before its first value is read: the
		// row's values share 256 MiB. Twenty values of 60 MB took the
		// process to 4.6 GB before.
		wide := "SELECT " + strings.TrimSuffix(strings.Repeat("randomblob(60000000), ", 20), ", ")
		start := time.Now()
		_, err = reg.Query(ctx, "music", wide, 10, 30*time.Second)
		if !errors.Is(err, connections.ErrQuery) || !strings.Contains(err.Error(), "longer than 12.8 MiB (a row's 256 MiB shared by its 20 columns)") {
			t.Fatalf("a row of twenty 60 MB values: %v; want ErrQuery naming the bound", err)
		}
		t.Logf("a row of twenty 60 MB values refused in %v", time.Since(start).Round(time.Millisecond))
		res, err = reg.Query(ctx, "music", strings.ReplaceAll(wide, "60000000", "1048576"), 10, 30*time.Second)
		if err != nil || len(res.Rows) != 1 || len(res.Rows[0]) != 20 {
			t.Fatalf("a row of twenty 1 MiB values: %v, %v", res, err)
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

// TestWriteHoldsABatchOfBytes: WRITE_DATA inserts its rows in batches of
// at most 500 rows and about 16 MiB of values: a copy of 40 rows of 4 MiB
// blobs (160 MiB) holds a few of them at a time, not the whole batch of
// 40 (30 rows of 60 MB took the process to 8.9 GB before).
//
// Not parallel: it measures the process's heap.
func TestWriteHoldsABatchOfBytes(t *testing.T) {
	ctx := context.Background()
	reg, _ := openMusic(t)
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	peak := base.HeapAlloc
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
		}
	}()
	n, err := reg.WriteTable(ctx, "music", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40) SELECT i, randomblob(4194304) AS b FROM n",
		"blobs", connections.WriteCreate, 60*time.Second)
	close(done)
	<-sampled
	if err != nil || n != 40 {
		t.Fatalf("WriteTable: %d, %v; want 40 rows", n, err)
	}
	grew := int64(peak) - int64(base.HeapAlloc)
	t.Logf("the heap grew by at most %d MiB while 160 MiB were copied", grew>>20)
	if grew > 100<<20 {
		t.Fatalf("the heap grew by %d MiB while 40 rows of 4 MiB were written; want a batch of about 16 MiB held at a time", grew>>20)
	}
}
