package vector

// cand is a node and its distance (1 - cosine similarity) to the query.
type cand struct {
	d  float32
	id uint32
}

// minHeap pops the closest candidate first. It is a plain binary heap on a
// slice: container/heap's interface calls cost more than the distance
// computations on the hot path.
type minHeap []cand

func (h *minHeap) push(c cand) {
	*h = append(*h, c)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p].d <= s[i].d {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *minHeap) pop() cand {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s[r].d < s[l].d {
			m = r
		}
		if s[i].d <= s[m].d {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// maxHeap pops the farthest candidate first; it holds the best results so
// far, and its top is the one to evict. It is a minHeap over negated
// distances, so both share one implementation at the cost of a sign flip.
type maxHeap minHeap

func (h *maxHeap) push(c cand) {
	c.d = -c.d
	(*minHeap)(h).push(c)
}

func (h *maxHeap) pop() cand {
	c := (*minHeap)(h).pop()
	c.d = -c.d
	return c
}

func (h maxHeap) top() cand { return cand{d: -h[0].d, id: h[0].id} }

// keep adds c and, if h then holds more than k, drops the farthest: h
// stays the k best candidates seen.
func (h *maxHeap) keep(c cand, k int) {
	h.push(c)
	if len(*h) > k {
		h.pop()
	}
}

// cands returns the held candidates with their distances, in no particular
// order; h must not be used afterwards.
func (h maxHeap) cands() []cand {
	for i := range h {
		h[i].d = -h[i].d
	}
	return []cand(h)
}

// visited marks nodes seen by one search. Resetting is O(1): the epoch moves
// on, and a mark counts only if it carries the current epoch.
type visited struct {
	marks []uint32
	epoch uint32
}

// reset prepares v for a search over n slots.
func (v *visited) reset(n int) {
	if len(v.marks) < n {
		v.marks = make([]uint32, n+n/4+64)
		v.epoch = 0
	}
	v.epoch++
	if v.epoch == 0 { // wrapped: old marks could collide
		clear(v.marks)
		v.epoch = 1
	}
}

// visit marks id and reports whether it was unmarked.
func (v *visited) visit(id uint32) bool {
	if v.marks[id] == v.epoch {
		return false
	}
	v.marks[id] = v.epoch
	return true
}
