// Package mongostore keeps the knowledge graph in MongoDB (or FerretDB):
// one collection of nodes and one of edges, each record tagged with the
// document that put it there, so replacing or deleting a document's part
// of the graph is a few indexed deletes. Entity nodes are shared between
// documents and list the documents that mention them; the last document to
// stop mentioning one deletes it.
//
// Writes are serialised in the process: FerretDB v1 can lose one of two
// concurrent updates of the same document, and entity nodes are updated
// by every document that mentions them.
package mongostore

import (
	"context"
	"fmt"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/indexer/internal/graph"
)

// Collection names.
const (
	NodesCollection = "indexer_graph_nodes"
	EdgesCollection = "indexer_graph_edges"
)

// Store is the graph store; safe for concurrent use.
type Store struct {
	nodes, edges *mongo.Collection
	mu           sync.Mutex // serialises writes
}

var _ graph.Reader = (*Store)(nil)

// New returns a store on db.
func New(db *mongo.Database) *Store {
	return &Store{nodes: db.Collection(NodesCollection), edges: db.Collection(EdgesCollection)}
}

// EnsureIndexes creates the indexes of the walks and of the per-document
// cleanup.
func (s *Store) EnsureIndexes(ctx context.Context) error {
	sc := func(more ...bson.E) bson.D {
		return append(bson.D{{Key: "tenant", Value: 1}, {Key: "project", Value: 1}}, more...)
	}
	if err := mongox.EnsureIndexes(ctx, s.nodes,
		mongox.Index{Keys: sc(bson.E{Key: "key", Value: 1}), Unique: true},
		mongox.Index{Keys: sc(bson.E{Key: "doc_id", Value: 1})},
		mongox.Index{Keys: sc(bson.E{Key: "doc_ids", Value: 1})},
	); err != nil {
		return err
	}
	return mongox.EnsureIndexes(ctx, s.edges,
		mongox.Index{Keys: sc(bson.E{Key: "from", Value: 1}, bson.E{Key: "type", Value: 1})},
		mongox.Index{Keys: sc(bson.E{Key: "to", Value: 1}, bson.E{Key: "type", Value: 1})},
		mongox.Index{Keys: sc(bson.E{Key: "doc_id", Value: 1})},
	)
}

type nodeRecord struct {
	ID      string         `bson:"_id"`
	Tenant  string         `bson:"tenant"`
	Project string         `bson:"project"`
	Key     string         `bson:"key"`
	Kind    string         `bson:"kind"`
	Label   string         `bson:"label"`
	Props   map[string]any `bson:"props,omitempty"`
	DocID   string         `bson:"doc_id,omitempty"`
	DocIDs  []string       `bson:"doc_ids,omitempty"`
}

type edgeRecord struct {
	ID      string `bson:"_id"`
	Tenant  string `bson:"tenant"`
	Project string `bson:"project"`
	From    string `bson:"from"`
	To      string `bson:"to"`
	Type    string `bson:"type"`
	DocID   string `bson:"doc_id"`
}

func nodeID(s graph.Scope, key string) string { return s.Tenant + "\x00" + s.Project + "\x00" + key }

func edgeID(s graph.Scope, e graph.Edge) string {
	return s.Tenant + "\x00" + s.Project + "\x00" + e.From + "\x00" + e.Type + "\x00" + e.To
}

func scopeFilter(s graph.Scope, more ...bson.E) bson.D {
	return append(bson.D{{Key: "tenant", Value: s.Tenant}, {Key: "project", Value: s.Project}}, more...)
}

