// Package vector is an approximate nearest-neighbour index over float32
// vectors compared by cosine similarity: a hierarchical navigable small world
// graph (HNSW, Malkov & Yashunin, 2016). Deleting a vector removes it for
// good: the links that pointed at it are repaired at once and its slot is
// reused, so nothing of a deleted item stays behind. A filtered search that
// selects few items runs as an exact scan of those items instead of a graph
// walk. [Store] adds persistence: a snapshot plus a write-ahead log.
package vector

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// Errors returned by the index.
var (
	// ErrDimension means a vector's length differs from the index's.
	ErrDimension = errors.New("vector: wrong dimension")
	// ErrZeroVector means a vector has no direction (all zeros, NaN or Inf).
	ErrZeroVector = errors.New("vector: zero or non-finite vector")
	// ErrEmptyKey means an item has no key.
	ErrEmptyKey = errors.New("vector: empty key")
)

// Params tunes the graph. Zero fields take the defaults.
type Params struct {
	// M is the number of links a node keeps on levels above 0; level 0 keeps
	// up to 2*M. Default 16.
	M int
	// EfConstruction is the candidate list size while inserting. Default 160.
	EfConstruction int
	// EfSearch is the candidate list size while searching (at least k).
	// Default 400.
	EfSearch int
	// Seed seeds the level generator, so the same inserts in the same order
	// build the same graph. Default 1.
	Seed uint64
}

func (p Params) withDefaults() Params {
	if p.M <= 0 {
		p.M = 16
	}
	if p.EfConstruction <= 0 {
		p.EfConstruction = 160
	}
	if p.EfSearch <= 0 {
		p.EfSearch = 400
	}
	if p.Seed == 0 {
		p.Seed = 1
	}
	return p
}

// maxLevels caps the level a node can draw; with M=16 a level above 8 needs
// about 16^8 nodes.
const maxLevels = 16

// Attrs are the attributes a search can filter on.
type Attrs struct {
	// Doc is the document the item belongs to.
	Doc string
	// SourceType is the document's source type.
	SourceType int32
	// ContentType is the document's content type.
	ContentType string
}

// Item is one vector to index.
type Item struct {
	// Key identifies the item; adding a key again replaces it.
	Key string
	// Vector is the embedding; it is copied and normalised to unit length.
	Vector []float32
	// Attrs are filterable attributes.
	Attrs Attrs
}

// Hit is one search result.
type Hit struct {
	// Key of the item.
	Key string
	// Score is the cosine similarity to the query, in [-1, 1].
	Score float32
}

// Filter restricts a search. An empty field does not restrict; a non-empty
// field keeps items whose attribute is one of its values, and the fields
// combine with AND.
type Filter struct {
	// Docs keeps items of these documents.
	Docs []string
	// SourceTypes keeps items with these source types.
	SourceTypes []int32
	// ContentTypes keeps items with these content types.
	ContentTypes []string
}

func (f *Filter) empty() bool {
	return f == nil || (len(f.Docs) == 0 && len(f.SourceTypes) == 0 && len(f.ContentTypes) == 0)
}

// Index is an in-memory HNSW index. It is safe for concurrent use: searches
// run in parallel, writes are serialised and exclude searches.
type Index struct {
	dim int
	p   Params
	ml  float64 // level multiplier 1/ln(M)
	m0  int     // link capacity on level 0

	mu       sync.RWMutex // guards every field below
	pcg      *rand.PCG
	rng      *rand.Rand
	vecs     []float32  // slot i at [i*dim, (i+1)*dim)
	codes    []int8     // vecs quantised to int8, same layout
	scales   []float32  // per slot: vec ≈ code * scale
	level    []int8     // node level; -1 marks a free slot
	links0   []uint32   // slot i at [i*(m0+1)]: count, then ids
	upper    [][]uint32 // levels 1..level of slot i, each count then M ids
	keys     []string
	docOf    []uint32 // interned document per slot
	srcOf    []int32
	ctypeOf  []uint32 // interned content type per slot
	byKey    map[string]uint32
	byDoc    map[uint32][]uint32
	docs     interner
	ctypes   interner
	free     []uint32
	entry    uint32
	maxLevel int // -1 when empty
	live     int

	visitedPool sync.Pool

	// During a parallel batch insert (see addLocked) several goroutines
	// link nodes at once: each node's link lists are guarded by
	// stripes[id%len(stripes)], and entry/maxLevel by epMu. Outside a
	// batch, mu alone guards everything.
	stripes [1024]sync.Mutex
	epMu    sync.Mutex
}

