package bm25

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestMaxScoreMatchesExhaustive: the pruned evaluation returns exactly the
// top k of scoring every posting, with and without filters, over a corpus
// with Zipf-distributed words (rare and very common terms mixed).
func TestMaxScoreMatchesExhaustive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ix, err := Open(t.TempDir() + "/ix")
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	r := rand.New(rand.NewPCG(5, 5))
	words := make([]string, 800)
	for i := range words {
		words[i] = fmt.Sprintf("w%dx", i)
	}
	zipf := rand.NewZipf(r, 1.2, 1, uint64(len(words)-1))
	var docs []Doc
	for i := 0; i < 3000; i++ {
		n := 5 + r.IntN(60)
		ws := make([]string, n)
		for j := range ws {
			ws[j] = words[zipf.Uint64()]
		}
		docs = append(docs, Doc{Key: fmt.Sprintf("c%04d", i), Doc: fmt.Sprintf("d%d", i/7), Text: strings.Join(ws, " "),
			SourceType: int32(1 + i%3), ContentType: []string{"wiki", "email"}[i%2]})
	}
	for i := 0; i < len(docs); i += 1000 {
		if err := ix.Add(docs[i : i+1000]); err != nil {
			t.Fatal(err)
		}
	}
	// Some deletes, so postings of deleted documents are in play.
	if err := ix.Delete([]string{"c0001", "c0002", "c0500"}); err != nil {
		t.Fatal(err)
	}
	filters := []*Filter{nil, {SourceTypes: []int32{2}}, {ContentTypes: []string{"email"}, Docs: []string{"d3", "d4", "d100", "d200"}}}
	for q := 0; q < 120; q++ {
		n := 1 + r.IntN(6)
		qs := make([]string, n)
		for j := range qs {
			if j%2 == 0 {
				qs[j] = words[zipf.Uint64()] // common
			} else {
				qs[j] = words[r.IntN(len(words))] // anything, often rare
			}
		}
		text := strings.Join(qs, " ")
		f := filters[q%len(filters)]
		for _, k := range []int{1, 10, 50} {
			fast, err := ix.search(ctx, text, k, f, false)
			if err != nil {
				t.Fatal(err)
			}
			slow, err := ix.search(ctx, text, k, f, true)
			if err != nil {
				t.Fatal(err)
			}
			if len(fast) != len(slow) {
				t.Fatalf("%q k=%d filter=%v: %d hits, exhaustive %d", text, k, f, len(fast), len(slow))
			}
			// Same scores at every rank; the same chunks, except that
			// chunks whose scores tie (up to float rounding, which differs
			// with the order of the sums) may swap.
			slowKeys := map[string]float64{}
			for _, h := range slow {
				slowKeys[h.Key] = h.Score
			}
			last := 0.0
			if len(slow) > 0 {
				last = slow[len(slow)-1].Score
			}
			for i := range fast {
				if math.Abs(fast[i].Score-slow[i].Score) > 1e-9 {
					t.Fatalf("%q k=%d filter=%v: rank %d scores %v, exhaustive %v", text, k, f, i, fast[i], slow[i])
				}
				if _, ok := slowKeys[fast[i].Key]; !ok && math.Abs(fast[i].Score-last) > 1e-9 {
					t.Fatalf("%q k=%d filter=%v: %v is not in the exhaustive top %d", text, k, f, fast[i], k)
				}
			}
			for _, h := range fast {
				if h.Key == "c0001" || h.Key == "c0500" {
					t.Fatalf("deleted chunk %s returned", h.Key)
				}
			}
		}
	}
}
