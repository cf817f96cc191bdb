package mongostore

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/sync/errgroup"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
)

// chunkReads is how many chunks GetChunks reads at once.
const chunkReads = 8

// chunkRecord is a chunk as stored; the vector is little-endian float32s.
type chunkRecord struct {
	ID          string `bson:"_id"`
	Tenant      string `bson:"tenant"`
	Project     string `bson:"project"`
	DocID       string `bson:"doc_id"`
	Seq         int    `bson:"seq"`
	Kind        string `bson:"kind"`
	Text        string `bson:"text"`
	Start       int    `bson:"start"`
	End         int    `bson:"end"`
	ContentHash string `bson:"content_hash"`
	Title       string `bson:"title"`
	SourceURL   string `bson:"source_url"`
	SourceType  int32  `bson:"source_type"`
	ContentType string `bson:"content_type"`
	Vector      []byte `bson:"vector,omitempty"`
	Embedder    string `bson:"embedder"`
}

func toChunkRecord(c document.Chunk) chunkRecord {
	v := make([]byte, 4*len(c.Vector))
	for i, f := range c.Vector {
		binary.LittleEndian.PutUint32(v[4*i:], math.Float32bits(f))
	}
	return chunkRecord{ID: c.ID, Tenant: c.Scope.Tenant, Project: c.Scope.Project, DocID: c.DocID, Seq: c.Seq, Kind: c.Kind,
		Text: c.Text, Start: c.Start, End: c.End, ContentHash: c.ContentHash, Title: c.Title, SourceURL: c.SourceURL,
		SourceType: int32(c.SourceType), ContentType: c.ContentType, Vector: v, Embedder: c.Embedder}
}

func (r chunkRecord) toChunk() document.Chunk {
	var v []float32
	if len(r.Vector) > 0 {
		v = make([]float32, len(r.Vector)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(r.Vector[4*i:]))
		}
	}
	return document.Chunk{ID: r.ID, Scope: document.Scope{Tenant: r.Tenant, Project: r.Project}, DocID: r.DocID, Seq: r.Seq, Kind: r.Kind,
		Text: r.Text, Start: r.Start, End: r.End, ContentHash: r.ContentHash, Title: r.Title, SourceURL: r.SourceURL,
		SourceType: indexerv1.SourceType(r.SourceType), ContentType: r.ContentType, Vector: v, Embedder: r.Embedder}
}

// ReplaceChunks deletes the chunks with ids stale and writes chunks
// (replacing any with the same id, so a retried ingest converges): two
// commands, each statement by _id.
func (s *Store) ReplaceChunks(ctx context.Context, chunks []document.Chunk, stale []string) error {
	ids := make([]any, 0, len(chunks)+len(stale))
	for _, c := range chunks {
		ids = append(ids, c.ID)
	}
	for _, id := range stale {
		ids = append(ids, id)
	}
	defer mongox.LockDocuments(s.chunks, ids...)()
	if err := s.deleteChunks(ctx, ids[len(chunks):]); err != nil {
		return err
	}
	return s.putChunks(ctx, chunks)
}

// PutChunks writes chunks, replacing chunks with the same ids.
func (s *Store) PutChunks(ctx context.Context, chunks []document.Chunk) error {
	ids := make([]any, len(chunks))
	for i, c := range chunks {
		ids[i] = c.ID
	}
	defer mongox.LockDocuments(s.chunks, ids...)()
	return s.putChunks(ctx, chunks)
}

// putChunks writes chunks in one command; the caller holds their locks.
func (s *Store) putChunks(ctx context.Context, chunks []document.Chunk) error {
	if len(chunks) == 0 {
		return nil
	}
	models := make([]mongo.WriteModel, len(chunks))
	for i, c := range chunks {
		r := toChunkRecord(c)
		models[i] = mongo.NewReplaceOneModel().SetFilter(byID(r.ID)).SetReplacement(r).SetUpsert(true)
	}
	if _, err := s.chunks.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
		return translate(err)
	}
	return nil
}

