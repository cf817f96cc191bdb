package bm25

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/search"
	bleveindex "github.com/blevesearch/bleve_index_api"
)

// This file scores BM25 over bleve's inverted index with the MaxScore
// algorithm (Turtle & Flood, 1995) instead of bleve's disjunction
// searcher, which visits every posting of every query term: for a query
// mixing rare and common terms that is most of the work, spent on
// documents that can never reach the top k.
//
// Each term has an upper bound on what it can add to a document's score,
// ub = qtf·idf·(k1+1). Terms are ordered by ub; once the k-th best score θ
// exceeds the sum of the smallest bounds, those terms become
// "non-essential": a document containing only them cannot enter the top
// k, so only the essential terms' postings are walked, and the
// non-essential readers just Advance to the documents found. The result
// is exactly the top k of an exhaustive evaluation (see exhaustive, which
// the tests compare against).
//
// The score is Okapi BM25 with bleve's k1 and b: for each query term,
// idf·tf·(k1+1)/(tf + k1·(1−b+b·dl/avgdl)), idf = ln(1 + (N−df+0.5)/(df+0.5)),
// summed over the terms (a term repeated in the query counts that often),
// times the coordination factor bleve's disjunctions apply (distinct query
// terms matched / distinct query terms), which favours chunks matching
// more of a short query. The factor also tightens the bounds: a document
// matching only j of the T query terms scores at most (Σ their ub)·j/T.

// qterm is one distinct query term and its postings reader.
type qterm struct {
	term []byte
	df   uint64
	tfr  bleveindex.TermFieldReader
	cur  *bleveindex.TermFieldDoc // current posting (valid unless num == exhausted)
	num  uint64                   // current document number, or exhausted
	idf  float64
	qtf  float64
	ub   float64
}

// scorer holds the corpus statistics of one search.
type scorer struct {
	avgdl float64
	terms int // distinct terms of the query, matched in the index or not
}

// final applies the coordination factor.
func (s scorer) final(raw float64, matched int) float64 {
	return raw * float64(matched) / float64(s.terms)
}

func (s scorer) contribution(t *qterm, d *bleveindex.TermFieldDoc) float64 {
	tf := float64(d.Freq)
	dl := 1.0
	if d.Norm > 0 {
		dl = 1 / (d.Norm * d.Norm)
	}
	k1, b := search.BM25_k1, search.BM25_b
	return t.qtf * t.idf * tf * (k1 + 1) / (tf + k1*(1-b+b*dl/s.avgdl))
}

// scored is a candidate document: its scorch document number (the
// big-endian uint64 of its internal id) and score.
type scored struct {
	num   uint64
	score float64
}

// less orders worse first: lower score, then higher number (so ties
// resolve to the lower number, deterministically).
func less(a, b scored) bool {
	if a.score != b.score {
		return a.score < b.score
	}
	return a.num > b.num
}

// topK is a bounded min-heap of the best documents so far.
type topK struct {
	k  int
	hs []scored
}

func (h *topK) full() bool { return len(h.hs) == h.k }

// threshold is the score a document must beat to enter: the k-th best,
// or -Inf while the heap is not full.
func (h *topK) threshold() float64 {
	if !h.full() {
		return math.Inf(-1)
	}
	return h.hs[0].score
}

func (h *topK) offer(c scored) {
	if h.full() && !less(h.hs[0], c) {
		return
	}
	if h.full() {
		h.hs[0] = c
		h.down(0)
		return
	}
	h.hs = append(h.hs, c)
	for i := len(h.hs) - 1; i > 0; {
		p := (i - 1) / 2
		if !less(h.hs[i], h.hs[p]) {
			break
		}
		h.hs[i], h.hs[p] = h.hs[p], h.hs[i]
		i = p
	}
}

func (h *topK) down(i int) {
	n := len(h.hs)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && less(h.hs[r], h.hs[l]) {
			m = r
		}
		if !less(h.hs[m], h.hs[i]) {
			return
		}
		h.hs[i], h.hs[m] = h.hs[m], h.hs[i]
		i = m
	}
}

// best returns the documents best first.
func (h *topK) best() []scored {
	out := slices.Clone(h.hs)
	sort.Slice(out, func(i, j int) bool { return less(out[j], out[i]) })
	return out
}

