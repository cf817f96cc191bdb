package main

import "testing"

// TestRetrievalQualityFloor fails when a change makes retrieval on the
// labelled corpus clearly worse than it was measured (recall@10/MRR: bm25
// 0.74/0.91, vector 0.58/0.82, hybrid 0.71/0.87), or when fusion loses to
// the weaker retriever. (With the built-in embedder, plain RRF does not
// beat BM25 on this corpus; the eval prints the weighted variant too.)
func TestRetrievalQualityFloor(t *testing.T) {
	t.Parallel()
	res, err := evaluate("../../testdata/eval", 10, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	floors := map[string][2]float64{"bm25": {0.68, 0.85}, "vector": {0.52, 0.75}, "hybrid (RRF)": {0.65, 0.82}}
	by := map[string]result{}
	for _, r := range res {
		by[r.name] = r
		f := floors[r.name]
		if r.recall < f[0] || r.mrr < f[1] {
			t.Errorf("%s: recall@10 %.3f MRR %.3f, floors %.2f / %.2f", r.name, r.recall, r.mrr, f[0], f[1])
		}
	}
	if h, v := by["hybrid (RRF)"], by["vector"]; h.recall < v.recall || h.mrr < v.mrr {
		t.Errorf("hybrid %.3f/%.3f below vectors alone %.3f/%.3f", h.recall, h.mrr, v.recall, v.mrr)
	}
}
