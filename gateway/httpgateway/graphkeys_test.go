package httpgateway_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
)

type graphFake struct {
	indexerv1.UnimplementedGraphServiceServer
	keys chan string
}

func (f *graphFake) GetNode(_ context.Context, r *indexerv1.GetNodeRequest) (*indexerv1.GetNodeResponse, error) {
	f.keys <- r.GetKey()
	return &indexerv1.GetNodeResponse{Node: &indexerv1.Node{Key: r.GetKey()}}, nil
}

func (f *graphFake) ListNeighbors(_ context.Context, r *indexerv1.ListNeighborsRequest) (*indexerv1.ListNeighborsResponse, error) {
	f.keys <- r.GetKey()
	return &indexerv1.ListNeighborsResponse{}, nil
}

// TestGraphKeysWithASlash: a graph key may hold "/" (the entity "CI/CD"
// is entity:tech:ci/cd). The path forms cannot carry it — the gateway
// decodes %2F before routing, so the path no longer matches — and the
// query forms (?key=) reach the service with the key whole.
func TestGraphKeysWithASlash(t *testing.T) {
	t.Parallel()
	g := &graphFake{keys: make(chan string, 8)}
	m := startMesh(t, httpgateway.Config{}, fakes{graph: g})
	for _, tc := range []struct {
		path, want string
		status     int
	}{
		{"/v1/graph/node?key=entity:tech:ci%2Fcd", "entity:tech:ci/cd", http.StatusOK},
		{"/v1/graph/neighbors?key=entity:tech:ci%2Fcd&depth=1", "entity:tech:ci/cd", http.StatusOK},
		{"/v1/graph/nodes/doc:abc", "doc:abc", http.StatusOK},
		{"/v1/graph/nodes/doc:abc/neighbors", "doc:abc", http.StatusOK},
		{"/v1/graph/nodes/entity:tech:ci%2Fcd", "", http.StatusNotFound},
	} {
		resp, body := do(t, http.MethodGet, m.url+tc.path, "", nil)
		if resp.StatusCode != tc.status {
			t.Errorf("GET %s: %d %s, want %d", tc.path, resp.StatusCode, body, tc.status)
			continue
		}
		if tc.want == "" {
			continue
		}
		if got := <-g.keys; got != tc.want {
			t.Errorf("GET %s reached the service with key %q, want %q", tc.path, got, tc.want)
		}
	}
}
