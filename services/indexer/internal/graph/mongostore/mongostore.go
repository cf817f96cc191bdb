// Package mongostore keeps the knowledge graph in MongoDB (or FerretDB):
// one collection of nodes and one of edges. A node's _id is its scope and
// key, an edge's its scope, ends and type, so every write names its
// records by _id: the callers say which chunks and entity mentions a
// document has (the document store records them), and replacing or
// deleting a document's part of the graph deletes those by _id. Entity
// nodes are shared between documents and list the documents that mention
// them (doc_ids); the last document to stop mentioning one deletes it.
//
// Lookups by _id are what FerretDB v1 answers without parsing the whole
// collection. Still scanning: Edges (a walk's breadth-first level, by
// from/to; indexed on MongoDB), Nodes for more than maxNodeLookups keys,
// and CountDocument (tests).
//
// Writes hold the locks of the records they write (mongox.LockDocuments):
// FerretDB applies an update as an unisolated read and write, and entity
// nodes are written by every document that mentions them. For a single
// writer (mongox.SingleWriter) that is enough, and a document's entities
// are read by _id to decide which to delete. With many writers each write
// is a single-document update MongoDB applies atomically: an entity is
// updated with $addToSet/$pullAll and deleted with the condition that its
// list is empty, so one a concurrent ingest just added itself to stays.
//
// # Queries and indexes (MongoDB)
//
// EnsureIndexes makes an index for every query (TestEveryQueryIsIndexed
// checks the shapes the store sends against them); writes and the reads
// of a few nodes go by _id:
//
//	query                                              collection  index
//	Nodes, more than maxNodeLookups: {tenant,          nodes       {tenant, project, key} (unique)
//	  project, key $in}
//	Edges: {tenant, project, from $in[, type $in]}     edges       {tenant, project, from, type}
//	Edges: {tenant, project, to $in[, type $in]}       edges       {tenant, project, to, type}
//	CountDocument: {tenant, project, doc_id}           nodes,      {tenant, project, doc_id}
//	                                                   edges
//	CountDocument: {tenant, project, doc_ids}          nodes       {tenant, project, doc_ids}
//
// What is assumed of MongoDB: $in is served as a set of equalities, and
// the unique index on key holds one node per key in a scope.
package mongostore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/sync/errgroup"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/indexer/internal/graph"
)

// Collection names.
const (
	NodesCollection = "indexer_graph_nodes"
	EdgesCollection = "indexer_graph_edges"
)

// Reads by _id.
const (
	// maxNodeLookups is the most nodes Nodes reads one by one, by _id;
	// a larger set (a wide walk) is one query.
	maxNodeLookups = 64
	// nodeReads is how many of those reads run at once.
	nodeReads = 8
)

// Store is the graph store; safe for concurrent use.
type Store struct {
	nodes, edges *mongo.Collection
	single       bool // mongox.SingleWriter of the database
}

var _ graph.Reader = (*Store)(nil)

// New returns a store on db.
func New(db *mongo.Database) *Store {
	return &Store{nodes: db.Collection(NodesCollection), edges: db.Collection(EdgesCollection), single: mongox.SingleWriter(db)}
}

// EnsureIndexes creates the indexes of the walks (MongoDB).
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

func byID(id string) bson.D { return bson.D{{Key: "_id", Value: id}} }

// writes is a set of writes to the nodes and edges, applied in the order
// nodes updated, nodes deleted, edges deleted, edges updated: one command
// each, every statement by _id (or by _id and a condition).
type writes struct {
	nodeUpdates, nodeDeletes, edgeDeletes, edgeUpdates []mongo.WriteModel
	nodeIDs, edgeIDs                                   []any // the records written, to lock
}

func (w *writes) upsertNode(id string, rec nodeRecord) {
	w.nodeIDs = append(w.nodeIDs, id)
	w.nodeUpdates = append(w.nodeUpdates, mongo.NewReplaceOneModel().SetFilter(byID(id)).SetReplacement(rec).SetUpsert(true))
}

func (w *writes) deleteNode(id string) {
	w.nodeIDs = append(w.nodeIDs, id)
	w.nodeDeletes = append(w.nodeDeletes, mongo.NewDeleteOneModel().SetFilter(byID(id)))
}

func (w *writes) upsertEdge(sc graph.Scope, e graph.Edge, docID string) {
	id := edgeID(sc, e)
	w.edgeIDs = append(w.edgeIDs, id)
	w.edgeUpdates = append(w.edgeUpdates, mongo.NewReplaceOneModel().SetFilter(byID(id)).
		SetReplacement(edgeRecord{ID: id, Tenant: sc.Tenant, Project: sc.Project, From: e.From, To: e.To, Type: e.Type, DocID: docID}).SetUpsert(true))
}