// exhausted marks a reader past its last posting.
const exhausted = math.MaxUint64

// docNum reads scorch's internal id (8 bytes, big-endian).
func docNum(id bleveindex.IndexInternalID) (uint64, bool) {
	if len(id) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(id), true
}

func internalID(n uint64) bleveindex.IndexInternalID {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return b[:]
}

// errIDFormat means the index's internal ids are not scorch's; the search
// falls back to the exhaustive evaluation.
var errIDFormat = errors.New("bm25: unexpected internal id format")

// next moves a term's reader to its next posting.
func (t *qterm) next() error {
	d, err := t.tfr.Next(t.cur)
	return t.set(d, err)
}

// advance moves a term's reader to the first posting at or after n.
func (t *qterm) advance(n uint64) error {
	d, err := t.tfr.Advance(internalID(n), t.cur)
	return t.set(d, err)
}

// at moves a term's reader to document d if it is behind d, and reports
// whether the term occurs in d.
func (t *qterm) at(d uint64) (bool, error) {
	if t.num < d {
		if err := t.advance(d); err != nil {
			return false, err
		}
	}
	return t.num == d, nil
}

func (t *qterm) set(d *bleveindex.TermFieldDoc, err error) error {
	if err != nil {
		return err
	}
	if d == nil {
		t.num = exhausted
		return nil
	}
	t.cur = d
	n, ok := docNum(d.ID)
	if !ok {
		return errIDFormat
	}
	t.num = n
	return nil
}

// openTerms analyses text and opens a postings reader per distinct term.
// The caller closes them.
func (ix *Index) openTerms(ctx context.Context, r bleveindex.IndexReader, text string) ([]*qterm, scorer, error) {
	n, err := r.DocCount()
	if err != nil || n == 0 {
		return nil, scorer{}, err
	}
	// The average length comes from the token counts Add records (bleve's
	// own "field cardinality" counts distinct terms, not tokens).
	sc := scorer{avgdl: math.Max(float64(ix.totalTokens())/float64(n), 1)}
	an := ix.idx.Mapping().AnalyzerNamed(en.AnalyzerName)
	if an == nil {
		return nil, scorer{}, fmt.Errorf("bm25: analyzer %s missing", en.AnalyzerName)
	}
	qtf := map[string]float64{}
	var order []string
	for _, tok := range an.Analyze([]byte(text)) {
		t := string(tok.Term)
		if qtf[t] == 0 {
			order = append(order, t)
		}
		qtf[t]++
	}
	sc.terms = len(order)
	var terms []*qterm
	for _, t := range order {
		tfr, err := r.TermFieldReader(ctx, []byte(t), fieldText, true, true, false)
		if err != nil {
			closeTerms(terms)
			return nil, scorer{}, err
		}
		df := tfr.Count()
		if df == 0 {
			tfr.Close()
			continue
		}
		idf := math.Log(1 + (float64(n)-float64(df)+0.5)/(float64(df)+0.5))
		terms = append(terms, &qterm{term: []byte(t), df: df, tfr: tfr, idf: idf, qtf: qtf[t], ub: qtf[t] * idf * (search.BM25_k1 + 1)})
	}
	return terms, sc, nil
}

func closeTerms(ts []*qterm) {
	for _, t := range ts {
		t.tfr.Close()
	}
}

// seedBudget caps the postings read to seed the threshold.
const seedBudget = 4096