// ReplaceDocument makes docNode, chunks and their PART_OF edges the
// document's structural part of the graph, replacing what an earlier
// version of the document put there. Entity links are left alone
// (see ReplaceMentions).
func (s *Store) ReplaceDocument(ctx context.Context, sc graph.Scope, docID string, docNode graph.Node, chunks []graph.Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.edges.DeleteMany(ctx, scopeFilter(sc, bson.E{Key: "doc_id", Value: docID}, bson.E{Key: "type", Value: graph.PartOf})); err != nil {
		return fmt.Errorf("graph: %w", err)
	}
	if _, err := s.nodes.DeleteMany(ctx, scopeFilter(sc, bson.E{Key: "doc_id", Value: docID}, bson.E{Key: "kind", Value: graph.KindChunk})); err != nil {
		return fmt.Errorf("graph: %w", err)
	}
	models := []mongo.WriteModel{mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: nodeID(sc, docNode.Key)}}).
		SetReplacement(s.record(sc, docID, docNode)).SetUpsert(true)}
	for _, c := range chunks {
		models = append(models, mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: nodeID(sc, c.Key)}}).
			SetReplacement(s.record(sc, docID, c)).SetUpsert(true))
	}
	if _, err := s.nodes.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
		return fmt.Errorf("graph: write nodes: %w", err)
	}
	if len(chunks) == 0 {
		return nil
	}
	edges := make([]mongo.WriteModel, len(chunks))
	for i, c := range chunks {
		e := graph.Edge{From: c.Key, To: docNode.Key, Type: graph.PartOf}
		edges[i] = mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: edgeID(sc, e)}}).
			SetReplacement(edgeRecord{ID: edgeID(sc, e), Tenant: sc.Tenant, Project: sc.Project, From: e.From, To: e.To, Type: e.Type, DocID: docID}).SetUpsert(true)
	}
	if _, err := s.edges.BulkWrite(ctx, edges, options.BulkWrite().SetOrdered(false)); err != nil {
		return fmt.Errorf("graph: write edges: %w", err)
	}
	return nil
}

func (s *Store) record(sc graph.Scope, docID string, n graph.Node) nodeRecord {
	return nodeRecord{ID: nodeID(sc, n.Key), Tenant: sc.Tenant, Project: sc.Project, Key: n.Key, Kind: n.Kind, Label: n.Label, Props: n.Props, DocID: docID}
}

// ReplaceMentions makes entities the ones the document (node docKey)
// MENTIONS: its old MENTIONS edges go, entity nodes are created or gain
// the document, and entities no document mentions any more are deleted.
func (s *Store) ReplaceMentions(ctx context.Context, sc graph.Scope, docID, docKey string, entities []graph.Node) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.dropMentions(ctx, sc, docID, entities); err != nil {
		return err
	}
	if len(entities) == 0 {
		return nil
	}
	nodes := make([]mongo.WriteModel, len(entities))
	edges := make([]mongo.WriteModel, len(entities))
	for i, e := range entities {
		nodes[i] = mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: nodeID(sc, e.Key)}}).SetUpsert(true).SetUpdate(bson.M{
			"$set":      bson.M{"tenant": sc.Tenant, "project": sc.Project, "key": e.Key, "kind": graph.KindEntity, "label": e.Label, "props": e.Props},
			"$addToSet": bson.M{"doc_ids": docID},
		})
		ed := graph.Edge{From: docKey, To: e.Key, Type: graph.Mentions}
		edges[i] = mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: edgeID(sc, ed)}}).
			SetReplacement(edgeRecord{ID: edgeID(sc, ed), Tenant: sc.Tenant, Project: sc.Project, From: ed.From, To: ed.To, Type: ed.Type, DocID: docID}).SetUpsert(true)
	}
	if _, err := s.nodes.BulkWrite(ctx, nodes, options.BulkWrite().SetOrdered(false)); err != nil {
		return fmt.Errorf("graph: write entities: %w", err)
	}
	if _, err := s.edges.BulkWrite(ctx, edges, options.BulkWrite().SetOrdered(false)); err != nil {
		return fmt.Errorf("graph: write mentions: %w", err)
	}
	return nil
}

// dropMentions removes the document's MENTIONS edges and its name from
// entities it no longer mentions (keep), then deletes orphaned entities.
func (s *Store) dropMentions(ctx context.Context, sc graph.Scope, docID string, keep []graph.Node) error {
	keepKeys := bson.A{}
	for _, e := range keep {
		keepKeys = append(keepKeys, e.Key)
	}
	if _, err := s.edges.DeleteMany(ctx, scopeFilter(sc, bson.E{Key: "doc_id", Value: docID}, bson.E{Key: "type", Value: graph.Mentions},
		bson.E{Key: "to", Value: bson.M{"$nin": keepKeys}})); err != nil {
		return fmt.Errorf("graph: %w", err)
	}
	// $pullAll by value: FerretDB v1 ignores $pull with a condition.
	if _, err := s.nodes.UpdateMany(ctx, scopeFilter(sc, bson.E{Key: "kind", Value: graph.KindEntity}, bson.E{Key: "doc_ids", Value: docID},
		bson.E{Key: "key", Value: bson.M{"$nin": keepKeys}}), bson.M{"$pullAll": bson.M{"doc_ids": bson.A{docID}}}); err != nil {
		return fmt.Errorf("graph: %w", err)
	}
	// An entity whose list emptied is gone; one a concurrent ingest just
	// added itself to is not, since its list is not empty.
	if _, err := s.nodes.DeleteMany(ctx, scopeFilter(sc, bson.E{Key: "kind", Value: graph.KindEntity},
		bson.E{Key: "doc_ids.0", Value: bson.M{"$exists": false}})); err != nil {
		return fmt.Errorf("graph: %w", err)
	}
	return nil
}

