package httpgateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// TestAnswerTooLargeIsABadGateway: a service answer larger than the
// gateway's gRPC client takes (32 MiB) is the service's failure, a 502
// saying what happened, not the 429 ("too many requests") that gRPC's
// RESOURCE_EXHAUSTED maps to, with grpc-go's wording.
func TestAnswerTooLargeIsABadGateway(t *testing.T) {
	t.Parallel()
	m := startMesh(t, httpgateway.Config{}, fakes{model: &modelFake{list: func(context.Context, *modelv1.ListModelsRequest) (*modelv1.ListModelsResponse, error) {
		return &modelv1.ListModelsResponse{Models: []*modelv1.LogicalModel{{Name: strings.Repeat("m", 33<<20)}}}, nil
	}}})
	resp, body := do(t, http.MethodGet, m.url+"/v1/models", "", nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "larger than the gateway takes") ||
		strings.Contains(string(body), "grpc:") {
		t.Fatalf("GET /v1/models with a 33 MiB answer: %d %.300s; want 502 saying the answer is too large", resp.StatusCode, body)
	}
	t.Logf("%d %.200s", resp.StatusCode, body)
}
