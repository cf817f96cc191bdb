package vector

import (
	"fmt"
	"testing"
)

// BenchmarkDistance compares the distance kernels on 384 dimensions: the
// portable float32 loop (baseline), the AVX2 float32 kernel used for
// re-ranking and exact search, and the int8 kernel the graph is walked
// with.
func BenchmarkDistance(b *testing.B) {
	vs := clustered(2, 384, 1, 1, 1)
	a, c := vs[0], vs[1]
	qa, qc := make([]int8, 384), make([]int8, 384)
	quantize(a, qa)
	quantize(c, qc)
	var sink float32
	b.Run("float32-generic", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			sink += dotGeneric(a, c)
		}
	})
	b.Run("float32-kernel", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			sink += dot(a, c)
		}
	})
	b.Run("int8-kernel", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			sink += float32(dot8(qa, qc))
		}
	})
	_ = sink
}

// BenchmarkSearch is one top-10 graph search in indexes of growing size
// of clustered 384-dimension vectors, reporting recall@10 against exact
// search.
func BenchmarkSearch(b *testing.B) {
	for _, n := range []int{10_000, 30_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			vs := clustered(n+100, 384, 100, 1, 9)
			ix := New(384, Params{})
			items := make([]Item, n)
			for i := range items {
				items[i] = item(i, vs[i])
			}
			if err := ix.Add(items...); err != nil {
				b.Fatal(err)
			}
			qs := vs[n:]
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := ix.Search(qs[i%len(qs)], 10, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(recall(b, ix, qs, 10, nil), "recall@10")
		})
	}
}
