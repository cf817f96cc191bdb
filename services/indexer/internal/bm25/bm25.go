// Package bm25 is the keyword half of hybrid search: a bleve full-text
// index of chunks (English analysis: stop words, possessives, stemming;
// keyword fields for document, source type and content type), scored with
// Okapi BM25 evaluated by MaxScore over bleve's postings (maxscore.go),
// which returns the exact top k while skipping most postings of common
// terms. The index lives in a directory (bleve's scorch format); a batch
// returns once it is persisted.
package bm25

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/keyword"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search/query"
	bleveindex "github.com/blevesearch/bleve_index_api"
)

// Field names in the index. The title is not a field of its own: every
// document's base chunk starts with its title, so title words are found
// there, and a second text field would double the postings every query
// walks.
const (
	fieldText        = "text"
	fieldDoc         = "doc"
	fieldSourceType  = "source_type"
	fieldContentType = "content_type"
	fieldLen         = "len"
)

// Doc is one chunk to index.
type Doc struct {
	// Key is the chunk id.
	Key string
	// Doc is the document id.
	Doc string
	// Title is the document title (not indexed; see the field names).
	Title string
	// Text is the chunk text.
	Text string
	// SourceType is the document's source type.
	SourceType int32
	// ContentType is the document's content type.
	ContentType string
}

// Filter restricts a search; empty fields do not restrict, fields combine
// with AND, values within a field with OR.
type Filter struct {
	// Docs keeps chunks of these documents.
	Docs []string
	// SourceTypes keeps chunks with these source types.
	SourceTypes []int32
	// ContentTypes keeps chunks with these content types.
	ContentTypes []string
}

// Hit is a matching chunk.
type Hit struct {
	// Key is the chunk id.
	Key string
	// Score is its BM25 score.
	Score float64
}

// keyTotal is the internal key holding the token count of all chunks,
// for BM25's average document length; each chunk's own count is a stored
// field (fieldLen), read back when the chunk is replaced or deleted.
const keyTotal = "bm25/total_tokens"

// Index is a BM25 index in a directory. It is safe for concurrent use;
// writes are serialised.
type Index struct {
	idx bleve.Index

	mu    sync.Mutex // serialises writes; guards total
	total int64      // tokens in all indexed chunks (persisted at keyTotal)
}

// Open opens the index in dir, creating it if dir does not hold one.
func Open(dir string) (*Index, error) {
	idx, err := bleve.Open(dir)
	if errors.Is(err, bleve.ErrorIndexPathDoesNotExist) || errors.Is(err, bleve.ErrorIndexMetaMissing) {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("bm25: create %s: %w", dir, err)
		}
		// bleve wants to create the directory itself.
		if err := os.Remove(dir); err != nil {
			return nil, fmt.Errorf("bm25: create %s: %w", dir, err)
		}
		idx, err = bleve.NewUsing(dir, newMapping(), scorch.Name, scorch.Name, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("bm25: open %s: %w", dir, err)
	}
	ix := &Index{idx: idx}
	if b, err := idx.GetInternal([]byte(keyTotal)); err == nil && len(b) > 0 {
		v, _ := binary.Varint(b)
		ix.total = v
	}
	return ix, nil
}

func (ix *Index) totalTokens() int64 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.total
}

// tokens counts the tokens the text field's analyzer produces, which is
// the field length bleve records in the postings' norms.
func (ix *Index) tokens(text string) int64 {
	an := ix.idx.Mapping().AnalyzerNamed(en.AnalyzerName)
	return int64(len(an.Analyze([]byte(text))))
}

// storedLen returns the token count stored with a chunk, or 0 if the
// chunk is not indexed.
func (ix *Index) storedLen(key string) int64 {
	doc, err := ix.idx.Document(key)
	if err != nil || doc == nil {
		return 0
	}
	var n int64
	doc.VisitFields(func(f bleveindex.Field) {
		if nf, ok := f.(bleveindex.NumericField); ok && f.Name() == fieldLen {
			if v, err := nf.Number(); err == nil {
				n = int64(v)
			}
		}
	})
	return n
}

func varint(v int64) []byte {
	b := make([]byte, binary.MaxVarintLen64)
	return b[:binary.PutVarint(b, v)]
}

// newMapping indexes the text with the English analyzer and the
// filter fields as single keywords; nothing is stored, since the document
// store holds the text.
func newMapping() mapping.IndexMapping {
	im := bleve.NewIndexMapping()
	im.ScoringModel = bleveindex.BM25Scoring
	im.DefaultAnalyzer = en.AnalyzerName
	im.IndexDynamic = false
	im.StoreDynamic = false
	im.DocValuesDynamic = false
	text := func() *mapping.FieldMapping {
		f := bleve.NewTextFieldMapping()
		f.Analyzer = en.AnalyzerName
		f.Store = false
		f.IncludeTermVectors = false
		f.IncludeInAll = false
		f.DocValues = false
		return f
	}
	kw := func() *mapping.FieldMapping {
		f := bleve.NewKeywordFieldMapping()
		f.Analyzer = keyword.Name
		f.Store = false
		f.IncludeTermVectors = false
		f.IncludeInAll = false
		f.DocValues = false
		return f
	}
	dm := bleve.NewDocumentStaticMapping()
	ln := bleve.NewNumericFieldMapping()
	ln.Index = false
	ln.Store = true
	ln.IncludeInAll = false
	ln.DocValues = false
	dm.AddFieldMappingsAt(fieldLen, ln)
	dm.AddFieldMappingsAt(fieldText, text())
	dm.AddFieldMappingsAt(fieldDoc, kw())
	dm.AddFieldMappingsAt(fieldSourceType, kw())
	dm.AddFieldMappingsAt(fieldContentType, kw())
	im.DefaultMapping = dm
	return im
}