// DeleteChunks removes the chunks with these ids (absent ones are no
// error), in one command.
func (s *Store) DeleteChunks(ctx context.Context, ids []string) error {
	lock := make([]any, len(ids))
	for i, id := range ids {
		lock[i] = id
	}
	defer mongox.LockDocuments(s.chunks, lock...)()
	return s.deleteChunks(ctx, lock)
}

// deleteChunks deletes by _id in one command (mongox.DeleteIDs); the
// caller holds the locks.
func (s *Store) deleteChunks(ctx context.Context, ids []any) error {
	if _, err := mongox.DeleteIDs(ctx, s.chunks, ids); err != nil {
		return translate(err)
	}
	return nil
}

// DocumentChunks returns a document's chunks in order. It scans the
// chunks (tests and tooling; the pipeline names chunks by id).
func (s *Store) DocumentChunks(ctx context.Context, sc document.Scope, docID string) ([]document.Chunk, error) {
	return findChunks(ctx, s.chunks, scopeFilter(sc, bson.E{Key: "doc_id", Value: docID}), options.Find().SetSort(bson.D{{Key: "seq", Value: 1}}))
}

// GetChunks returns the scope's chunks with these ids, without vectors,
// keyed by id; ids of other scopes or unknown ids are absent. It reads
// each by _id, chunkReads at a time.
func (s *Store) GetChunks(ctx context.Context, sc document.Scope, ids []string) (map[string]document.Chunk, error) {
	return s.readChunks(ctx, sc, ids, options.FindOne().SetProjection(bson.D{{Key: "vector", Value: 0}}))
}

// ReadChunks is GetChunks with the chunks' vectors, for a search index
// that follows the store.
func (s *Store) ReadChunks(ctx context.Context, sc document.Scope, ids []string) (map[string]document.Chunk, error) {
	return s.readChunks(ctx, sc, ids, options.FindOne())
}

func (s *Store) readChunks(ctx context.Context, sc document.Scope, ids []string, opts *options.FindOneOptionsBuilder) (map[string]document.Chunk, error) {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	found := make([]*document.Chunk, len(ids))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(chunkReads)
	for i, id := range ids {
		g.Go(func() error {
			var r chunkRecord
			err := mongox.FindByID(gctx, s.chunks, id, scopeFilter(sc), &r, opts)
			if errors.Is(err, mongox.ErrNotFound) {
				return nil // deleted meanwhile, or another scope's
			}
			if err != nil {
				return translate(err)
			}
			c := r.toChunk()
			found[i] = &c
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make(map[string]document.Chunk, len(ids))
	for _, c := range found {
		if c != nil {
			out[c.ID] = *c
		}
	}
	return out, nil
}

// EachChunk calls fn with the scope's chunks in id order, batch at a time.
// It scans (index rebuilds).
func (s *Store) EachChunk(ctx context.Context, sc document.Scope, batch int, fn func([]document.Chunk) error) error {
	after := ""
	for {
		f := scopeFilter(sc)
		if after != "" {
			f = append(f, bson.E{Key: "_id", Value: bson.M{"$gt": after}})
		}
		cs, err := findChunks(ctx, s.chunks, f, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(batch)))
		if err != nil {
			return err
		}
		if len(cs) > 0 {
			if err := fn(cs); err != nil {
				return err
			}
			after = cs[len(cs)-1].ID
		}
		if len(cs) < batch {
			return nil
		}
	}
}

// CountChunks counts the scope's chunks. It scans (the start-up check of
// the search indexes).
func (s *Store) CountChunks(ctx context.Context, sc document.Scope) (int64, error) {
	n, err := s.chunks.CountDocuments(ctx, scopeFilter(sc))
	return n, translate(err)
}

// findChunks returns the chunks of coll that filter matches, in opts's
// order.
func findChunks(ctx context.Context, chunks *mongo.Collection, filter bson.D, opts *options.FindOptionsBuilder) ([]document.Chunk, error) {
	var recs []chunkRecord
	if err := mongox.FindAll(ctx, chunks, filter, &recs, opts); err != nil {
		return nil, translate(err)
	}
	out := make([]document.Chunk, len(recs))
	for i, r := range recs {
		out[i] = r.toChunk()
	}
	return out, nil
}
