// Command bench measures the indexer's retrieval at scale (default 100,000
// chunks of 384-dimension vectors from the built-in embedder over
// synthetic operational text, see internal/synthetic) and prints the
// figures issue 6 asks for, each against its target:
//
//   - ingestion rate in chunks per second, excluding embedding: batches of
//     chunks written to a shard (BM25 and HNSW in parallel, durable);
//
//   - hybrid query latency p50/p99 (BM25 + HNSW + reciprocal rank fusion),
//     and each retriever alone, for 10 results;
//
//   - HNSW recall@10 against exact search on the same index;
//
//   - index memory: the vector index's heap, the Go heap, BM25 on disk;
//
//   - snapshot and reopen times.
//
//     go run ./cmd/bench [-n 100000]
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentmesh/agentmesh/services/indexer/internal/embed"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
	"github.com/agentmesh/agentmesh/services/indexer/internal/synthetic"
	"github.com/agentmesh/agentmesh/services/indexer/internal/vector"
)

func main() {
	n := flag.Int("n", 100_000, "chunks to index")
	nq := flag.Int("queries", 1000, "queries timed per mode")
	nr := flag.Int("recall-queries", 200, "queries for recall against exact search")
	batch := flag.Int("batch", 1000, "chunks per ingestion batch")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of ingestion and queries to this file")
	flag.StringVar(&queryProfile, "queryprofile", "", "write a CPU profile of the query phase only to this file")
	flag.IntVar(&params.M, "m", 0, "HNSW M (0: the index default)")
	flag.IntVar(&params.EfConstruction, "efc", 0, "HNSW efConstruction (0: the index default)")
	flag.IntVar(&params.EfSearch, "ef", 0, "HNSW efSearch (0: the index default)")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if err := run(*n, *nq, *nr, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// params tunes the HNSW index under test.
var params vector.Params

// queryProfile names the query-phase CPU profile, if any.
var queryProfile string

func check(ok bool) string {
	if ok {
		return "meets target"
	}
	return "MISSES target"
}

func run(n, nq, nr, batch int) error {
	ctx := context.Background()
	fmt.Printf("indexer bench: %d chunks, %d dims (%s), GOMAXPROCS=%d, load average %s\n\n", n, embed.LocalHashDimensions, embed.LocalHashName, runtime.GOMAXPROCS(0), loadAvg())
	defer func() {
		fmt.Printf("\nload average at the end: %s (figures on a shared machine vary with it)\n", loadAvg())
	}()
	t0 := time.Now()
	chunks := synthetic.Chunks(n, 1)
	queries := synthetic.Queries(max(nq, nr)+50, (n+9)/10, 2)
	fmt.Printf("generated and embedded the corpus in %v (not counted below)\n", time.Since(t0).Round(time.Millisecond))

	dir, err := os.MkdirTemp("", "indexer-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	opts := hybrid.ManagerOptions{Dir: dir, Embedder: embed.LocalHashName, Dimensions: embed.LocalHashDimensions, SnapshotBytes: 1 << 40, Vector: params}
	m, err := hybrid.NewManager(opts)
	if err != nil {
		return err
	}
	scope := hybrid.Scope{Tenant: "bench"}

	// Ingestion.
	cpu0 := cpuTime()
	start := time.Now()
	for i := 0; i < len(chunks); i += batch {
		b := chunks[i:min(i+batch, len(chunks))]
		if err := m.Write(scope, func(tx hybrid.Tx) error { return tx.Add(b) }); err != nil {
			return err
		}
	}
	ingest := time.Since(start)
	cpu := cpuTime() - cpu0
	rate := float64(n) / ingest.Seconds()
	fmt.Printf("\ningestion (BM25 + HNSW, durable batches of %d): %v, %.0f chunks/s  [target >= 1000/s: %s]\n", batch, ingest.Round(time.Millisecond), rate, check(rate >= 1000))
	fmt.Printf("  CPU: %v (%.0f chunks per CPU-second; on 2 idle cores the wall rate can reach about twice that)\n", cpu.Round(time.Millisecond), float64(n)/cpu.Seconds())

	sh, err := m.Shard(scope)
	if err != nil {
		return err
	}
	kw, vec, err := sh.Counts()
	if err != nil || kw != n || vec != n {
		return fmt.Errorf("shard holds %d/%d chunks, want %d (%v)", kw, vec, n, err)
	}
	segments := sh.Segments()
	t4 := time.Now()
	if err := sh.Compact(ctx); err != nil {
		return err
	}
	fmt.Printf("BM25 segments after ingestion: %d; compacted to %d in %v (a rebuild does this; incremental ingests leave it to the background merger)\n",
		segments, sh.Segments(), time.Since(t4).Round(time.Millisecond))

	// Memory.
	chunks = nil // let the corpus go, keep the index
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("\nmemory: vector index %.1f MiB (raw vectors %.1f MiB), Go heap in use %.1f MiB, BM25 index on disk %.1f MiB\n",
		mib(sh.MemoryBytes()), mib(int64(n*embed.LocalHashDimensions*4)), mib(int64(ms.HeapInuse)), mib(bm25Size(dir)))

	// Query latency.
	if queryProfile != "" {
		f, err := os.Create(queryProfile)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	e := embed.LocalHash{}
	qvs := make([][]float32, len(queries))
	t1 := time.Now()
	for i, q := range queries {
		qvs[i] = e.Vector(q)
	}
	fmt.Printf("\nquery embedding (local): %v per query (not counted below)\n", (time.Since(t1) / time.Duration(len(queries))).Round(time.Microsecond))
	for _, mode := range []struct {
		name string
		m    hybrid.Mode
	}{{"hybrid", hybrid.ModeHybrid}, {"bm25", hybrid.ModeKeyword}, {"vector", hybrid.ModeVector}} {
		for i := 0; i < 50; i++ { // warm up
			if _, err := sh.Search(ctx, queries[len(queries)-1-i], qvs[len(queries)-1-i], 10, mode.m, nil); err != nil {
				return err
			}
		}
		lat := make([]time.Duration, nq)
		for i := 0; i < nq; i++ {
			s := time.Now()
			if _, err := sh.Search(ctx, queries[i], qvs[i], 10, mode.m, nil); err != nil {
				return err
			}
			lat[i] = time.Since(s)
		}
		slices.Sort(lat)
		p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
		target := ""
		if mode.m == hybrid.ModeHybrid {
			target = fmt.Sprintf("  [target p50 <= 5ms: %s]", check(p50 <= 5*time.Millisecond))
		}
		fmt.Printf("%-6s query, top 10: p50 %v  p99 %v%s\n", mode.name, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), target)
	}

	// Recall against exact search.
	ix := sh.Vectors()
	recall, err := ix.Recall(qvs[:nr], 10, nil)
	if err != nil {
		return err
	}
	exact := time.Now()
	for i := 0; i < 20; i++ {
		if _, err := ix.SearchExact(qvs[i], 10, nil); err != nil {
			return err
		}
	}
	fmt.Printf("\nvector recall@10 vs exact search (%d queries): %.3f  [target >= 0.95: %s]; exact search takes %v per query\n",
		nr, recall, check(recall >= 0.95), (time.Since(exact) / 20).Round(100*time.Microsecond))

	// Persistence.
	t2 := time.Now()
	if err := m.Close(); err != nil {
		return err
	}
	closeTime := time.Since(t2)
	t3 := time.Now()
	m2, err := hybrid.NewManager(opts)
	if err != nil {
		return err
	}
	defer m2.Close()
	sh2, err := m2.Shard(scope)
	if err != nil {
		return err
	}
	_, vec2, _ := sh2.Counts()
	fmt.Printf("\npersistence: snapshot on close %v, reopen (load snapshot + BM25) %v, %d vectors back\n",
		closeTime.Round(time.Millisecond), time.Since(t3).Round(time.Millisecond), vec2)
	return nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// bm25Size is the size of the BM25 files under dir.
func bm25Size(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Base(filepath.Dir(p)) != "vectors" {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// loadAvg reads the 1, 5 and 15 minute load averages, where the system
// publishes them.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