// Batch insertion tuning.
const (
	// addChunk is how many items one hold of the write lock inserts, so
	// searches interleave with a long bulk insert.
	addChunk = 256
	// parallelMin is the smallest chunk inserted by several goroutines.
	parallelMin = 32
)

// New returns an empty index of dim-dimensional vectors.
func New(dim int, p Params) *Index {
	if dim <= 0 {
		panic("vector: dimension must be positive")
	}
	p = p.withDefaults()
	pcg := rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15)
	return &Index{
		dim:      dim,
		p:        p,
		ml:       1 / math.Log(float64(p.M)),
		m0:       2 * p.M,
		pcg:      pcg,
		rng:      rand.New(pcg),
		byKey:    map[string]uint32{},
		byDoc:    map[uint32][]uint32{},
		docs:     newInterner(),
		ctypes:   newInterner(),
		maxLevel: -1,
	}
}

// Dim returns the vector dimension.
func (ix *Index) Dim() int { return ix.dim }

// Params returns the effective parameters.
func (ix *Index) Params() Params { return ix.p }

// Len returns the number of items.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.live
}

// Contains reports whether key is indexed.
func (ix *Index) Contains(key string) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	_, ok := ix.byKey[key]
	return ok
}

// DocKeys returns the keys of doc's items.
func (ix *Index) DocKeys(doc string) []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	id, ok := ix.docs.lookup(doc)
	if !ok {
		return nil
	}
	var out []string
	for _, s := range ix.byDoc[id] {
		out = append(out, ix.keys[s])
	}
	slices.Sort(out)
	return out
}

// MemoryBytes estimates the heap the index holds: vectors, links, keys and
// lookup tables.
func (ix *Index) MemoryBytes() int64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	n := int64(cap(ix.vecs))*4 + int64(cap(ix.codes)) + int64(cap(ix.scales))*4 + int64(cap(ix.links0))*4 + int64(cap(ix.level)) +
		int64(cap(ix.docOf)+cap(ix.srcOf)+cap(ix.ctypeOf))*4 + int64(cap(ix.keys))*16 + int64(cap(ix.upper))*24
	for _, u := range ix.upper {
		n += int64(cap(u)) * 4
	}
	for k := range ix.byKey {
		n += int64(len(k))*2 + 48 // the key string (shared with keys) and the map entry
	}
	n += int64(len(ix.byDoc)) * 64
	for _, d := range ix.docs.names {
		n += int64(len(d)) + 48
	}
	return n
}

// Add inserts items, replacing items whose key is already indexed. It
// validates every item first and adds none if one is invalid.
func (ix *Index) Add(items ...Item) error {
	vecs := make([][]float32, len(items))
	for i, it := range items {
		v, err := ix.prepare(it)
		if err != nil {
			return fmt.Errorf("item %d (%q): %w", i, it.Key, err)
		}
		vecs[i] = v
	}
	// A later item with the same key wins.
	last := make(map[string]int, len(items))
	for i, it := range items {
		last[it.Key] = i
	}
	keep := make([]int, 0, len(last))
	for i, it := range items {
		if last[it.Key] == i {
			keep = append(keep, i)
		}
	}
	for start := 0; start < len(keep); start += addChunk {
		part := keep[start:min(start+addChunk, len(keep))]
		ix.mu.Lock()
		ix.addLocked(items, vecs, part)
		ix.mu.Unlock()
	}
	return nil
}

