package hybrid_test

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/agentmesh/agentmesh/services/indexer/internal/embed"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
	"github.com/agentmesh/agentmesh/services/indexer/internal/synthetic"
)

// benchChunks is the size of the benchmark shard (issue 6: 100,000 chunks
// of 384-dimension vectors).
const benchChunks = 100_000

// fixture is one 100k-chunk shard shared by the benchmarks; building it
// takes a minute or two, once per `go test -bench` run.
var fixture struct {
	once    sync.Once
	m       *hybrid.Manager
	sh      *hybrid.Shard
	queries []string
	qvs     [][]float32
	err     error
}

func benchShard(b *testing.B) (*hybrid.Shard, []string, [][]float32) {
	b.Helper()
	fixture.once.Do(func() {
		dir, err := os.MkdirTemp("", "hybrid-bench-")
		if err != nil {
			fixture.err = err
			return
		}
		fixture.m, fixture.err = hybrid.NewManager(hybrid.ManagerOptions{Dir: dir, Embedder: embed.LocalHashName, Dimensions: embed.LocalHashDimensions, SnapshotBytes: 1 << 40})
		if fixture.err != nil {
			return
		}
		chunks := synthetic.Chunks(benchChunks, 1)
		for i := 0; i < len(chunks) && fixture.err == nil; i += 1000 {
			part := chunks[i:min(i+1000, len(chunks))]
			fixture.err = fixture.m.Write(hybrid.Scope{Tenant: "bench"}, func(tx hybrid.Tx) error { return tx.Add(part) })
		}
		fixture.sh, _ = fixture.m.Shard(hybrid.Scope{Tenant: "bench"})
		fixture.queries = synthetic.Queries(1000, benchChunks/10, 2)
		for _, q := range fixture.queries {
			fixture.qvs = append(fixture.qvs, embed.LocalHash{}.Vector(q))
		}
	})
	if fixture.err != nil {
		b.Fatal(fixture.err)
	}
	return fixture.sh, fixture.queries, fixture.qvs
}

func benchSearch(b *testing.B, mode hybrid.Mode) {
	sh, qs, qvs := benchShard(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := i % len(qs)
		if _, err := sh.Search(ctx, qs[j], qvs[j], 10, mode, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSearchHybrid100k is one hybrid query (BM25 + HNSW + RRF, top
// 10) on 100,000 chunks; target ≤ 5 ms.
func BenchmarkSearchHybrid100k(b *testing.B) { benchSearch(b, hybrid.ModeHybrid) }

// BenchmarkSearchKeyword100k is BM25 alone.
func BenchmarkSearchKeyword100k(b *testing.B) { benchSearch(b, hybrid.ModeKeyword) }

// BenchmarkSearchVector100k is HNSW alone; it also reports recall@10
// against exact search (target ≥ 0.95) and the exact search time as the
// baseline measured in the same run.
func BenchmarkSearchVector100k(b *testing.B) {
	sh, _, qvs := benchShard(b)
	ix := sh.Vectors()
	recall, err := ix.Recall(qvs[:100], 10, nil)
	if err != nil {
		b.Fatal(err)
	}
	benchSearch(b, hybrid.ModeVector)
	b.ReportMetric(recall, "recall@10")
	b.ReportMetric(float64(ix.MemoryBytes())/(1<<20), "index-MiB")
}

// BenchmarkSearchExact100k is the exact scan every approximate figure is
// compared with.
func BenchmarkSearchExact100k(b *testing.B) {
	sh, _, qvs := benchShard(b)
	ix := sh.Vectors()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ix.SearchExact(qvs[i%len(qvs)], 10, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIngest writes b.N embedded chunks, in batches of 1,000, to a
// fresh shard, and reports chunks/s excluding embedding (target ≥
// 1,000/s; run with -benchtime 100000x for the rate at 100k).
func BenchmarkIngest(b *testing.B) {
	chunks := synthetic.Chunks(max(b.N, 1000), 3)
	m, err := hybrid.NewManager(hybrid.ManagerOptions{Dir: b.TempDir(), Embedder: embed.LocalHashName, Dimensions: embed.LocalHashDimensions, SnapshotBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i += 1000 {
		part := chunks[i:min(i+1000, b.N)]
		if err := m.Write(hybrid.Scope{Tenant: "bench"}, func(tx hybrid.Tx) error { return tx.Add(part) }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "chunks/s")
}