// maxScore returns the exact top k documents for the terms (see the file
// comment), skipping documents allow rejects (allow nil: none).
//
// Before the document-at-a-time pass, the threshold is seeded: the
// documents of the rarest terms (up to seedBudget postings) are scored
// exactly with fresh readers, which puts good documents in the heap at
// once, so common terms become non-essential from the first step instead
// of after a long walk in document order.
func maxScore(ctx context.Context, r bleveindex.IndexReader, terms []*qterm, sc scorer, k int, allow func(bleveindex.IndexInternalID) bool) ([]scored, error) {
	h := &topK{k: k}
	seeded, err := seed(ctx, r, terms, sc, h, allow)
	if err != nil {
		return nil, err
	}
	// Ascending bounds; cum[i] = Σ ub[0..i].
	slices.SortFunc(terms, func(a, b *qterm) int {
		switch {
		case a.ub < b.ub:
			return -1
		case a.ub > b.ub:
			return 1
		}
		return 0
	})
	cum := make([]float64, len(terms))
	for i, t := range terms {
		cum[i] = t.ub
		if i > 0 {
			cum[i] += cum[i-1]
		}
		if err := t.next(); err != nil {
			return nil, err
		}
	}
	p := 0 // terms[:p] are non-essential
	for steps := 0; ; steps++ {
		if steps&1023 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// Bounds are compared with a hair of slack, so float rounding in
		// the sums never prunes a document that ties θ exactly.
		θ := h.threshold() - 1e-9*math.Abs(h.threshold())
		// A document containing only terms[:p+1] scores at most
		// cum[p]·(p+1)/T; while that cannot beat θ, term p is non-essential.
		for p < len(terms) && sc.final(cum[p], p+1) < θ {
			p++
		}
		if p == len(terms) {
			break // no document can beat the top k any more
		}
		// The next document: the smallest current number among essential terms.
		d := uint64(exhausted)
		for _, t := range terms[p:] {
			d = min(d, t.num)
		}
		if d == exhausted {
			break
		}
		score, matched := 0.0, 0
		for _, t := range terms[p:] {
			if t.num == d {
				score += sc.contribution(t, t.cur)
				matched++
				if err := t.next(); err != nil {
					return nil, err
				}
			}
		}
		if seeded[d] || (allow != nil && !allow(internalID(d))) {
			continue
		}
		// Non-essential terms, largest bound first, while they can still
		// lift the document past θ (all of terms[:i+1] matching at most).
		for i := p - 1; i >= 0; i-- {
			if sc.final(score+cum[i], matched+i+1) < θ {
				break
			}
			t := terms[i]
			ok, err := t.at(d)
			if err != nil {
				return nil, err
			}
			if ok {
				score += sc.contribution(t, t.cur)
				matched++
			}
		}
		h.offer(scored{num: d, score: sc.final(score, matched)})
	}
	return h.best(), nil
}

// seed scores the documents of the rarest terms exactly, offers them to
// h, and returns their numbers.
func seed(ctx context.Context, r bleveindex.IndexReader, terms []*qterm, sc scorer, h *topK, allow func(bleveindex.IndexInternalID) bool) (map[uint64]bool, error) {
	byDF := slices.Clone(terms)
	slices.SortFunc(byDF, func(a, b *qterm) int { return int(min(a.df, 1<<62)) - int(min(b.df, 1<<62)) })
	var budget uint64
	n := 0
	for n < len(byDF) && (n == 0 || budget+byDF[n].df <= seedBudget) {
		budget += byDF[n].df
		n++
	}
	if budget > seedBudget {
		return nil, nil // even the rarest term is common: seeding would cost what it saves
	}
	// Fresh readers: the pass below walks the main ones from the start.
	open := func(t *qterm) (*qterm, error) {
		tfr, err := r.TermFieldReader(ctx, t.term, fieldText, true, true, false)
		if err != nil {
			return nil, err
		}
		c := *t
		c.tfr, c.cur, c.num = tfr, nil, 0
		return &c, nil
	}
	var fresh []*qterm
	defer func() { closeTerms(fresh) }()
	cands := map[uint64]bool{}
	for _, t := range byDF[:n] {
		f, err := open(t)
		if err != nil {
			return nil, err
		}
		fresh = append(fresh, f)
		for err = f.next(); err == nil && f.num != exhausted; err = f.next() {
			cands[f.num] = true
		}
		if err != nil {
			return nil, err
		}
	}
	nums := make([]uint64, 0, len(cands))
	for d := range cands {
		nums = append(nums, d)
	}
	slices.Sort(nums)
	var scorers []*qterm
	for _, t := range terms {
		f, err := open(t)
		if err != nil {
			return nil, err
		}
		fresh = append(fresh, f)
		if err := f.next(); err != nil {
			return nil, err
		}
		scorers = append(scorers, f)
	}
	for _, d := range nums {
		if allow != nil && !allow(internalID(d)) {
			continue
		}
		score, matched := 0.0, 0
		for _, t := range scorers {
			ok, err := t.at(d)
			if err != nil {
				return nil, err
			}
			if ok {
				score += sc.contribution(t, t.cur)
				matched++
			}
		}
		h.offer(scored{num: d, score: sc.final(score, matched)})
	}
	return cands, nil
}