// addLocked inserts items[part], replacing items with the same keys. Big
// chunks are linked by GOMAXPROCS goroutines at once (the search for each
// new node's neighbours dominates insertion and parallelises well); the
// graph is then not deterministic, which HNSW does not need. Caller holds
// mu.
func (ix *Index) addLocked(items []Item, vecs [][]float32, part []int) {
	var replaced []uint32
	for _, i := range part {
		if s, ok := ix.byKey[items[i].Key]; ok {
			replaced = append(replaced, s)
		}
	}
	ix.removeSlots(replaced)
	slots := make([]uint32, len(part))
	levels := make([]int, len(part))
	for j, i := range part {
		slots[j] = ix.allocSlot()
		levels[j] = ix.randomLevel()
		ix.place(slots[j], items[i], vecs[i], levels[j])
	}
	workers := runtime.GOMAXPROCS(0)
	if len(part) < parallelMin || workers == 1 {
		for j := range slots {
			ix.connect(slots[j], levels[j], false)
		}
		return
	}
	first := 0
	if ix.maxLevel < 0 { // the first node becomes the entry point alone
		ix.connect(slots[0], levels[0], false)
		first = 1
	}
	var next atomic.Int64
	next.Store(int64(first))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				j := int(next.Add(1) - 1)
				if j >= len(slots) {
					return
				}
				ix.connect(slots[j], levels[j], true)
			}
		})
	}
	wg.Wait()
}

// prepare validates an item and returns its normalised copy.
func (ix *Index) prepare(it Item) ([]float32, error) {
	if it.Key == "" {
		return nil, ErrEmptyKey
	}
	if len(it.Vector) != ix.dim {
		return nil, fmt.Errorf("%w: %d, want %d", ErrDimension, len(it.Vector), ix.dim)
	}
	v := slices.Clone(it.Vector)
	if !Normalize(v) {
		return nil, ErrZeroVector
	}
	return v, nil
}

// Delete removes the items with these keys and returns how many existed.
func (ix *Index) Delete(keys ...string) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var slots []uint32
	for _, k := range keys {
		if s, ok := ix.byKey[k]; ok {
			slots = append(slots, s)
		}
	}
	ix.removeSlots(slots)
	return len(slots)
}

// DeleteDocument removes every item of doc and returns their keys.
func (ix *Index) DeleteDocument(doc string) []string {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	id, ok := ix.docs.lookup(doc)
	if !ok {
		return nil
	}
	slots := slices.Clone(ix.byDoc[id])
	keys := make([]string, len(slots))
	for i, s := range slots {
		keys[i] = ix.keys[s]
	}
	ix.removeSlots(slots)
	return keys
}

// vec returns the stored vector of slot id.
func (ix *Index) vec(id uint32) []float32 {
	o := int(id) * ix.dim
	return ix.vecs[o : o+ix.dim : o+ix.dim]
}

func (ix *Index) dist(q []float32, id uint32) float32 { return 1 - dot(q, ix.vec(id)) }

// code returns the int8 code of slot id.
func (ix *Index) code(id uint32) []int8 {
	o := int(id) * ix.dim
	return ix.codes[o : o+ix.dim : o+ix.dim]
}

// qvec is a vector quantised to int8 with its scale.
type qvec struct {
	code  []int8
	scale float32
}

func (ix *Index) qv(id uint32) qvec { return qvec{ix.code(id), ix.scales[id]} }

// dist8 is the approximate distance the graph is built and walked with:
// the inner product of the int8 codes, rescaled. It reads a quarter of the
// memory of the float32 distance and runs about twice as fast; searches
// re-rank their final candidates with float32 (see graphSearch).
func (ix *Index) dist8(q qvec, id uint32) float32 {
	return 1 - q.scale*ix.scales[id]*float32(dot8(q.code, ix.code(id)))
}

// links returns the neighbours of id on level lc.
func (ix *Index) links(id uint32, lc int) []uint32 {
	if lc == 0 {
		o := int(id) * (ix.m0 + 1)
		n := int(ix.links0[o])
		return ix.links0[o+1 : o+1+n]
	}
	o := (lc - 1) * (ix.p.M + 1)
	u := ix.upper[id]
	n := int(u[o])
	return u[o+1 : o+1+n]
}

// setLinks replaces the neighbours of id on level lc.
func (ix *Index) setLinks(id uint32, lc int, ids []uint32) {
	var dst []uint32
	if lc == 0 {
		o := int(id) * (ix.m0 + 1)
		dst = ix.links0[o : o+ix.m0+1]
	} else {
		o := (lc - 1) * (ix.p.M + 1)
		dst = ix.upper[id][o : o+ix.p.M+1]
	}
	dst[0] = uint32(copy(dst[1:], ids))
}

