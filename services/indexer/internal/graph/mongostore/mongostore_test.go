package mongostore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/graph"
)

// chunkKeys are the keys of a document's n chunks.
func chunkKeys(id string, n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, "chunk:"+id+string(rune('a'+i)))
	}
	return out
}

// addDoc puts a document with n chunks and the given entities in the graph.
func addDoc(t *testing.T, s *Store, sc graph.Scope, id string, n int, entities ...string) {
	t.Helper()
	ctx := context.Background()
	doc := graph.Node{Key: "doc:" + id, Kind: graph.KindDocument, Label: id}
	var chunks []graph.Node
	for _, k := range chunkKeys(id, n) {
		chunks = append(chunks, graph.Node{Key: k, Kind: graph.KindChunk})
	}
	if err := s.ReplaceDocument(ctx, sc, id, doc, chunks, nil); err != nil {
		t.Fatal(err)
	}
	var ents []graph.Node
	for _, e := range entities {
		ents = append(ents, graph.Node{Key: e, Kind: graph.KindEntity, Label: e, Props: map[string]any{"n": 1}})
	}
	if err := s.ReplaceMentions(ctx, sc, id, doc.Key, ents, nil); err != nil {
		t.Fatal(err)
	}
}

func keys(ns []graph.Node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Key)
	}
	return out
}

func TestWalksAndCleanup(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testWalksAndCleanup)
}