func (w *writes) deleteEdge(sc graph.Scope, e graph.Edge) {
	id := edgeID(sc, e)
	w.edgeIDs = append(w.edgeIDs, id)
	w.edgeDeletes = append(w.edgeDeletes, mongo.NewDeleteOneModel().SetFilter(byID(id)))
}

// apply runs the writes holding the locks of their records; forget, if
// not nil, adds the writes that take a document off entity nodes, decided
// under those locks.
func (s *Store) apply(ctx context.Context, w *writes, forget func(w *writes) error) error {
	defer mongox.LockDocuments(s.nodes, w.nodeIDs...)()
	defer mongox.LockDocuments(s.edges, w.edgeIDs...)()
	if forget != nil {
		if err := forget(w); err != nil {
			return err
		}
	}
	for _, step := range []struct {
		coll   *mongo.Collection
		models []mongo.WriteModel
	}{{s.nodes, w.nodeUpdates}, {s.nodes, w.nodeDeletes}, {s.edges, w.edgeDeletes}, {s.edges, w.edgeUpdates}} {
		if len(step.models) == 0 {
			continue
		}
		if _, err := step.coll.BulkWrite(ctx, step.models, options.BulkWrite().SetOrdered(false)); err != nil {
			return fmt.Errorf("graph: write %s: %w", step.coll.Name(), mongox.Translate(err))
		}
	}
	return nil
}

// ReplaceDocument makes docNode, chunks and their PART_OF edges the
// document's structural part of the graph; the chunk nodes with keys in
// stale (an earlier version's, absent ones are fine) go, with their
// edges. Entity links are left alone (see ReplaceMentions).
func (s *Store) ReplaceDocument(ctx context.Context, sc graph.Scope, docID string, docNode graph.Node, chunks []graph.Node, stale []string) error {
	w := &writes{}
	keep := map[string]bool{}
	w.upsertNode(nodeID(sc, docNode.Key), s.record(sc, docID, docNode))
	for _, c := range chunks {
		keep[c.Key] = true
		w.upsertNode(nodeID(sc, c.Key), s.record(sc, docID, c))
		w.upsertEdge(sc, graph.Edge{From: c.Key, To: docNode.Key, Type: graph.PartOf}, docID)
	}
	for _, k := range stale {
		if !keep[k] {
			w.deleteNode(nodeID(sc, k))
			w.deleteEdge(sc, graph.Edge{From: k, To: docNode.Key, Type: graph.PartOf})
		}
	}
	return s.apply(ctx, w, nil)
}

func (s *Store) record(sc graph.Scope, docID string, n graph.Node) nodeRecord {
	return nodeRecord{ID: nodeID(sc, n.Key), Tenant: sc.Tenant, Project: sc.Project, Key: n.Key, Kind: n.Kind, Label: n.Label, Props: n.Props, DocID: docID}
}

// ReplaceMentions makes entities the ones the document (node docKey)
// MENTIONS: its mentions of the keys in previous that are not among them
// go (previous may name more than the graph has), entity nodes are
// created or gain the document, and entities no document mentions any
// more are deleted.
func (s *Store) ReplaceMentions(ctx context.Context, sc graph.Scope, docID, docKey string, entities []graph.Node, previous []string) error {
	w := &writes{}
	keep := map[string]bool{}
	for _, e := range entities {
		keep[e.Key] = true
		id := nodeID(sc, e.Key)
		w.nodeIDs = append(w.nodeIDs, id)
		w.nodeUpdates = append(w.nodeUpdates, mongo.NewUpdateOneModel().SetFilter(byID(id)).SetUpsert(true).SetUpdate(bson.M{
			"$set":      bson.M{"tenant": sc.Tenant, "project": sc.Project, "key": e.Key, "kind": graph.KindEntity, "label": e.Label, "props": e.Props},
			"$addToSet": bson.M{"doc_ids": docID},
		}))
		w.upsertEdge(sc, graph.Edge{From: docKey, To: e.Key, Type: graph.Mentions}, docID)
	}
	var drop []string
	for _, k := range previous {
		if !keep[k] {
			drop = append(drop, k)
		}
	}
	drop = slices.Compact(slices.Sorted(slices.Values(drop)))
	forget := s.dropMentions(ctx, sc, docID, docKey, drop, w)
	return s.apply(ctx, w, forget)
}

// dropMentions adds to w the removal of the document's mentions of the
// entities keys, and returns the function that, under the locks, decides
// what becomes of the entity nodes (see forget).
func (s *Store) dropMentions(ctx context.Context, sc graph.Scope, docID, docKey string, keys []string, w *writes) func(*writes) error {
	for _, k := range keys {
		w.nodeIDs = append(w.nodeIDs, nodeID(sc, k))
		w.deleteEdge(sc, graph.Edge{From: docKey, To: k, Type: graph.Mentions})
	}
	return func(w *writes) error { return s.forget(ctx, sc, docID, keys, w) }
}

