package grpcx_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// TestEndpoints: every target form Dial takes resolves to the servers
// behind it — a name served by a given DNS server (as a headless Service's)
// to each of its addresses, an address or another scheme to itself — and a
// name no server knows is an error, not an empty list.
func TestEndpoints(t *testing.T) {
	t.Parallel()
	dns := testkit.NewDNS(t)
	dns.Set("modelgateway.mesh.test", netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		target string
		want   []string
	}{
		{"dns://" + dns.Addr() + "/modelgateway.mesh.test:9090", []string{"127.0.0.1:9090", "127.0.0.2:9090"}},
		{"127.0.0.1:9090", []string{"127.0.0.1:9090"}},
		{"dns:///127.0.0.1:9090", []string{"127.0.0.1:9090"}},
		{"[::1]:9090", []string{"[::1]:9090"}},
		{"localhost:9090", nil}, // the system's resolver: at least one address, each with the port
		{"passthrough:///somewhere:9090", []string{"passthrough:///somewhere:9090"}},
		{"unix:///run/modelgateway.sock", []string{"unix:///run/modelgateway.sock"}},
	} {
		got, err := grpcx.Endpoints(ctx, tc.target)
		if err != nil {
			t.Errorf("Endpoints(%q): %v", tc.target, err)
			continue
		}
		if tc.want == nil {
			if len(got) == 0 || !slices.ContainsFunc(got, func(a string) bool { return a == "127.0.0.1:9090" || a == "[::1]:9090" }) {
				t.Errorf("Endpoints(%q) = %v, want the loopback address with the port", tc.target, got)
			}
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Endpoints(%q) = %v, want %v", tc.target, got, tc.want)
		}
	}
	for _, target := range []string{"dns://" + dns.Addr() + "/unknown.mesh.test:9090", "modelgateway.mesh.test", "dns://%zz/x:1"} {
		if got, err := grpcx.Endpoints(ctx, target); err == nil {
			t.Errorf("Endpoints(%q) = %v, want an error", target, got)
		}
	}
}