// exhaustive scores every posting of every term: the reference maxScore
// must agree with.
func exhaustive(terms []*qterm, sc scorer, k int, allow func(bleveindex.IndexInternalID) bool) ([]scored, error) {
	scores := map[uint64]float64{}
	matched := map[uint64]int{}
	for _, t := range terms {
		for d, err := t.tfr.Next(nil); d != nil || err != nil; d, err = t.tfr.Next(nil) {
			if err != nil {
				return nil, err
			}
			n, ok := docNum(d.ID)
			if !ok {
				return nil, errIDFormat
			}
			if allow == nil || allow(d.ID) {
				scores[n] += sc.contribution(t, d)
				matched[n]++
			}
		}
	}
	h := &topK{k: k}
	for n, s := range scores {
		h.offer(scored{num: n, score: sc.final(s, matched[n])})
	}
	return h.best(), nil
}

// allowed returns a predicate accepting the documents that pass f, from
// the postings of the filter fields (nil when f does not filter).
func allowed(ctx context.Context, r bleveindex.IndexReader, f *Filter) (func(bleveindex.IndexInternalID) bool, error) {
	if f == nil {
		return nil, nil
	}
	var sets []map[string]bool
	anyOf := func(field string, values []string) error {
		if len(values) == 0 {
			return nil
		}
		set := map[string]bool{}
		for _, v := range values {
			tfr, err := r.TermFieldReader(ctx, []byte(v), field, false, false, false)
			if err != nil {
				return err
			}
			for d, err := tfr.Next(nil); d != nil || err != nil; d, err = tfr.Next(nil) {
				if err != nil {
					tfr.Close()
					return err
				}
				set[string(d.ID)] = true
			}
			tfr.Close()
		}
		sets = append(sets, set)
		return nil
	}
	src := make([]string, len(f.SourceTypes))
	for i, s := range f.SourceTypes {
		src[i] = strconv.Itoa(int(s))
	}
	for _, fv := range []struct {
		field  string
		values []string
	}{{fieldDoc, f.Docs}, {fieldSourceType, src}, {fieldContentType, f.ContentTypes}} {
		if err := anyOf(fv.field, fv.values); err != nil {
			return nil, err
		}
	}
	if len(sets) == 0 {
		return nil, nil
	}
	return func(id bleveindex.IndexInternalID) bool {
		for _, s := range sets {
			if !s[string(id)] {
				return false
			}
		}
		return true
	}, nil
}

// search runs the MaxScore evaluation (or the exhaustive one) in a
// snapshot of the index and returns the hits with their external ids.
func (ix *Index) search(ctx context.Context, text string, k int, f *Filter, exact bool) ([]Hit, error) {
	adv, err := ix.idx.Advanced()
	if err != nil {
		return nil, fmt.Errorf("bm25: search: %w", err)
	}
	r, err := adv.Reader()
	if err != nil {
		return nil, fmt.Errorf("bm25: search: %w", err)
	}
	defer r.Close()
	allow, err := allowed(ctx, r, f)
	if err != nil {
		return nil, fmt.Errorf("bm25: filter: %w", err)
	}
	terms, sc, err := ix.openTerms(ctx, r, text)
	if err != nil {
		return nil, fmt.Errorf("bm25: search: %w", err)
	}
	defer closeTerms(terms)
	if len(terms) == 0 {
		return nil, nil
	}
	var best []scored
	if exact {
		best, err = exhaustive(terms, sc, k, allow)
	} else {
		best, err = maxScore(ctx, r, terms, sc, k, allow)
	}
	if err != nil {
		return nil, fmt.Errorf("bm25: search: %w", err)
	}
	out := make([]Hit, 0, len(best))
	for _, b := range best {
		id, err := r.ExternalID(internalID(b.num))
		if err != nil {
			return nil, fmt.Errorf("bm25: search: %w", err)
		}
		out = append(out, Hit{Key: id, Score: b.score})
	}
	return out, nil
}
