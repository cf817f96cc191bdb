package hybrid

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/agentmesh/agentmesh/services/indexer/internal/bm25"
	"github.com/agentmesh/agentmesh/services/indexer/internal/vector"
)

// Mode chooses the retrievers of a search.
type Mode int

// Search modes.
const (
	// ModeHybrid runs both retrievers and fuses their rankings.
	ModeHybrid Mode = iota
	// ModeKeyword runs BM25 only.
	ModeKeyword
	// ModeVector runs the vector search only.
	ModeVector
)

// Chunk is one chunk to index.
type Chunk struct {
	// Key is the chunk id.
	Key string
	// Doc is the document id.
	Doc string
	// Title is the document title.
	Title string
	// Text is the chunk text.
	Text string
	// SourceType is the document's source type.
	SourceType int32
	// ContentType is the document's content type.
	ContentType string
	// Vector is the chunk's embedding.
	Vector []float32
}

// Filter restricts a search; empty fields do not restrict.
type Filter struct {
	// Docs keeps chunks of these documents.
	Docs []string
	// SourceTypes keeps chunks with these source types.
	SourceTypes []int32
	// ContentTypes keeps chunks with these content types.
	ContentTypes []string
}

// manifest records what a shard directory was built with; a shard whose
// manifest differs from the running configuration is rebuilt.
type manifest struct {
	Format     int    `json:"format"`
	Embedder   string `json:"embedder"`
	Dimensions int    `json:"dimensions"`
}

// manifestFormat changes when the on-disk layout does (2: BM25 records
// token counts for the average document length).
const manifestFormat = 2

// errClosed means a shard was closed (replaced by a rebuild) under a caller.
var errClosed = errors.New("hybrid: shard closed")

// Shard is one scope's pair of indexes. Writes are serialised (writeMu) and
// every write goes to both indexes; searches run concurrently with writes.
type Shard struct {
	dir          string
	bm           *bm25.Index
	vec          *vector.Store
	vectorWeight float64 // RRF weight of the vector list

	writeMu sync.Mutex   // serialises writes; a rebuild holds it throughout
	life    sync.RWMutex // searches and writes hold it shared; Close exclusively
	closed  bool         // guarded by life

	// applied holds, per document, the token a follower of the document
	// store recorded with what it wrote (Tx.SetApplied). Guarded by
	// writeMu. In memory only: a shard opened or rebuilt starts without.
	applied map[string]string
}