func testWalksAndCleanup(t *testing.T, db *mongo.Database) {
	ctx := context.Background()
	s := New(db)
	if err := s.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	sc, other := graph.Scope{Tenant: "acme"}, graph.Scope{Tenant: "globex"}
	addDoc(t, s, sc, "d1", 2, "entity:ticker:bhp", "entity:person:ana")
	addDoc(t, s, sc, "d2", 1, "entity:ticker:bhp")
	addDoc(t, s, sc, "d3", 1, "entity:person:zed")
	addDoc(t, s, other, "d9", 1, "entity:ticker:bhp")

	n, err := graph.GetNode(ctx, s, sc, "entity:ticker:bhp")
	if err != nil || n.Kind != graph.KindEntity || n.Props["n"] != 1.0 {
		t.Fatalf("GetNode = %+v, %v", n, err)
	}
	// Depth 1 from d1 over every edge type: its chunks and its entities.
	ns, es, err := graph.Neighbors(ctx, s, sc, "doc:d1", nil, 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(ns); len(got) != 4 || len(es) != 4 {
		t.Fatalf("depth 1: %v / %d edges", got, len(es))
	}
	// Only MENTIONS, depth 2: entities, then the other document mentioning BHP.
	ns, _, err = graph.Neighbors(ctx, s, sc, "doc:d1", []string{graph.Mentions}, 2, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(ns); len(got) != 3 || got[2] != "doc:d2" {
		t.Fatalf("MENTIONS depth 2: %v", got)
	}
	// Path chunk of d1 → d1 → BHP → d2.
	ps, pe, err := graph.Path(ctx, s, sc, "chunk:d1a", "doc:d2", 6)
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(ps); len(got) != 4 || got[0] != "chunk:d1a" || got[2] != "entity:ticker:bhp" || got[3] != "doc:d2" || len(pe) != 3 {
		t.Fatalf("path = %v, %v", got, pe)
	}
	// No path to an unconnected document; a path too long for max depth.
	if ps, _, err := graph.Path(ctx, s, sc, "doc:d1", "doc:d3", 6); err != nil || len(ps) != 0 {
		t.Fatalf("path to d3 = %v, %v", keys(ps), err)
	}
	if ps, _, _ := graph.Path(ctx, s, sc, "chunk:d1a", "doc:d2", 2); len(ps) != 0 {
		t.Fatalf("path within 2 = %v", keys(ps))
	}
	// The other scope's BHP node is its own.
	if _, err := graph.GetNode(ctx, s, other, "doc:d1"); !errors.Is(err, graph.ErrNotFound) {
		t.Fatalf("other scope sees d1: %v", err)
	}

	// d1 stops mentioning Ana: Ana goes (nobody else mentions her), BHP
	// stays. The previous mentions named may be more than the graph has.
	d1Mentions := []string{"entity:ticker:bhp", "entity:person:ana", "entity:person:never"}
	if err := s.ReplaceMentions(ctx, sc, "d1", "doc:d1", []graph.Node{{Key: "entity:ticker:bhp", Label: "BHP"}}, d1Mentions); err != nil {
		t.Fatal(err)
	}
	if _, err := graph.GetNode(ctx, s, sc, "entity:person:ana"); !errors.Is(err, graph.ErrNotFound) {
		t.Fatalf("orphan entity kept: %v", err)
	}
	if _, es, err := graph.Neighbors(ctx, s, sc, "doc:d1", []string{graph.Mentions}, 1, 100); err != nil || len(es) != 1 {
		t.Fatalf("d1's mentions after the change: %v, %v", es, err)
	}
	// A new version of d1 with one chunk: the old chunk nodes and their
	// edges go.
	if err := s.ReplaceDocument(ctx, sc, "d1", graph.Node{Key: "doc:d1", Kind: graph.KindDocument}, []graph.Node{{Key: "chunk:d1z", Kind: graph.KindChunk}}, chunkKeys("d1", 2)); err != nil {
		t.Fatal(err)
	}
	for _, k := range chunkKeys("d1", 2) {
		if _, err := graph.GetNode(ctx, s, sc, k); !errors.Is(err, graph.ErrNotFound) {
			t.Fatalf("old chunk %s kept: %v", k, err)
		}
	}
	if _, es, err := graph.Neighbors(ctx, s, sc, "doc:d1", []string{graph.PartOf}, 1, 100); err != nil || len(es) != 1 || es[0].From != "chunk:d1z" {
		t.Fatalf("d1's PART_OF edges after the new version: %v, %v", es, err)
	}
	// Deleting d1 leaves nothing of it; BHP stays for d2.
	if err := s.DeleteDocument(ctx, sc, "d1", "doc:d1", append(chunkKeys("d1", 2), "chunk:d1z"), d1Mentions); err != nil {
		t.Fatal(err)
	}
	if nn, ne, err := s.CountDocument(ctx, sc, "d1"); err != nil || nn != 0 || ne != 0 {
		t.Fatalf("after delete: %d nodes, %d edges, %v", nn, ne, err)
	}
	if _, err := graph.GetNode(ctx, s, sc, "entity:ticker:bhp"); err != nil {
		t.Fatalf("BHP deleted while d2 mentions it: %v", err)
	}
	if err := s.DeleteDocument(ctx, sc, "d2", "doc:d2", chunkKeys("d2", 1), []string{"entity:ticker:bhp"}); err != nil {
		t.Fatal(err)
	}
	if _, err := graph.GetNode(ctx, s, sc, "entity:ticker:bhp"); !errors.Is(err, graph.ErrNotFound) {
		t.Fatalf("BHP kept with no document: %v", err)
	}
	if _, err := graph.GetNode(ctx, s, other, "entity:ticker:bhp"); err != nil {
		t.Fatalf("the other scope's BHP went too: %v", err)
	}
}

// TestSharedEntityUnderConcurrentDocuments: documents mentioning one
// entity at once all end up on it, and once they all stop, it goes.
func TestSharedEntityUnderConcurrentDocuments(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		s := New(db)
		sc := graph.Scope{Tenant: "acme"}
		const docs = 8
		bhp := []graph.Node{{Key: "entity:ticker:bhp", Label: "BHP"}}
		var wg sync.WaitGroup
		for i := range docs {
			wg.Go(func() {
				id := fmt.Sprintf("d%d", i)
				if err := s.ReplaceMentions(ctx, sc, id, "doc:"+id, bhp, nil); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if _, es, err := graph.Neighbors(ctx, s, sc, "entity:ticker:bhp", nil, 1, 100); err != nil || len(es) != docs {
			t.Fatalf("BHP has %d mentions, %v; want %d", len(es), err, docs)
		}
		var rec nodeRecord
		if err := db.Collection(NodesCollection).FindOne(ctx, byID(nodeID(sc, "entity:ticker:bhp"))).Decode(&rec); err != nil || len(rec.DocIDs) != docs {
			t.Fatalf("BHP lists %v, %v; want %d documents", rec.DocIDs, err, docs)
		}
		for i := range docs {
			wg.Go(func() {
				id := fmt.Sprintf("d%d", i)
				if err := s.DeleteDocument(ctx, sc, id, "doc:"+id, nil, []string{"entity:ticker:bhp"}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if _, err := graph.GetNode(ctx, s, sc, "entity:ticker:bhp"); !errors.Is(err, graph.ErrNotFound) {
			t.Fatalf("BHP kept with no document: %v", err)
		}
	})
}
