package httpgateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgateway"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgatewaytest"
)

// TestUsageSumsEveryModelGatewayReplica: GET /v1/usage through a gateway
// whose MODELGATEWAY_ADDR names two model gateway replicas (a DNS name
// with both addresses, as a headless Service has) sums the tokens each
// replica counted, not one replica's; with one replica gone it answers
// the other's counts and says one replica did not answer.
func TestUsageSumsEveryModelGatewayReplica(t *testing.T) {
	t.Parallel()
	port, listeners := sharedPortListeners(t, "127.0.0.1", "127.0.0.2")
	replicas := make([]*testkit.Running, len(listeners))
	for i, lis := range listeners {
		cfg := modelgatewaytest.Config(t, "", map[string]string{"MODELGATEWAY_PROVIDER": "sim", "METRICS_ADDR": ""})
		replicas[i] = testkit.StartService(t, fmt.Sprintf("modelgateway-%d", i+1), func(ctx context.Context, rt service.Runtime) error {
			_ = rt.Listener.Close()
			rt.Listener = lis // every replica on the same port of its own address
			return modelgateway.Run(ctx, cfg, rt)
		})
	}
	// Calls straight to each replica: 2 to the first, 3 to the second.
	for i, calls := range []int{2, 3} {
		cc, err := grpcx.Dial(net.JoinHostPort(listeners[i].Addr().(*net.TCPAddr).IP.String(), fmt.Sprint(port)))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		for range calls {
			chatOnce(t, modelv1.NewModelServiceClient(cc))
		}
		own, err := modelv1.NewModelServiceClient(cc).GetUsage(context.Background(), &modelv1.GetUsageRequest{})
		var counted int64
		for _, p := range own.GetPoints() {
			counted += p.GetCalls()
		}
		if err != nil || own.GetReplicas() != 1 || counted != int64(calls) {
			t.Fatalf("replica %d's own GetUsage = %v, %v; want its %d calls, replicas 1", i+1, own, err, calls)
		}
	}

	dns := testkit.NewDNS(t)
	dns.Set("modelgateway.mesh.test", netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
	m := startBackends(t, fakes{})
	model, err := grpcx.Dial(fmt.Sprintf("dns://%s/modelgateway.mesh.test:%d", dns.Addr(), port))
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	m.backends.Model = model
	h, err := httpgateway.Handler(&httpgateway.Config{}, m.backends, discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	defer hs.Close()

	usage := func() (calls, replicas, unanswered int) {
		t.Helper()
		resp, body := do(t, http.MethodGet, hs.URL+"/v1/usage", "", map[string]string{"X-Tenant-Id": "*"})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/usage: %d %s", resp.StatusCode, body)
		}
		var got struct {
			Replicas, ReplicasUnanswered int
			Points                       []struct {
				StartTime, LogicalModel, Provider, TenantID string
				Calls                                       int64 `json:",string"`
			}
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("GET /v1/usage: %v: %s", err, body)
		}
		seen := map[string]bool{}
		for _, p := range got.Points {
			calls += int(p.Calls)
			k := p.StartTime + " " + p.LogicalModel + " " + p.Provider + " " + p.TenantID
			if seen[k] {
				t.Errorf("GET /v1/usage: two points of %s (the replicas' counts of one bucket are one point): %s", k, body)
			}
			seen[k] = true
		}
		return calls, got.Replicas, got.ReplicasUnanswered
	}
	if calls, n, missing := usage(); calls != 5 || n != 2 || missing != 0 {
		t.Errorf("usage with both replicas: %d calls from %d replicas (%d unanswered), want 5 from 2", calls, n, missing)
	}
	// Usage is per tenant, across its projects: a project's key is refused
	// (a tenancy attack pass saw one read its tenant's other projects'
	// calls), the tenant's key is not.
	for _, tc := range []struct {
		headers map[string]string
		want    int
	}{
		{map[string]string{"X-Tenant-Id": "acme", "X-Project-Id": "alpha"}, http.StatusForbidden},
		{map[string]string{"X-Tenant-Id": "acme"}, http.StatusOK},
	} {
		if resp, body := do(t, http.MethodGet, hs.URL+"/v1/usage", "", tc.headers); resp.StatusCode != tc.want ||
			(tc.want == http.StatusForbidden && !strings.Contains(string(body), "USAGE_IS_PER_TENANT")) {
			t.Errorf("GET /v1/usage as %v: %d %s, want %d", tc.headers, resp.StatusCode, body, tc.want)
		}
	}
	replicas[1].Stop()
	if calls, n, missing := usage(); calls != 2 || n != 1 || missing != 1 {
		t.Errorf("usage with the second replica gone: %d calls from %d replicas (%d unanswered), want 2 from 1, 1 unanswered", calls, n, missing)
	}
}

// chatOnce makes one chat call that reports usage.
func chatOnce(t *testing.T, c modelv1.ModelServiceClient, opts ...grpc.CallOption) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Chat(ctx, &modelv1.ChatRequest{Model: "chat", Messages: []*modelv1.Message{{Role: modelv1.Role_ROLE_USER, Content: "hello"}}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
}

// sharedPortListeners listens on the same free port of each of ips.
func sharedPortListeners(t *testing.T, ips ...string) (int, []net.Listener) {
	t.Helper()
	for range 20 {
		first, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		out := []net.Listener{first}
		for _, ip := range ips[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
			if err != nil {
				break
			}
			out = append(out, l)
		}
		if len(out) == len(ips) {
			return port, out
		}
		for _, l := range out {
			_ = l.Close()
		}
	}
	t.Fatalf("no port free on every one of %v", ips)
	return 0, nil
}
