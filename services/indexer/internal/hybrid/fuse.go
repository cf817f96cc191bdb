// Package hybrid is the indexer's retrieval: per scope, a BM25 index and an
// HNSW vector index of the same chunks, searched together and fused with
// reciprocal rank fusion. A [Manager] keeps one [Shard] per scope on disk,
// so a scope's searches never touch another scope's data, and rebuilds a
// shard from the document store when asked. A shard also keeps, in memory,
// a token per document that a follower of the document store records with
// what it wrote ([Tx.SetApplied]), so that it can skip a change it holds.
package hybrid

import (
	"slices"

	"github.com/agentmesh/agentmesh/services/indexer/internal/bm25"
	"github.com/agentmesh/agentmesh/services/indexer/internal/vector"
)

// RRFK is the k of reciprocal rank fusion: score = Σ 1/(RRFK + rank). 60 is
// the value of Cormack et al. (2009); it keeps one retriever's top rank
// from drowning agreement between both.
const RRFK = 60

// Hit is one fused result.
type Hit struct {
	// Key is the chunk id.
	Key string
	// Score is the fused score (hybrid), the BM25 score (keyword) or the
	// cosine similarity (vector).
	Score float64
	// KeywordScore is the BM25 score; 0 if BM25 did not return the chunk.
	KeywordScore float64
	// VectorScore is the cosine similarity; 0 if the vector search did not
	// return the chunk.
	VectorScore float64
}

// Fuse merges two ranked lists by reciprocal rank fusion and returns the
// best k: score = Σ w/(RRFK + rank), with weight 1 for BM25 and
// vectorWeight for the vector list (1 is plain RRF; a weak embedder, such
// as the built-in one, may deserve less). Ties break by key, so equal
// inputs give equal outputs.
func Fuse(kw []bm25.Hit, vec []vector.Hit, k int, vectorWeight float64) []Hit {
	byKey := map[string]*Hit{}
	var order []*Hit
	get := func(key string) *Hit {
		h, ok := byKey[key]
		if !ok {
			h = &Hit{Key: key}
			byKey[key] = h
			order = append(order, h)
		}
		return h
	}
	for i, h := range kw {
		f := get(h.Key)
		f.KeywordScore = h.Score
		f.Score += 1 / float64(RRFK+i+1)
	}
	for i, h := range vec {
		f := get(h.Key)
		f.VectorScore = float64(h.Score)
		f.Score += vectorWeight / float64(RRFK+i+1)
	}
	out := make([]Hit, len(order))
	for i, h := range order {
		out[i] = *h
	}
	slices.SortStableFunc(out, func(a, b Hit) int {
		switch {
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	if len(out) > k {
		out = out[:k]
	}
	return out
}
