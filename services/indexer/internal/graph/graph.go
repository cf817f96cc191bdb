// Package graph is the knowledge graph built at ingestion: a node per
// document ("doc:<id>"), per chunk ("chunk:<id>", PART_OF its document) and
// per entity named in extracts ("entity:<kind>:<name>", which documents
// MENTION). It walks the graph in Go, one indexed edge query per
// breadth-first level, because the embedded database has no $graphLookup.
// Edges are directed but walked both ways, so two documents that mention
// the same company are two steps apart.
package graph

import (
	"context"
	"errors"
	"slices"
)

// Edge types.
const (
	// PartOf links a chunk to its document.
	PartOf = "PART_OF"
	// Mentions links a document to an entity its extracts name.
	Mentions = "MENTIONS"
)

// Node kinds.
const (
	KindDocument = "document"
	KindChunk    = "chunk"
	KindEntity   = "entity"
)

// ErrNotFound means no such node in the scope.
var ErrNotFound = errors.New("graph: node not found")

// Scope is a tenant's project.
type Scope struct{ Tenant, Project string }

// Node is a graph node.
type Node struct {
	// Key is unique in the scope.
	Key string
	// Kind is document, chunk or entity.
	Kind string
	// Label is a short human label.
	Label string
	// Props are JSON-compatible properties.
	Props map[string]any
}

// Edge is a directed, typed edge.
type Edge struct {
	From, To, Type string
}

// Reader is what traversal needs from storage.
type Reader interface {
	// Nodes returns the nodes with these keys that exist, in any order.
	Nodes(ctx context.Context, s Scope, keys []string) ([]Node, error)
	// Edges returns the edges of the given types (all if empty) that
	// start or end at any of keys, at most limit.
	Edges(ctx context.Context, s Scope, keys, types []string, limit int) ([]Edge, error)
}

// GetNode returns one node.
func GetNode(ctx context.Context, r Reader, s Scope, key string) (Node, error) {
	ns, err := r.Nodes(ctx, s, []string{key})
	if err != nil {
		return Node{}, err
	}
	if len(ns) == 0 {
		return Node{}, ErrNotFound
	}
	return ns[0], nil
}

// maxFrontier bounds one level of a walk, so a hub (an entity mentioned
// by thousands of documents) cannot make one request read the whole graph.
const maxFrontier = 5000

// Neighbors walks breadth first from start along edges of the given types
// (all if empty), up to depth levels, and returns the nodes reached (start
// excluded, closest first, at most limit) and the edges walked to reach
// them.
func Neighbors(ctx context.Context, r Reader, s Scope, start string, types []string, depth, limit int) ([]Node, []Edge, error) {
	if _, err := GetNode(ctx, r, s, start); err != nil {
		return nil, nil, err
	}
	seen := map[string]bool{start: true}
	frontier := []string{start}
	var order []string
	var walked []Edge
	for level := 0; level < depth && len(frontier) > 0 && len(order) < limit; level++ {
		cs, err := crossings(ctx, r, s, frontier, types)
		if err != nil {
			return nil, nil, err
		}
		var next []string
		for _, c := range cs {
			if seen[c.to] || len(order) >= limit {
				continue
			}
			seen[c.to] = true
			next = append(next, c.to)
			order = append(order, c.to)
			walked = append(walked, c.edge)
		}
		frontier = next
	}
	nodes, err := ordered(ctx, r, s, order)
	return nodes, walked, err
}

// Path returns a shortest path from one node to another, walking edges
// both ways, within maxDepth edges: the nodes from first to last and the
// edges between them. It returns no nodes when there is none.
func Path(ctx context.Context, r Reader, s Scope, from, to string, maxDepth int) ([]Node, []Edge, error) {
	ends, err := r.Nodes(ctx, s, []string{from, to})
	if err != nil {
		return nil, nil, err
	}
	if len(ends) < 2 && from != to || len(ends) == 0 {
		return nil, nil, ErrNotFound
	}
	if from == to {
		return ends[:1], nil, nil
	}
	type step struct {
		prev string
		edge Edge
	}
	parent := map[string]step{from: {}}
	frontier := []string{from}
	for level := 0; level < maxDepth && len(frontier) > 0; level++ {
		cs, err := crossings(ctx, r, s, frontier, nil)
		if err != nil {
			return nil, nil, err
		}
		var next []string
		for _, c := range cs {
			if _, ok := parent[c.to]; ok {
				continue
			}
			parent[c.to] = step{prev: c.from, edge: c.edge}
			if c.to == to {
				var keys []string
				var edges []Edge
				for k := to; k != from; k = parent[k].prev {
					keys = append(keys, k)
					edges = append(edges, parent[k].edge)
				}
				keys = append(keys, from)
				slices.Reverse(keys)
				slices.Reverse(edges)
				nodes, err := ordered(ctx, r, s, keys)
				return nodes, edges, err
			}
			next = append(next, c.to)
		}
		frontier = next
	}
	return nil, nil, nil
}

// crossing is one way an edge leads out of a walk's frontier.
type crossing struct {
	edge     Edge
	from, to string // from is in the frontier
}

// crossings reads the edges (of the given types, all if empty) touching
// frontier and returns every way one leads from a frontier node, edges in
// a stable order and each edge both ways: edges are walked in either
// direction.
func crossings(ctx context.Context, r Reader, s Scope, frontier, types []string) ([]crossing, error) {
	es, err := r.Edges(ctx, s, frontier, types, maxFrontier)
	if err != nil {
		return nil, err
	}
	inFrontier := make(map[string]bool, len(frontier))
	for _, k := range frontier {
		inFrontier[k] = true
	}
	sortEdges(es)
	var out []crossing
	for _, e := range es {
		for _, c := range []crossing{{e, e.From, e.To}, {e, e.To, e.From}} {
			if inFrontier[c.from] {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// ordered loads nodes and returns them in keys' order; keys whose node
// is missing (an edge to a node being deleted) are skipped.
func ordered(ctx context.Context, r Reader, s Scope, keys []string) ([]Node, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	ns, err := r.Nodes(ctx, s, keys)
	if err != nil {
		return nil, err
	}
	byKey := make(map[string]Node, len(ns))
	for _, n := range ns {
		byKey[n.Key] = n
	}
	out := make([]Node, 0, len(keys))
	for _, k := range keys {
		if n, ok := byKey[k]; ok {
			out = append(out, n)
		}
	}
	return out, nil
}

// sortEdges makes walks deterministic.
func sortEdges(es []Edge) {
	slices.SortFunc(es, func(a, b Edge) int {
		for _, c := range [][2]string{{a.Type, b.Type}, {a.From, b.From}, {a.To, b.To}} {
			if c[0] < c[1] {
				return -1
			}
			if c[0] > c[1] {
				return 1
			}
		}
		return 0
	})
}
