package testkit

import (
	"context"
	"net"
	"net/netip"
	"sort"
	"testing"
	"time"
)

func TestDNSAnswersWithEveryReplica(t *testing.T) {
	d, err := StartDNS()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.Set("svc.mesh.test", netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
	// As gRPC's DNS resolver asks a dns://authority/ server.
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, d.Addr())
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := r.LookupHost(ctx, "svc.mesh.test")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(addrs)
	if len(addrs) != 2 || addrs[0] != "127.0.0.1" || addrs[1] != "127.0.0.2" {
		t.Errorf("svc.mesh.test = %v, want both replicas", addrs)
	}
	if addrs, err := r.LookupHost(ctx, "other.mesh.test"); err == nil {
		t.Errorf("an unknown name resolved to %v", addrs)
	}
}
