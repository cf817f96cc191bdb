package vector

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// build indexes vs as items "k<i>" of documents "d<i/10>" with source type
// i%4 and content type "ct<i%3>".
func build(t testing.TB, ix interface{ Add(...Item) error }, vs [][]float32) {
	t.Helper()
	for i, v := range vs {
		if err := ix.Add(item(i, v)); err != nil {
			t.Fatal(err)
		}
	}
}

func item(i int, v []float32) Item {
	return Item{Key: fmt.Sprintf("k%d", i), Vector: v, Attrs: Attrs{Doc: fmt.Sprintf("d%d", i/10), SourceType: int32(i % 4), ContentType: fmt.Sprintf("ct%d", i%3)}}
}

// recall is the share of the exact top-k that the index's search found.
func recall(t testing.TB, ix *Index, qs [][]float32, k int, f *Filter) float64 {
	t.Helper()
	r, err := ix.Recall(qs, k, f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSearchRecallAgainstExact(t *testing.T) {
	t.Parallel()
	vs := clustered(5100, 64, 40, 1, 1)
	ix := New(64, Params{})
	build(t, ix, vs[:5000])
	if got := recall(t, ix, vs[5000:], 10, nil); got < 0.95 {
		t.Fatalf("recall@10 = %.3f, want >= 0.95", got)
	}
	// The best hit of an indexed vector is itself.
	h, err := ix.Search(vs[123], 1, nil)
	if err != nil || len(h) != 1 || h[0].Key != "k123" || h[0].Score < 0.999 {
		t.Fatalf("self search = %v, %v", h, err)
	}
}

func TestDeleteLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	vs := clustered(3000, 32, 20, 1, 2)
	ix := New(32, Params{M: 8})
	build(t, ix, vs)
	slotsBefore := len(ix.level)

	// Delete every third document, and a few single items.
	var gone []string
	for d := 0; d < 300; d += 3 {
		keys := ix.DeleteDocument(fmt.Sprintf("d%d", d))
		if len(keys) != 10 {
			t.Fatalf("DeleteDocument(d%d) removed %d keys, want 10", d, len(keys))
		}
		gone = append(gone, keys...)
	}
	if n := ix.Delete("k11", "k12", "nope"); n != 2 {
		t.Fatalf("Delete removed %d, want 2", n)
	}
	gone = append(gone, "k11", "k12")
	if got, want := ix.Len(), 3000-len(gone); got != want {
		t.Fatalf("Len = %d, want %d", got, want)
	}
	goneSet := map[string]bool{}
	for _, k := range gone {
		goneSet[k] = true
		if ix.Contains(k) {
			t.Fatalf("deleted key %s still indexed", k)
		}
	}
	checkInvariants(t, ix)
	// A deleted vector used as the query finds only survivors.
	for i := 0; i < 3000; i += 7 {
		hits, err := ix.Search(vs[i], 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			if goneSet[h.Key] {
				t.Fatalf("search returned deleted key %s", h.Key)
			}
		}
	}
	if got := recall(t, ix, vs[:200], 10, nil); got < 0.95 {
		t.Fatalf("recall after deletes = %.3f, want >= 0.95", got)
	}
	// Freed slots are reused.
	for _, k := range gone {
		var n int
		fmt.Sscanf(k, "k%d", &n)
		if err := ix.Add(item(n, vs[n])); err != nil {
			t.Fatal(err)
		}
	}
	if len(ix.level) != slotsBefore {
		t.Fatalf("slots grew from %d to %d although freed slots were available", slotsBefore, len(ix.level))
	}
	checkInvariants(t, ix)
	if ix.Len() != 3000 {
		t.Fatalf("Len after re-adding = %d", ix.Len())
	}
}

// checkInvariants verifies that no live node links to a free slot or to
// itself, and that the entry point is live and on the top level.
func checkInvariants(t *testing.T, ix *Index) {
	t.Helper()
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	top := -1
	for id, l := range ix.level {
		top = max(top, int(l))
		for lc := 0; lc <= int(l); lc++ {
			for _, n := range ix.links(uint32(id), lc) {
				if ix.level[n] < int8(lc) {
					t.Fatalf("node %d links on level %d to %d (level %d)", id, lc, n, ix.level[n])
				}
				if n == uint32(id) {
					t.Fatalf("node %d links to itself", id)
				}
			}
		}
	}
	if ix.live > 0 && (ix.level[ix.entry] < 0 || int(ix.level[ix.entry]) != top || ix.maxLevel != top) {
		t.Fatalf("entry %d at level %d, max level %d, top %d", ix.entry, ix.level[ix.entry], ix.maxLevel, top)
	}
}

func TestAddReplacesKey(t *testing.T) {
	t.Parallel()
	vs := clustered(101, 16, 4, 1, 3)
	ix := New(16, Params{})
	build(t, ix, vs[:100])
	if err := ix.Add(Item{Key: "k5", Vector: vs[100], Attrs: Attrs{Doc: "other"}}); err != nil {
		t.Fatal(err)
	}
	if ix.Len() != 100 {
		t.Fatalf("Len = %d after replacing, want 100", ix.Len())
	}
	h, _ := ix.Search(vs[100], 1, nil)
	if len(h) != 1 || h[0].Key != "k5" || h[0].Score < 0.999 {
		t.Fatalf("replaced item not found by its new vector: %v", h)
	}
	if keys := ix.DocKeys("other"); !slices.Equal(keys, []string{"k5"}) {
		t.Fatalf("DocKeys(other) = %v", keys)
	}
	if slices.Contains(ix.DocKeys("d0"), "k5") {
		t.Fatal("k5 still listed under its old document")
	}
}

func TestFilteredSearch(t *testing.T) {
	t.Parallel()
	vs := clustered(6000, 32, 30, 1, 4)
	ix := New(32, Params{})
	build(t, ix, vs)
	q := vs[17]
	tests := []struct {
		name string
		f    Filter
		ok   func(i int) bool
	}{
		{"one document (exact scan)", Filter{Docs: []string{"d42"}}, func(i int) bool { return i/10 == 42 }},
		{"source type, half the index (graph walk)", Filter{SourceTypes: []int32{1, 3}}, func(i int) bool { return i%4 == 1 || i%4 == 3 }},
		{"content type and source type", Filter{SourceTypes: []int32{0}, ContentTypes: []string{"ct2"}}, func(i int) bool { return i%4 == 0 && i%3 == 2 }},
		{"unknown document", Filter{Docs: []string{"nope"}}, func(int) bool { return false }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hits, err := ix.Search(q, 10, &tc.f)
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			for i := range vs {
				if tc.ok(i) {
					want++
				}
			}
			if len(hits) != min(10, want) {
				t.Fatalf("%d hits, want %d", len(hits), min(10, want))
			}
			for _, h := range hits {
				var i int
				fmt.Sscanf(h.Key, "k%d", &i)
				if !tc.ok(i) {
					t.Fatalf("hit %s does not pass the filter", h.Key)
				}
			}
			if r := recall(t, ix, vs[:50], 10, &tc.f); r < 0.95 {
				t.Fatalf("filtered recall = %.3f", r)
			}
		})
	}
}

