package document

import "fmt"

// IndexState is what a document's record says the search indexes must
// hold of it: nothing when the record is gone or being deleted, the
// chunk set of its content once indexed. While new content is being
// ingested (found, not indexed, not deleting) it says nothing: the write
// that marks it indexed follows, or reconciliation redoes the ingest.
type IndexState struct {
	// Found is false when the record is gone.
	Found bool
	// Indexed and Deleting are the record's flags.
	Indexed, Deleting bool
	// Chunks is the current content's chunk set.
	Chunks ChunkSet
	// BaseJob is the extraction job whose digest the base chunk (seq 0)
	// carries; empty until an extraction of the current content
	// completes.
	BaseJob string
	// Version is the record's version when read.
	Version int64
}

// Absent is the state of a document the indexes must not hold.
var Absent = IndexState{}

// Present reports whether the indexes must hold the chunk set.
func (st IndexState) Present() bool { return st.Found && st.Indexed && !st.Deleting }

// Settled reports whether the state says what the indexes must hold:
// present, or gone (or going). An ingest under way is not settled.
func (st IndexState) Settled() bool { return st.Present() || !st.Found || st.Deleting }

// Token names what the indexes hold of the document in this state: two
// states with the same token need the same chunks, texts and vectors.
// Absent states share the empty token.
func (st IndexState) Token() string {
	if !st.Present() {
		return ""
	}
	return st.SetToken() + st.BaseJob
}

// SetToken is the part of Token that names the chunk set: a token with
// this prefix needs the same chunks, whatever its base chunk's digest.
func (st IndexState) SetToken() string {
	return fmt.Sprintf("%s/%d/", st.Chunks.Hash, st.Chunks.Count)
}