// capacity is the link capacity on level lc.
func (ix *Index) capacity(lc int) int {
	if lc == 0 {
		return ix.m0
	}
	return ix.p.M
}

// allocSlot returns a free slot, growing the arrays when none is left.
func (ix *Index) allocSlot() uint32 {
	if n := len(ix.free); n > 0 {
		s := ix.free[n-1]
		ix.free = ix.free[:n-1]
		return s
	}
	s := uint32(len(ix.level))
	ix.level = append(ix.level, -1)
	ix.vecs = append(ix.vecs, make([]float32, ix.dim)...)
	ix.codes = append(ix.codes, make([]int8, ix.dim)...)
	ix.scales = append(ix.scales, 0)
	ix.links0 = append(ix.links0, make([]uint32, ix.m0+1)...)
	ix.upper = append(ix.upper, nil)
	ix.keys = append(ix.keys, "")
	ix.docOf = append(ix.docOf, 0)
	ix.srcOf = append(ix.srcOf, 0)
	ix.ctypeOf = append(ix.ctypeOf, 0)
	return s
}

// randomLevel draws a node level from the exponential distribution of the
// HNSW paper.
func (ix *Index) randomLevel() int {
	l := int(-math.Log(1-ix.rng.Float64()) * ix.ml)
	return min(l, maxLevels-1)
}

// place stores item data in slot s at level lvl, without linking it.
func (ix *Index) place(s uint32, it Item, v []float32, lvl int) {
	copy(ix.vec(s), v)
	ix.scales[s] = quantize(v, ix.code(s))
	ix.level[s] = int8(lvl)
	if lvl > 0 {
		ix.upper[s] = make([]uint32, lvl*(ix.p.M+1))
	} else {
		ix.upper[s] = nil
	}
	o := int(s) * (ix.m0 + 1)
	ix.links0[o] = 0
	ix.keys[s] = it.Key
	d := ix.docs.intern(it.Attrs.Doc)
	ix.docOf[s] = d
	ix.srcOf[s] = it.Attrs.SourceType
	ix.ctypeOf[s] = ix.ctypes.intern(it.Attrs.ContentType)
	ix.byKey[it.Key] = s
	ix.byDoc[d] = append(ix.byDoc[d], s)
	ix.live++
}

// connect links placed node s of level lvl into the graph (Algorithm 1
// of the paper). Caller holds mu; with locked, other goroutines connect
// nodes at the same time, so link lists are read and written under their
// stripe lock and the entry point under epMu.
func (ix *Index) connect(s uint32, lvl int, locked bool) {
	if locked {
		ix.epMu.Lock()
	}
	entry, maxLevel := ix.entry, ix.maxLevel
	if locked {
		ix.epMu.Unlock()
	}
	if maxLevel < 0 {
		ix.entry, ix.maxLevel = s, lvl
		return
	}
	q := ix.qv(s)
	ep := cand{d: ix.dist8(q, entry), id: entry}
	for lc := maxLevel; lc > lvl; lc-- {
		ep = ix.greedy(q, ep, lc, locked)
	}
	eps := []cand{ep}
	vis := ix.getVisited()
	defer ix.visitedPool.Put(vis)
	for lc := min(lvl, maxLevel); lc >= 0; lc-- {
		w := ix.searchLayer(q, eps, ix.p.EfConstruction, lc, nil, vis, locked)
		sel := ix.selectNeighbors(w, ix.p.M)
		ids := make([]uint32, len(sel))
		for i, c := range sel {
			ids[i] = c.id
		}
		ix.lockNode(s, locked)
		ix.setLinks(s, lc, ids)
		ix.unlockNode(s, locked)
		for _, c := range sel {
			ix.lockNode(c.id, locked)
			ix.link(c.id, s, c.d, lc)
			ix.unlockNode(c.id, locked)
		}
		eps = w
	}
	if locked {
		ix.epMu.Lock()
		defer ix.epMu.Unlock()
	}
	if lvl > ix.maxLevel {
		ix.entry, ix.maxLevel = s, lvl
	}
}

func (ix *Index) lockNode(id uint32, locked bool) {
	if locked {
		ix.stripes[id%uint32(len(ix.stripes))].Lock()
	}
}

func (ix *Index) unlockNode(id uint32, locked bool) {
	if locked {
		ix.stripes[id%uint32(len(ix.stripes))].Unlock()
	}
}