// Add indexes docs in one batch, replacing chunks with the same keys.
func (ix *Index) Add(docs []Doc) error {
	if len(docs) == 0 {
		return nil
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	total := ix.total
	b := ix.idx.NewBatch()
	inBatch := map[string]int64{} // a key twice in one batch: the last wins
	for _, d := range docs {
		n := ix.tokens(d.Text)
		old, ok := inBatch[d.Key]
		if !ok {
			old = ix.storedLen(d.Key)
		}
		inBatch[d.Key] = n
		total += n - old
		if err := b.Index(d.Key, map[string]any{
			fieldLen:         float64(n),
			fieldText:        d.Text,
			fieldDoc:         d.Doc,
			fieldSourceType:  strconv.Itoa(int(d.SourceType)),
			fieldContentType: d.ContentType,
		}); err != nil {
			return fmt.Errorf("bm25: index %s: %w", d.Key, err)
		}
	}
	b.SetInternal([]byte(keyTotal), varint(total))
	if err := ix.idx.Batch(b); err != nil {
		return fmt.Errorf("bm25: batch: %w", err)
	}
	ix.total = total
	return nil
}

// Delete removes chunks by key; unknown keys are ignored.
func (ix *Index) Delete(keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	total := ix.total
	b := ix.idx.NewBatch()
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		total -= ix.storedLen(k)
		b.Delete(k)
	}
	b.SetInternal([]byte(keyTotal), varint(total))
	if err := ix.idx.Batch(b); err != nil {
		return fmt.Errorf("bm25: delete batch: %w", err)
	}
	ix.total = total
	return nil
}

// DocKeys returns the keys of every chunk of doc.
func (ix *Index) DocKeys(ctx context.Context, doc string) ([]string, error) {
	tq := query.NewTermQuery(doc)
	tq.SetField(fieldDoc)
	var keys []string
	const page = 1000
	for from := 0; ; from += page {
		req := bleve.NewSearchRequestOptions(tq, page, from, false)
		req.SortBy([]string{"_id"})
		res, err := ix.idx.SearchInContext(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("bm25: chunks of %s: %w", doc, err)
		}
		for _, h := range res.Hits {
			keys = append(keys, h.ID)
		}
		if len(res.Hits) < page {
			return keys, nil
		}
	}
}

// DeleteDocument removes every chunk of doc and returns their keys.
func (ix *Index) DeleteDocument(ctx context.Context, doc string) ([]string, error) {
	keys, err := ix.DocKeys(ctx, doc)
	if err != nil {
		return nil, err
	}
	return keys, ix.Delete(keys)
}

// Count returns the number of chunks indexed.
func (ix *Index) Count() (uint64, error) { return ix.idx.DocCount() }

// Search returns up to k chunks matching any of the query's terms, best
// BM25 score first (ties by internal order), among those passing f (nil:
// all). Scoring walks bleve's postings with MaxScore (maxscore.go), so
// common terms cost little once the top k is established.
func (ix *Index) Search(ctx context.Context, text string, k int, f *Filter) ([]Hit, error) {
	if k <= 0 {
		return nil, nil
	}
	return ix.search(ctx, text, k, f, false)
}

// Compact merges the index's segments into one, which makes searches
// faster after a bulk load (each query otherwise walks every segment's
// postings separately). It blocks until the merge is done.
func (ix *Index) Compact(ctx context.Context) error {
	adv, err := ix.idx.Advanced()
	if err != nil {
		return fmt.Errorf("bm25: compact: %w", err)
	}
	sc, ok := adv.(*scorch.Scorch)
	if !ok {
		return nil
	}
	if err := sc.ForceMerge(ctx, nil); err != nil {
		return fmt.Errorf("bm25: compact: %w", err)
	}
	return nil
}

// Segments returns the number of on-disk segments (for measurements).
func (ix *Index) Segments() int {
	adv, err := ix.idx.Advanced()
	if err != nil {
		return 0
	}
	if sc, ok := adv.(*scorch.Scorch); ok {
		if n, ok := sc.StatsMap()["TotFileSegmentsAtRoot"].(uint64); ok {
			return int(n)
		}
	}
	return 0
}

// Close closes the index.
func (ix *Index) Close() error { return ix.idx.Close() }
