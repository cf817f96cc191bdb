package main

import "testing"

// TestRetrievalQualityFloor fails when a change makes retrieval on the
// labelled corpus clearly worse than it was measured (bm25 0.72/0.87,
// vector 0.58/0.82, hybrid 0.70/0.88 recall@10/MRR), or when hybrid ranks
// worse than the better retriever alone.
func TestRetrievalQualityFloor(t *testing.T) {
	t.Parallel()
	res, err := evaluate("../../testdata/eval", 10, false)
	if err != nil {
		t.Fatal(err)
	}
	floors := map[string][2]float64{"bm25": {0.65, 0.80}, "vector": {0.52, 0.75}, "hybrid (RRF)": {0.65, 0.82}}
	by := map[string]result{}
	for _, r := range res {
		by[r.name] = r
		f := floors[r.name]
		if r.recall < f[0] || r.mrr < f[1] {
			t.Errorf("%s: recall@10 %.3f MRR %.3f, floors %.2f / %.2f", r.name, r.recall, r.mrr, f[0], f[1])
		}
	}
	// Fusion must not rank worse than the better retriever alone (3%
	// slack for ties that BM25 orders by index position).
	if h, best := by["hybrid (RRF)"], max(by["bm25"].mrr, by["vector"].mrr); h.mrr < 0.97*best {
		t.Errorf("hybrid MRR %.3f below the better single retriever (%.3f)", h.mrr, best)
	}
}