// neighbours returns the links of id on level lc; with locked, a copy
// taken under the node's stripe lock into buf.
func (ix *Index) neighbours(id uint32, lc int, locked bool, buf []uint32) []uint32 {
	if !locked {
		return ix.links(id, lc)
	}
	ix.lockNode(id, true)
	buf = append(buf[:0], ix.links(id, lc)...)
	ix.unlockNode(id, true)
	return buf
}

// link adds a link from a to b (at distance d) on level lc; when a's list is
// full, the neighbour-selection heuristic decides which links a keeps.
func (ix *Index) link(a, b uint32, d float32, lc int) {
	cur := ix.links(a, lc)
	capa := ix.capacity(lc)
	if len(cur) < capa {
		if lc == 0 {
			o := int(a) * (ix.m0 + 1)
			ix.links0[o+1+len(cur)] = b
			ix.links0[o]++
		} else {
			o := (lc - 1) * (ix.p.M + 1)
			u := ix.upper[a]
			u[o+1+len(cur)] = b
			u[o]++
		}
		return
	}
	va := ix.qv(a)
	cs := make([]cand, 0, len(cur)+1)
	for _, n := range cur {
		cs = append(cs, cand{d: ix.dist8(va, n), id: n})
	}
	cs = append(cs, cand{d: d, id: b})
	sortCands(cs)
	sel := ix.selectNeighbors(cs, capa)
	ids := make([]uint32, len(sel))
	for i, c := range sel {
		ids[i] = c.id
	}
	ix.setLinks(a, lc, ids)
}

// selectNeighbors is the heuristic of Algorithm 4: going from the closest
// candidate outwards, keep a candidate only if it is closer to the base
// than to every candidate already kept, so links spread in all directions
// instead of bunching in one cluster. cs must be sorted by distance.
func (ix *Index) selectNeighbors(cs []cand, m int) []cand {
	if len(cs) <= m {
		return cs
	}
	out := make([]cand, 0, m)
	for _, c := range cs {
		vc := ix.qv(c.id)
		keep := true
		for _, r := range out {
			if ix.dist8(vc, r.id) < c.d {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, c)
			if len(out) == m {
				break
			}
		}
	}
	return out
}

// greedy walks level lc from ep to the closest node it can reach.
func (ix *Index) greedy(q qvec, ep cand, lc int, locked bool) cand {
	var buf []uint32
	if locked {
		buf = make([]uint32, 0, ix.m0)
	}
	for changed := true; changed; {
		changed = false
		for _, n := range ix.neighbours(ep.id, lc, locked, buf) {
			if d := ix.dist8(q, n); d < ep.d {
				ep = cand{d: d, id: n}
				changed = true
			}
		}
	}
	return ep
}

// searchLayer is Algorithm 2: a best-first search of level lc from eps
// keeping the ef closest nodes. When allow is set, only allowed nodes enter
// the result, but every node is walked through, so the search can cross
// regions the filter excludes. The result is sorted by distance.
func (ix *Index) searchLayer(q qvec, eps []cand, ef, lc int, allow func(uint32) bool, vis *visited, locked bool) []cand {
	vis.reset(len(ix.level))
	var buf []uint32
	if locked {
		buf = make([]uint32, 0, ix.m0)
	}
	c := make(minHeap, 0, ef*2)
	w := make(maxHeap, 0, ef+1)
	for _, e := range eps {
		if !vis.visit(e.id) {
			continue
		}
		c.push(e)
		if allow == nil || allow(e.id) {
			w.keep(e, ef)
		}
	}
	for len(c) > 0 {
		cur := c.pop()
		if len(w) >= ef && cur.d > w.top().d {
			break
		}
		for _, n := range ix.neighbours(cur.id, lc, locked, buf) {
			if !vis.visit(n) {
				continue
			}
			d := ix.dist8(q, n)
			if len(w) < ef || d < w.top().d {
				c.push(cand{d: d, id: n})
				if allow == nil || allow(n) {
					w.keep(cand{d: d, id: n}, ef)
				}
			}
		}
	}
	out := w.cands()
	sortCands(out)
	return out
}