// forget adds to w the writes that take docID off the entity nodes keys,
// deleting those no document mentions then. The caller holds their locks.
// With many writers every entity loses docID ($pullAll by value: FerretDB
// v1 ignores $pull with a condition) and is then deleted if its list is
// empty, each write atomic on MongoDB. A single writer reads the entities
// by _id and deletes or updates each as its list says.
func (s *Store) forget(ctx context.Context, sc graph.Scope, docID string, keys []string, w *writes) error {
	pull := func(id string) mongo.WriteModel {
		return mongo.NewUpdateOneModel().SetFilter(byID(id)).SetUpdate(bson.M{"$pullAll": bson.M{"doc_ids": bson.A{docID}}})
	}
	if !s.single {
		for _, k := range keys {
			id := nodeID(sc, k)
			w.nodeUpdates = append(w.nodeUpdates, pull(id))
			w.nodeDeletes = append(w.nodeDeletes, mongo.NewDeleteOneModel().SetFilter(bson.D{
				{Key: "_id", Value: id}, {Key: "kind", Value: graph.KindEntity}, {Key: "doc_ids", Value: bson.M{"$size": 0}},
			}))
		}
		return nil
	}
	recs, err := s.readNodes(ctx, sc, keys, options.FindOne().SetProjection(bson.D{{Key: "kind", Value: 1}, {Key: "doc_ids", Value: 1}}))
	if err != nil {
		return err
	}
	for _, r := range recs {
		if r.Kind != graph.KindEntity {
			continue
		}
		others := slices.DeleteFunc(slices.Clone(r.DocIDs), func(d string) bool { return d == docID })
		switch {
		case len(others) == 0:
			w.nodeDeletes = append(w.nodeDeletes, mongo.NewDeleteOneModel().SetFilter(byID(r.ID)))
		case len(others) < len(r.DocIDs):
			w.nodeUpdates = append(w.nodeUpdates, pull(r.ID))
		}
	}
	return nil
}

// readNodes reads the nodes of keys that exist, each by _id (which holds
// the scope), nodeReads at a time.
func (s *Store) readNodes(ctx context.Context, sc graph.Scope, keys []string, opts ...options.Lister[options.FindOneOptions]) ([]nodeRecord, error) {
	found := make([]*nodeRecord, len(keys))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(nodeReads)
	for i, k := range keys {
		g.Go(func() error {
			var r nodeRecord
			err := s.nodes.FindOne(gctx, byID(nodeID(sc, k)), opts...).Decode(&r)
			if errors.Is(err, mongo.ErrNoDocuments) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("graph: read node: %w", mongox.Translate(err))
			}
			found[i] = &r
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make([]nodeRecord, 0, len(keys))
	for _, r := range found {
		if r != nil {
			out = append(out, *r)
		}
	}
	return out, nil
}

// DeleteDocument removes everything the document put in the graph: its
// node (docKey), its chunks' nodes (chunkKeys) with their PART_OF edges,
// and its mentions of the entities mentions (entities no document
// mentions any more go too). Keys that are not in the graph are fine.
func (s *Store) DeleteDocument(ctx context.Context, sc graph.Scope, docID, docKey string, chunkKeys, mentions []string) error {
	w := &writes{}
	w.deleteNode(nodeID(sc, docKey))
	for _, k := range chunkKeys {
		w.deleteNode(nodeID(sc, k))
		w.deleteEdge(sc, graph.Edge{From: k, To: docKey, Type: graph.PartOf})
	}
	forget := s.dropMentions(ctx, sc, docID, docKey, slices.Compact(slices.Sorted(slices.Values(mentions))), w)
	return s.apply(ctx, w, forget)
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

// Nodes implements graph.Reader: up to maxNodeLookups keys are read by
// _id, more in one query (a scan on FerretDB).
func (s *Store) Nodes(ctx context.Context, sc graph.Scope, keys []string) ([]graph.Node, error) {
	var recs []nodeRecord
	if len(keys) <= maxNodeLookups {
		var err error
		if recs, err = s.readNodes(ctx, sc, slices.Compact(slices.Sorted(slices.Values(keys)))); err != nil {
			return nil, err
		}
	} else {
		ks := make(bson.A, len(keys))
		for i, k := range keys {
			ks[i] = k
		}
		if err := mongox.FindAll(ctx, s.nodes, scopeFilter(sc, bson.E{Key: "key", Value: bson.M{"$in": ks}}), &recs); err != nil {
			return nil, fmt.Errorf("graph: nodes: %w", err)
		}
	}
	out := make([]graph.Node, len(recs))
	for i, r := range recs {
		out[i] = graph.Node{Key: r.Key, Kind: r.Kind, Label: r.Label, Props: normalise(r.Props)}
	}
	return out, nil
}

// Edges implements graph.Reader. It queries by from and to (a scan on
// FerretDB, indexed on MongoDB).
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
		var recs []edgeRecord
		if err := mongox.FindAll(ctx, s.edges, f, &recs, options.Find().SetLimit(int64(limit))); err != nil {
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