// openShard opens the shard in dir for the given embedder. A directory
// built for another embedder or format is wiped first; stale reports that,
// so the caller rebuilds it from the document store.
func openShard(dir string, m manifest, vopts vector.StoreOptions, vectorWeight float64, log *slog.Logger) (sh *Shard, stale bool, err error) {
	mpath := filepath.Join(dir, "manifest.json")
	if data, err := os.ReadFile(mpath); err == nil {
		var got manifest
		if json.Unmarshal(data, &got) != nil || got != m {
			log.Warn("index directory was built with another embedder or format; wiping it for a rebuild",
				"dir", dir, "found", string(data))
			if err := os.RemoveAll(dir); err != nil {
				return nil, false, fmt.Errorf("hybrid: wipe %s: %w", dir, err)
			}
			stale = true
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("hybrid: read manifest: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, false, fmt.Errorf("hybrid: create %s: %w", dir, err)
	}
	data, _ := json.Marshal(m)
	if err := os.WriteFile(mpath, data, 0o640); err != nil {
		return nil, false, fmt.Errorf("hybrid: write manifest: %w", err)
	}
	bm, err := bm25.Open(filepath.Join(dir, "bm25"))
	if err != nil {
		return nil, false, err
	}
	vec, err := vector.Open(filepath.Join(dir, "vectors"), m.Dimensions, vopts)
	if err != nil {
		bm.Close()
		return nil, false, err
	}
	return &Shard{dir: dir, bm: bm, vec: vec, vectorWeight: vectorWeight, applied: map[string]string{}}, stale, nil
}

// Tx writes to a shard. It is valid only inside the function given to
// [Manager.Write] (or to a rebuild's fill), which holds the shard's write
// lock, so a sequence of writes (delete a document's chunks, add new ones)
// is never interleaved with another writer's or with a rebuild. Its
// methods take no lock of their own: Write holds the shard open (its read
// lock) around the whole function, and a rebuild's new shard is its own.
// Taking the read lock again inside would deadlock with a close waiting
// for it: a sync.RWMutex lets no new reader in once a writer waits.
type Tx struct{ s *Shard }

// Add indexes chunks in both indexes, replacing chunks with the same keys.
// The two indexes are written in parallel.
func (t Tx) Add(chunks []Chunk) error {
	s := t.s
	if len(chunks) == 0 {
		return nil
	}
	docs := make([]bm25.Doc, len(chunks))
	items := make([]vector.Item, len(chunks))
	for i, c := range chunks {
		docs[i] = bm25.Doc{Key: c.Key, Doc: c.Doc, Title: c.Title, Text: c.Text, SourceType: c.SourceType, ContentType: c.ContentType}
		items[i] = vector.Item{Key: c.Key, Vector: c.Vector, Attrs: vector.Attrs{Doc: c.Doc, SourceType: c.SourceType, ContentType: c.ContentType}}
	}
	var g errgroup.Group
	g.Go(func() error { return s.bm.Add(docs) })
	g.Go(func() error { return s.vec.Add(items...) })
	return g.Wait()
}

// Delete removes chunks by key from both indexes.
func (t Tx) Delete(keys []string) error {
	s := t.s
	if err := s.bm.Delete(keys); err != nil {
		return err
	}
	_, err := s.vec.Delete(keys...)
	return err
}

// DeleteDocument removes every chunk of doc from both indexes.
func (t Tx) DeleteDocument(ctx context.Context, doc string) error {
	s := t.s
	if _, err := s.bm.DeleteDocument(ctx, doc); err != nil {
		return err
	}
	_, err := s.vec.DeleteDocument(doc)
	return err
}

// ReplaceDocument makes chunks all of doc's chunks: it removes doc's
// other chunks from both indexes and adds (or replaces) these, and returns
// how many it removed. With no chunks it removes the document, and writes
// nothing if neither index holds any of it.
func (t Tx) ReplaceDocument(ctx context.Context, doc string, chunks []Chunk) (removed int, err error) {
	keyword, vectors, err := t.s.docKeys(ctx, doc)
	if err != nil {
		return 0, err
	}
	keep := make(map[string]bool, len(chunks))
	for _, c := range chunks {
		keep[c.Key] = true
	}
	var stale []string
	for _, k := range append(keyword, vectors...) {
		if !keep[k] {
			keep[k] = true // once
			stale = append(stale, k)
		}
	}
	if len(stale) > 0 {
		if err := t.Delete(stale); err != nil {
			return 0, err
		}
	}
	return len(stale), t.Add(chunks)
}

// Applied returns the token recorded for doc with SetApplied, and whether
// there is one.
func (t Tx) Applied(doc string) (token string, ok bool) {
	token, ok = t.s.applied[doc]
	return token, ok
}

// maxApplied bounds the tokens a shard keeps (a few hundred bytes each):
// past it, an arbitrary one is dropped for each new one, which costs its
// document one write more when it next changes.
const maxApplied = 100_000

// SetApplied records token for doc: a follower of the document store
// names with it the state of the document it wrote, so that it can tell
// a change it has already applied from one it has not. Tokens live as
// long as the open shard: a shard reopened or rebuilt has none, and its
// follower then writes each document again once.
func (t Tx) SetApplied(doc, token string) {
	if _, ok := t.s.applied[doc]; !ok && len(t.s.applied) >= maxApplied {
		for other := range t.s.applied { // map order: an arbitrary one
			delete(t.s.applied, other)
			break
		}
	}
	t.s.applied[doc] = token
}

// ForgetApplied drops doc's token.
func (t Tx) ForgetApplied(doc string) { delete(t.s.applied, doc) }

// DocKeys returns the chunk keys of doc in each index.
func (s *Shard) DocKeys(ctx context.Context, doc string) (keyword, vectors []string, err error) {
	err = s.read(func() error {
		keyword, vectors, err = s.docKeys(ctx, doc)
		return err
	})
	return keyword, vectors, err
}

// docKeys is DocKeys for a caller that holds the shard open.
func (s *Shard) docKeys(ctx context.Context, doc string) (keyword, vectors []string, err error) {
	keyword, err = s.bm.DocKeys(ctx, doc)
	return keyword, s.vec.DocKeys(doc), err
}

// Counts returns the number of chunks in each index.
func (s *Shard) Counts() (keyword, vectors int, err error) {
	err = s.read(func() error {
		n, err := s.bm.Count()
		keyword, vectors = int(n), s.vec.Len()
		return err
	})
	return keyword, vectors, err
}

// Vectors returns the shard's vector index, for measurements (recall
// against exact search); writes must go through a Tx.
func (s *Shard) Vectors() *vector.Index { return s.vec.Index }

// MemoryBytes estimates the vector index's heap.
func (s *Shard) MemoryBytes() int64 { return s.vec.MemoryBytes() }

// Search runs the retrievers of mode and returns the best k chunks. q is
// the query text (keyword), qv its embedding (vector); each retriever
// contributes candidates candidates to the fusion.
func (s *Shard) Search(ctx context.Context, q string, qv []float32, k int, mode Mode, f *Filter) ([]Hit, error) {
	var out []Hit
	err := s.read(func() error {
		candidates := min(max(50, 3*k), 300)
		var (
			kw  []bm25.Hit
			vec []vector.Hit
			g   errgroup.Group
		)
		if mode != ModeVector {
			g.Go(func() (err error) {
				var bf *bm25.Filter
				if f != nil {
					bf = &bm25.Filter{Docs: f.Docs, SourceTypes: f.SourceTypes, ContentTypes: f.ContentTypes}
				}
				kw, err = s.bm.Search(ctx, q, candidates, bf)
				return err
			})
		}
		if mode != ModeKeyword {
			g.Go(func() (err error) {
				var vf *vector.Filter
				if f != nil {
					vf = &vector.Filter{Docs: f.Docs, SourceTypes: f.SourceTypes, ContentTypes: f.ContentTypes}
				}
				vec, err = s.vec.Search(qv, candidates, vf)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		switch mode {
		case ModeKeyword:
			for _, h := range kw[:min(k, len(kw))] {
				out = append(out, Hit{Key: h.Key, Score: h.Score, KeywordScore: h.Score})
			}
		case ModeVector:
			for _, h := range vec[:min(k, len(vec))] {
				out = append(out, Hit{Key: h.Key, Score: float64(h.Score), VectorScore: float64(h.Score)})
			}
		default:
			out = Fuse(kw, vec, k, s.vectorWeight)
		}
		return nil
	})
	return out, err
}

// write runs fn holding the write lock and the shard open.
func (s *Shard) write(fn func() error) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	return s.read(fn)
}

// read runs fn while the shard is open.
func (s *Shard) read(fn func() error) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return errClosed
	}
	return fn()
}

// Compact merges the BM25 segments into one (see bm25.Index.Compact).
func (s *Shard) Compact(ctx context.Context) error {
	return s.read(func() error { return s.bm.Compact(ctx) })
}

// Segments returns the number of BM25 segments.
func (s *Shard) Segments() int { return s.bm.Segments() }

// Snapshot persists the vector index's snapshot and empties its log.
func (s *Shard) Snapshot() error {
	return s.write(s.vec.Snapshot)
}

// close closes both indexes; callers hold no lock.
func (s *Shard) close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return errors.Join(s.bm.Close(), s.vec.Close())
}