func sortCands(cs []cand) {
	slices.SortFunc(cs, func(a, b cand) int {
		switch {
		case a.d < b.d:
			return -1
		case a.d > b.d:
			return 1
		}
		return int(a.id) - int(b.id)
	})
}

func (ix *Index) getVisited() *visited {
	if v, ok := ix.visitedPool.Get().(*visited); ok {
		return v
	}
	return &visited{}
}

// removeSlots deletes nodes for good. Every node that linked to one of them
// gets new links chosen by the heuristic from its surviving neighbours and
// the deleted nodes' surviving neighbours; the entry point moves if it was
// deleted; the slots are cleared and reused by later inserts. Caller holds
// mu.
func (ix *Index) removeSlots(dead []uint32) {
	if len(dead) == 0 {
		return
	}
	isDead := make(map[uint32]bool, len(dead))
	for _, s := range dead {
		if ix.level[s] >= 0 {
			isDead[s] = true
		}
	}
	if len(isDead) == 0 {
		return
	}
	for s := range isDead {
		delete(ix.byKey, ix.keys[s])
		d := ix.docOf[s]
		lst := ix.byDoc[d]
		if i := slices.Index(lst, s); i >= 0 {
			lst[i] = lst[len(lst)-1]
			lst = lst[:len(lst)-1]
		}
		if len(lst) == 0 {
			delete(ix.byDoc, d)
		} else {
			ix.byDoc[d] = lst
		}
		ix.live--
	}
	// Repair links that point at deleted nodes.
	for id := range uint32(len(ix.level)) {
		lvl := int(ix.level[id])
		if lvl < 0 || isDead[id] {
			continue
		}
		for lc := 0; lc <= lvl; lc++ {
			cur := ix.links(id, lc)
			hit := false
			for _, n := range cur {
				if isDead[n] {
					hit = true
					break
				}
			}
			if !hit {
				continue
			}
			ix.repair(id, lc, cur, isDead)
		}
	}
	// Move the entry point if it died: the highest surviving node.
	if isDead[ix.entry] {
		ix.maxLevel = -1
		for id := range uint32(len(ix.level)) {
			if l := int(ix.level[id]); l > ix.maxLevel && !isDead[id] {
				ix.entry, ix.maxLevel = id, l
			}
		}
	}
	for s := range isDead {
		ix.level[s] = -1
		clear(ix.vec(s))
		clear(ix.code(s))
		ix.scales[s] = 0
		o := int(s) * (ix.m0 + 1)
		clear(ix.links0[o : o+ix.m0+1])
		ix.upper[s] = nil
		ix.keys[s] = ""
		ix.free = append(ix.free, s)
	}
	// Free slots are handed out last-in first-out; keep that deterministic.
	slices.SortFunc(ix.free, func(a, b uint32) int { return int(b) - int(a) })
}

// repair rebuilds the links of id on level lc after some of cur died.
func (ix *Index) repair(id uint32, lc int, cur []uint32, isDead map[uint32]bool) {
	seen := map[uint32]bool{id: true}
	var pool []uint32
	add := func(n uint32) {
		if !seen[n] && !isDead[n] {
			seen[n] = true
			pool = append(pool, n)
		}
	}
	for _, n := range cur {
		if !isDead[n] {
			add(n)
		}
	}
	for _, n := range cur {
		if isDead[n] {
			for _, nn := range ix.links(n, lc) {
				add(nn)
			}
		}
	}
	v := ix.qv(id)
	cs := make([]cand, len(pool))
	for i, n := range pool {
		cs[i] = cand{d: ix.dist8(v, n), id: n}
	}
	sortCands(cs)
	sel := ix.selectNeighbors(cs, ix.capacity(lc))
	ids := make([]uint32, len(sel))
	for i, c := range sel {
		ids[i] = c.id
	}
	ix.setLinks(id, lc, ids)
}

// interner maps strings to small integers.
type interner struct {
	ids   map[string]uint32
	names []string
}

func newInterner() interner { return interner{ids: map[string]uint32{}} }

func (in *interner) intern(s string) uint32 {
	if id, ok := in.ids[s]; ok {
		return id
	}
	id := uint32(len(in.names))
	in.ids[s] = id
	in.names = append(in.names, s)
	return id
}

func (in *interner) lookup(s string) (uint32, bool) {
	id, ok := in.ids[s]
	return id, ok
}