// DeleteDocument removes everything the document put in the graph.
func (s *Store) DeleteDocument(ctx context.Context, sc graph.Scope, docID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.dropMentions(ctx, sc, docID, nil); err != nil {
		return err
	}
	if _, err := s.edges.DeleteMany(ctx, scopeFilter(sc, bson.E{Key: "doc_id", Value: docID})); err != nil {
		return fmt.Errorf("graph: %w", err)
	}
	if _, err := s.nodes.DeleteMany(ctx, scopeFilter(sc, bson.E{Key: "doc_id", Value: docID})); err != nil {
		return fmt.Errorf("graph: %w", err)
	}
	return nil
}

// CountDocument counts the nodes and edges the document put in the graph
// (entity nodes it mentions included).
func (s *Store) CountDocument(ctx context.Context, sc graph.Scope, docID string) (nodes, edges int64, err error) {
	n1, err := s.nodes.CountDocuments(ctx, scopeFilter(sc, bson.E{Key: "doc_id", Value: docID}))
	if err != nil {
		return 0, 0, err
	}
	n2, err := s.nodes.CountDocuments(ctx, scopeFilter(sc, bson.E{Key: "doc_ids", Value: docID}))
	if err != nil {
		return 0, 0, err
	}
	e, err := s.edges.CountDocuments(ctx, scopeFilter(sc, bson.E{Key: "doc_id", Value: docID}))
	return n1 + n2, e, err
}

// Nodes implements graph.Reader.
func (s *Store) Nodes(ctx context.Context, sc graph.Scope, keys []string) ([]graph.Node, error) {
	ks := make(bson.A, len(keys))
	for i, k := range keys {
		ks[i] = k
	}
	cur, err := s.nodes.Find(ctx, scopeFilter(sc, bson.E{Key: "key", Value: bson.M{"$in": ks}}))
	if err != nil {
		return nil, fmt.Errorf("graph: nodes: %w", err)
	}
	var recs []nodeRecord
	if err := cur.All(ctx, &recs); err != nil {
		return nil, fmt.Errorf("graph: nodes: %w", err)
	}
	out := make([]graph.Node, len(recs))
	for i, r := range recs {
		out[i] = graph.Node{Key: r.Key, Kind: r.Kind, Label: r.Label, Props: normalise(r.Props)}
	}
	return out, nil
}

// Edges implements graph.Reader.
func (s *Store) Edges(ctx context.Context, sc graph.Scope, keys, types []string, limit int) ([]graph.Edge, error) {
	ks := make(bson.A, len(keys))
	for i, k := range keys {
		ks[i] = k
	}
	var out []graph.Edge
	for _, field := range []string{"from", "to"} {
		f := scopeFilter(sc, bson.E{Key: field, Value: bson.M{"$in": ks}})
		if len(types) > 0 {
			ts := make(bson.A, len(types))
			for i, t := range types {
				ts[i] = t
			}
			f = append(f, bson.E{Key: "type", Value: bson.M{"$in": ts}})
		}
		cur, err := s.edges.Find(ctx, f, options.Find().SetLimit(int64(limit)))
		if err != nil {
			return nil, fmt.Errorf("graph: edges: %w", err)
		}
		var recs []edgeRecord
		if err := cur.All(ctx, &recs); err != nil {
			return nil, fmt.Errorf("graph: edges: %w", err)
		}
		for _, r := range recs {
			out = append(out, graph.Edge{From: r.From, To: r.To, Type: r.Type})
		}
	}
	return out, nil
}

// normalise turns decoded BSON (bson.D, bson.A, int32) into plain JSON
// values, so properties convert to protobuf Structs.
func normalise(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = plain(v)
	}
	return out
}

func plain(v any) any {
	switch x := v.(type) {
	case bson.D:
		m := make(map[string]any, len(x))
		for _, e := range x {
			m[e.Key] = plain(e.Value)
		}
		return m
	case bson.M:
		return normalise(x)
	case map[string]any:
		return normalise(x)
	case bson.A:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plain(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plain(e)
		}
		return out
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case int:
		return float64(x)
	}
	return v
}