func TestInvalidItems(t *testing.T) {
	t.Parallel()
	ix := New(4, Params{})
	tests := []struct {
		name string
		it   Item
		want error
	}{
		{"wrong dimension", Item{Key: "a", Vector: []float32{1, 2}}, ErrDimension},
		{"zero vector", Item{Key: "a", Vector: []float32{0, 0, 0, 0}}, ErrZeroVector},
		{"empty key", Item{Vector: []float32{1, 0, 0, 0}}, ErrEmptyKey},
	}
	for _, tc := range tests {
		if err := ix.Add(Item{Key: "ok", Vector: []float32{1, 0, 0, 0}}, tc.it); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	if ix.Len() != 0 {
		t.Fatalf("a batch with an invalid item added %d items", ix.Len())
	}
	if _, err := ix.Search([]float32{1}, 3, nil); !errors.Is(err, ErrDimension) {
		t.Fatalf("search with a short query: %v", err)
	}
}

func TestDotAssemblyMatchesGeneric(t *testing.T) {
	t.Parallel()
	if !useAVX2 {
		t.Skip("no AVX2+FMA on this CPU")
	}
	r := rand.New(rand.NewPCG(9, 9))
	for n := 1; n <= 130; n++ {
		a, b := make([]float32, n), make([]float32, n)
		for i := range a {
			a[i], b[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
		}
		got, want := dot(a, b), dotGeneric(a, b)
		if d := got - want; d > 1e-4 || d < -1e-4 {
			t.Fatalf("n=%d: assembly %v, generic %v", n, got, want)
		}
	}
}

func TestStorePersistsAcrossReopenAndCrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	vs := clustered(1200, 24, 10, 1, 5)
	s, err := Open(dir, 24, StoreOptions{SnapshotBytes: 40 << 10}) // small: snapshots happen mid-way
	if err != nil {
		t.Fatal(err)
	}
	build(t, s, vs[:1000])
	if _, err := s.DeleteDocument("d7"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete("k500"); err != nil {
		t.Fatal(err)
	}
	want := searchAll(t, s.Index, vs[1000:])
	wantLen := s.Len()

	// Crash: no Close, so the tail of the writes is only in the log.
	crashed, err := Open(dir, 24, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if crashed.Len() != wantLen || crashed.Contains("k500") || crashed.Contains("k75") {
		t.Fatalf("after crash: Len %d (want %d), k500 %v, k75 %v", crashed.Len(), wantLen, crashed.Contains("k500"), crashed.Contains("k75"))
	}
	if got := searchAll(t, crashed.Index, vs[1000:]); !slices.Equal(got, want) {
		t.Fatal("search results differ after replaying the log")
	}
	if err := crashed.Close(); err != nil {
		t.Fatal(err)
	}
	// A torn record at the end of the log is dropped, the rest kept.
	f, err := os.OpenFile(filepath.Join(dir, walFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{200, 0, 0, 0, 1, 2, 3})
	f.Close()
	reopened, err := Open(dir, 24, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	if got := searchAll(t, reopened.Index, vs[1000:]); !slices.Equal(got, want) {
		t.Fatal("search results differ after reopening from the snapshot")
	}
	if err := reopened.Add(item(1100, vs[1100])); err != nil {
		t.Fatalf("write after dropping a torn record: %v", err)
	}
	if _, err := Open(dir, 32, StoreOptions{}); !errors.Is(err, ErrDimension) {
		t.Fatalf("opening with another dimension: %v", err)
	}
}

func searchAll(t *testing.T, ix *Index, qs [][]float32) []string {
	t.Helper()
	var out []string
	for _, q := range qs {
		hits, err := ix.Search(q, 5, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			out = append(out, fmt.Sprintf("%s:%.5f", h.Key, h.Score))
		}
	}
	return out
}

// TestBatchAddLinksInParallel adds big batches in one call (linked by
// several goroutines), replacing some keys, while searches run.
func TestBatchAddLinksInParallel(t *testing.T) {
	t.Parallel()
	vs := clustered(4100, 48, 30, 1, 6)
	ix := New(48, Params{})
	items := make([]Item, 4000)
	for i := range items {
		items[i] = item(i, vs[i])
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 200; i++ {
			if _, err := ix.Search(vs[4000+i%100], 5, nil); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	if err := ix.Add(items...); err != nil {
		t.Fatal(err)
	}
	// Replace the first 500 with new vectors, in one batch.
	for i := 0; i < 500; i++ {
		items[i].Vector = vs[(i+1000)%4000]
	}
	if err := ix.Add(items[:500]...); err != nil {
		t.Fatal(err)
	}
	<-done
	if ix.Len() != 4000 {
		t.Fatalf("Len = %d, want 4000", ix.Len())
	}
	checkInvariants(t, ix)
	if got := recall(t, ix, vs[4000:], 10, nil); got < 0.95 {
		t.Fatalf("recall@10 after parallel batches = %.3f", got)
	}
}
