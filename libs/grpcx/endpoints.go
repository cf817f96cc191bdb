package grpcx

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
)

// Endpoints resolves target, as Dial takes it, to the address of every
// server behind it, each a target for Dial: a DNS name ("host:port",
// "dns:///host:port", "dns://resolver/host:port") to one address per A or
// AAAA record — a Kubernetes headless Service to each of its pods, the
// servers gRPC's dns resolver and round_robin balancer spread calls over.
// An IP address, and a target of any other scheme (passthrough, unix),
// is its own one endpoint. Use it to ask each replica of a service for
// what only that replica knows; calls that any replica can serve go
// through the balanced connection of Dial.
func Endpoints(ctx context.Context, target string) ([]string, error) {
	endpoint, resolver := target, net.DefaultResolver
	switch {
	case strings.HasPrefix(target, "dns:"):
		u, err := url.Parse(target)
		if err != nil {
			return nil, fmt.Errorf("grpcx: endpoints of %s: %w", target, err)
		}
		endpoint = strings.TrimPrefix(u.Path, "/")
		if u.Host != "" {
			resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, u.Host)
			}}
		}
	case strings.Contains(target, "://"), strings.HasPrefix(target, "unix:"):
		return []string{target}, nil
	}
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		return nil, fmt.Errorf("grpcx: endpoints of %s: %w", target, err)
	}
	if net.ParseIP(host) != nil {
		return []string{endpoint}, nil
	}
	addrs, err := resolver.LookupHost(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("grpcx: endpoints of %s: %w", target, err)
	}
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, net.JoinHostPort(a, port))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
