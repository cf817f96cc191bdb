package httpgateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// TestOperatorNamesTheTenant: an operator (X-Tenant-Id: * without keys)
// acts for no tenant of its own. A tenant-scoped request that names none
// is refused saying where to name it, and one that names it in
// scope.tenantId reaches the service in that tenant.
func TestOperatorNamesTheTenant(t *testing.T) {
	t.Parallel()
	m := startMesh(t, httpgateway.Config{}, fakes{conversations: &conversationFake{
		list: func(ctx context.Context, r *orchestratorv1.ListConversationsRequest) (*orchestratorv1.ListConversationsResponse, error) {
			if _, err := grpcx.Scope(ctx, r.GetScope()); err != nil {
				return nil, err
			}
			return &orchestratorv1.ListConversationsResponse{}, nil
		},
	}})
	operator := map[string]string{"X-Tenant-Id": "*"}
	resp, body := do(t, http.MethodGet, m.url+"/v1/conversations", "", operator)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"message":"scope.tenantId: is required: an operator key`) ||
		!strings.Contains(string(body), `"field":"scope.tenantId"`) {
		t.Errorf("operator without a tenant: %d %s; want 400 saying where to name the tenant", resp.StatusCode, body)
	}
	if resp, body := do(t, http.MethodGet, m.url+"/v1/conversations?scope.tenantId=acme", "", operator); resp.StatusCode != http.StatusOK {
		t.Errorf("operator naming scope.tenantId: %d %s; want 200", resp.StatusCode, body)
	}
	// Without the header: the default tenant, as before.
	if resp, body := do(t, http.MethodGet, m.url+"/v1/conversations", "", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("default tenant: %d %s", resp.StatusCode, body)
	}
}
