package grpcapi

import (
	"context"

	"google.golang.org/protobuf/types/known/structpb"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/graph"
)

// Graph walk defaults; the contract states the maxima.
const (
	defaultDepth     = 1
	defaultNodeLimit = 100
	defaultPathDepth = 6
)

// Graph implements GraphService.
type Graph struct {
	indexerv1.UnimplementedGraphServiceServer
	r graph.Reader
}

var _ indexerv1.GraphServiceServer = (*Graph)(nil)

// NewGraph returns the GraphService server reading r.
func NewGraph(r graph.Reader) *Graph { return &Graph{r: r} }

// GetNode returns one node.
func (g *Graph) GetNode(ctx context.Context, req *indexerv1.GetNodeRequest) (*indexerv1.GetNodeResponse, error) {
	sc, err := resolve(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	n, err := graph.GetNode(ctx, g.r, graph.Scope(sc), req.GetKey())
	if err != nil {
		return nil, toStatus(err)
	}
	return &indexerv1.GetNodeResponse{Node: nodeProto(n)}, nil
}

// ListNeighbors walks the graph from a node.
func (g *Graph) ListNeighbors(ctx context.Context, req *indexerv1.ListNeighborsRequest) (*indexerv1.ListNeighborsResponse, error) {
	sc, err := resolve(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	// The contract requires the key and bounds depth (0-5), limit (0-1000)
	// and the edge types before this handler runs.
	depth, limit := int(req.GetDepth()), int(req.GetLimit())
	if depth == 0 {
		depth = defaultDepth
	}
	if limit == 0 {
		limit = defaultNodeLimit
	}
	ns, es, err := graph.Neighbors(ctx, g.r, graph.Scope(sc), req.GetKey(), req.GetEdgeTypes(), depth, limit)
	if err != nil {
		return nil, toStatus(err)
	}
	nodes, edges := walkProto(ns, es)
	return &indexerv1.ListNeighborsResponse{Nodes: nodes, Edges: edges}, nil
}

// FindPath returns a shortest path between two nodes.
func (g *Graph) FindPath(ctx context.Context, req *indexerv1.FindPathRequest) (*indexerv1.FindPathResponse, error) {
	sc, err := resolve(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	// The contract requires both keys and bounds max_depth (0-12).
	d := int(req.GetMaxDepth())
	if d == 0 {
		d = defaultPathDepth
	}
	ns, es, err := graph.Path(ctx, g.r, graph.Scope(sc), req.GetFromKey(), req.GetToKey(), d)
	if err != nil {
		return nil, toStatus(err)
	}
	nodes, edges := walkProto(ns, es)
	return &indexerv1.FindPathResponse{Nodes: nodes, Edges: edges}, nil
}

// walkProto converts the nodes and edges of a walk.
func walkProto(ns []graph.Node, es []graph.Edge) ([]*indexerv1.Node, []*indexerv1.Edge) {
	var nodes []*indexerv1.Node
	for _, n := range ns {
		nodes = append(nodes, nodeProto(n))
	}
	var edges []*indexerv1.Edge
	for _, e := range es {
		edges = append(edges, &indexerv1.Edge{FromKey: e.From, ToKey: e.To, Type: e.Type})
	}
	return nodes, edges
}

func nodeProto(n graph.Node) *indexerv1.Node {
	p := &indexerv1.Node{Key: n.Key, Kind: n.Kind, Label: n.Label}
	if len(n.Props) > 0 {
		if s, err := structpb.NewStruct(n.Props); err == nil {
			p.Properties = s
		}
	}
	return p
}
