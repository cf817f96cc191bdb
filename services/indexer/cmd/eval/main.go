// Command eval measures retrieval quality on the labelled corpus in
// testdata/eval (see cmd/evalcorpus): it indexes every document the way
// the indexer does — content type detection, base chunk, chunking with the
// default size and overlap, the built-in local-hash-384 embedder, a BM25
// and an HNSW index in a fresh shard — runs the 50 queries in keyword,
// vector and hybrid mode, and prints recall@10 and MRR over documents
// (chunks are mapped to their documents, first occurrence kept).
//
//	go run ./cmd/eval            (make eval)
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/chunk"
	"github.com/agentmesh/agentmesh/services/indexer/internal/contenttype"
	"github.com/agentmesh/agentmesh/services/indexer/internal/embed"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
)

type doc struct {
	ID         string `json:"id"`
	SourceType string `json:"source_type"`
	Title      string `json:"title"`
	SourceURL  string `json:"source_url"`
	Text       string `json:"text"`
}

type query struct {
	ID       string   `json:"id"`
	Text     string   `json:"text"`
	Relevant []string `json:"relevant"`
}

func main() {
	dir := flag.String("corpus", "testdata/eval", "directory with documents.jsonl and queries.jsonl")
	k := flag.Int("k", 10, "cut-off for recall")
	verbose := flag.Bool("v", false, "print per-query ranks")
	weights := flag.String("vector-weights", "0.3", "extra hybrid runs with these RRF vector weights (comma-separated; plain RRF, weight 1, always runs)")
	flag.Parse()
	var ws []float64
	for _, w := range strings.Split(*weights, ",") {
		if v, err := strconv.ParseFloat(strings.TrimSpace(w), 64); err == nil && v > 0 && v != 1 {
			ws = append(ws, v)
		}
	}
	res, err := evaluate(*dir, *k, *verbose, 1)
	for _, w := range ws {
		if err != nil {
			break
		}
		var more []result
		more, err = evaluate(*dir, *k, false, w)
		for _, r := range more {
			if r.name == "hybrid (RRF)" {
				r.name = fmt.Sprintf("hybrid (RRF, vector weight %g)", w)
				res = append(res, r)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "eval:", err)
		os.Exit(1)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "retriever\trecall@%d\tMRR\n", *k)
	for _, r := range res {
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\n", r.name, r.recall, r.mrr)
	}
	tw.Flush()
}

// result is one retriever's scores.
type result struct {
	name        string
	recall, mrr float64
}

// evaluate indexes the corpus and scores each retriever.
// vectorWeight is the RRF weight of the vector ranking (1: plain RRF).
func evaluate(dir string, k int, verbose bool, vectorWeight float64) ([]result, error) {
	var docs []doc
	var queries []query
	if err := readJSONL(filepath.Join(dir, "documents.jsonl"), &docs); err != nil {
		return nil, err
	}
	if err := readJSONL(filepath.Join(dir, "queries.jsonl"), &queries); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "indexer-eval-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	emb := embed.LocalHash{}
	m, err := hybrid.NewManager(hybrid.ManagerOptions{Dir: tmp, Embedder: emb.Name(), Dimensions: emb.Dimensions(), VectorWeight: vectorWeight})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	scope := hybrid.Scope{Tenant: "eval"}
	opts := chunk.Options{Size: 1000, Overlap: 150}
	chunkDoc := map[string]string{}
	start := time.Now()
	var chunks []hybrid.Chunk
	for _, d := range docs {
		st := indexerv1.SourceType(indexerv1.SourceType_value["SOURCE_TYPE_"+strings.ToUpper(d.SourceType)])
		ct := contenttype.Detect(d.Title, d.Text, st).Type
		// The base chunk, as the indexer writes it before extraction.
		texts := []string{fmt.Sprintf("%s\n%s (%s) %s", d.Title, strings.ReplaceAll(ct, "_", " "), d.SourceType, d.SourceURL)}
		for _, c := range chunk.Split(d.Text, opts) {
			texts = append(texts, c.Text)
		}
		vs, _ := emb.Embed(context.Background(), texts)
		for i, t := range texts {
			key := fmt.Sprintf("%s_%04d", d.ID, i)
			chunkDoc[key] = d.ID
			chunks = append(chunks, hybrid.Chunk{Key: key, Doc: d.ID, Title: d.Title, Text: t, SourceType: int32(st), ContentType: ct, Vector: vs[i]})
		}
	}
	if err := m.Write(scope, func(tx hybrid.Tx) error { return tx.Add(chunks) }); err != nil {
		return nil, err
	}
	if vectorWeight == 1 { // extra runs print only their table line
		fmt.Printf("corpus: %d documents, %d chunks, %d queries (indexed in %v)\n\n", len(docs), len(chunks), len(queries), time.Since(start).Round(time.Millisecond))
	}

	var out []result
	for _, mode := range []struct {
		name string
		m    hybrid.Mode
	}{{"bm25", hybrid.ModeKeyword}, {"vector", hybrid.ModeVector}, {"hybrid (RRF)", hybrid.ModeHybrid}} {
		var recall, mrr float64
		for _, q := range queries {
			qv := emb.Vector(q.Text)
			var hits []hybrid.Hit
			err := m.Read(scope, func(sh *hybrid.Shard) error {
				var err error
				hits, err = sh.Search(context.Background(), q.Text, qv, 100, mode.m, nil)
				return err
			})
			if err != nil {
				return nil, err
			}
			ranked := docsOf(hits, chunkDoc)
			r, rr := score(ranked, q.Relevant, k)
			recall += r
			mrr += rr
			if verbose {
				fmt.Printf("%-12s %s recall=%.2f rr=%.2f %q top=%v want=%v\n", mode.name, q.ID, r, rr, q.Text, ranked[:min(5, len(ranked))], q.Relevant)
			}
		}
		n := float64(len(queries))
		out = append(out, result{mode.name, recall / n, mrr / n})
	}
	return out, nil
}

// docsOf maps ranked chunks to ranked documents, keeping each document's
// best rank.
func docsOf(hits []hybrid.Hit, chunkDoc map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, h := range hits {
		d := chunkDoc[h.Key]
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// score returns recall@k and the reciprocal rank of the first relevant
// document (0 if none is ranked).
func score(ranked, relevant []string, k int) (recall, rr float64) {
	rel := map[string]bool{}
	for _, r := range relevant {
		rel[r] = true
	}
	found := 0
	for i, d := range ranked {
		if !rel[d] {
			continue
		}
		if rr == 0 {
			rr = 1 / float64(i+1)
		}
		if i < k {
			found++
		}
	}
	return float64(found) / float64(len(relevant)), rr
}

func readJSONL[T any](path string, out *[]T) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		*out = append(*out, v)
	}
	return sc.Err()
}
