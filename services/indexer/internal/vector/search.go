package vector

import (
	"slices"
)

// Search returns up to k items closest to q by cosine similarity, best
// first, among those that pass f (nil: all). A filter that selects at most
// max(4096, a tenth of the index) items is answered by an exact scan of
// them; wider filters walk the graph, skipping items the filter rejects.
func (ix *Index) Search(q []float32, k int, f *Filter) ([]Hit, error) {
	qv, err := ix.query(q)
	if err != nil || k <= 0 {
		return nil, err
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if ix.maxLevel < 0 {
		return nil, nil
	}
	if f.empty() {
		return ix.hits(ix.graphSearch(qv, k, ix.p.EfSearch, nil), k), nil
	}
	allow, subset, n := ix.compile(f)
	if n == 0 {
		return nil, nil
	}
	if subset != nil {
		return ix.hits(ix.scan(qv, k, subset), k), nil
	}
	// The graph walk keeps ef allowed nodes; widen it by the filter's
	// selectivity so the allowed neighbourhood is explored as deeply.
	ef := ix.p.EfSearch * min(8, max(1, ix.live/n))
	return ix.hits(ix.graphSearch(qv, k, ef, allow), k), nil
}

// Recall measures the index: the share of the exact top k of each query
// (SearchExact) that Search finds, over all queries qs; 1 when there is
// nothing to find.
func (ix *Index) Recall(qs [][]float32, k int, f *Filter) (float64, error) {
	var found, total int
	for _, q := range qs {
		got, err := ix.Search(q, k, f)
		if err != nil {
			return 0, err
		}
		want, err := ix.SearchExact(q, k, f)
		if err != nil {
			return 0, err
		}
		set := make(map[string]bool, len(want))
		for _, h := range want {
			set[h.Key] = true
		}
		for _, h := range got {
			if set[h.Key] {
				found++
			}
		}
		total += len(want)
	}
	if total == 0 {
		return 1, nil
	}
	return float64(found) / float64(total), nil
}

// SearchExact returns the exact k nearest items by scanning every item; it
// is the baseline recall is measured against.
func (ix *Index) SearchExact(q []float32, k int, f *Filter) ([]Hit, error) {
	qv, err := ix.query(q)
	if err != nil || k <= 0 {
		return nil, err
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var subset []uint32
	if f.empty() {
		subset = make([]uint32, 0, ix.live)
		for id, l := range ix.level {
			if l >= 0 {
				subset = append(subset, uint32(id))
			}
		}
	} else {
		allow, sub, n := ix.compile(f)
		if n == 0 {
			return nil, nil
		}
		if sub != nil {
			subset = sub
		} else {
			for id, l := range ix.level {
				if l >= 0 && allow(uint32(id)) {
					subset = append(subset, uint32(id))
				}
			}
		}
	}
	return ix.hits(ix.scan(qv, k, subset), k), nil
}

func (ix *Index) query(q []float32) ([]float32, error) {
	if len(q) != ix.dim {
		return nil, ErrDimension
	}
	v := slices.Clone(q)
	if !Normalize(v) {
		return nil, ErrZeroVector
	}
	return v, nil
}

// graphSearch descends the upper levels greedily, then searches level 0,
// on int8 codes, and re-ranks the candidates with float32 distances.
func (ix *Index) graphSearch(q []float32, k, ef int, allow func(uint32) bool) []cand {
	qc := qvec{code: make([]int8, ix.dim)}
	qc.scale = quantize(q, qc.code)
	ep := cand{d: ix.dist8(qc, ix.entry), id: ix.entry}
	for lc := ix.maxLevel; lc > 0; lc-- {
		ep = ix.greedy(qc, ep, lc, false)
	}
	vis := ix.getVisited()
	defer ix.visitedPool.Put(vis)
	w := ix.searchLayer(qc, []cand{ep}, max(ef, k), 0, allow, vis, false)
	for i := range w {
		w[i].d = ix.dist(q, w[i].id)
	}
	sortCands(w)
	return w
}

// scan computes the distance to every slot in subset and keeps the k best.
func (ix *Index) scan(q []float32, k int, subset []uint32) []cand {
	w := make(maxHeap, 0, k+1)
	for _, id := range subset {
		d := ix.dist(q, id)
		if len(w) < k || d < w.top().d {
			w.keep(cand{d: d, id: id}, k)
		}
	}
	out := w.cands()
	sortCands(out)
	return out
}

func (ix *Index) hits(cs []cand, k int) []Hit {
	if len(cs) > k {
		cs = cs[:k]
	}
	out := make([]Hit, len(cs))
	for i, c := range cs {
		out[i] = Hit{Key: ix.keys[c.id], Score: 1 - c.d}
	}
	return out
}

// compile turns f into a predicate over slots. When few enough slots pass,
// it also returns them (subset), and the search scans them exactly; n is
// the number of passing slots. Caller holds mu.
func (ix *Index) compile(f *Filter) (allow func(uint32) bool, subset []uint32, n int) {
	var docSet map[uint32]bool
	if len(f.Docs) > 0 {
		docSet = map[uint32]bool{}
		for _, d := range f.Docs {
			if id, ok := ix.docs.lookup(d); ok {
				docSet[id] = true
			}
		}
		if len(docSet) == 0 {
			return nil, nil, 0
		}
	}
	var srcSet map[int32]bool
	if len(f.SourceTypes) > 0 {
		srcSet = map[int32]bool{}
		for _, s := range f.SourceTypes {
			srcSet[s] = true
		}
	}
	var ctSet map[uint32]bool
	if len(f.ContentTypes) > 0 {
		ctSet = map[uint32]bool{}
		for _, c := range f.ContentTypes {
			if id, ok := ix.ctypes.lookup(c); ok {
				ctSet[id] = true
			}
		}
		if len(ctSet) == 0 {
			return nil, nil, 0
		}
	}
	allow = func(id uint32) bool {
		return (docSet == nil || docSet[ix.docOf[id]]) &&
			(srcSet == nil || srcSet[ix.srcOf[id]]) &&
			(ctSet == nil || ctSet[ix.ctypeOf[id]])
	}
	limit := max(4096, ix.live/10)
	var cands []uint32
	if docSet != nil {
		for d := range docSet {
			for _, s := range ix.byDoc[d] {
				if allow(s) {
					cands = append(cands, s)
				}
			}
		}
		slices.Sort(cands)
		return allow, cands, len(cands)
	}
	for id, l := range ix.level {
		if l >= 0 && allow(uint32(id)) {
			n++
			if n <= limit {
				cands = append(cands, uint32(id))
			}
		}
	}
	if n <= limit {
		return allow, cands, n
	}
	return allow, nil, n
}
