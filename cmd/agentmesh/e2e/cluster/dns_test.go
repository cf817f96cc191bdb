//go:build e2ecluster

package cluster

import (
	"net"
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsServer answers A queries for the mesh's service names with the
// loopback addresses of their replicas, as a Kubernetes headless Service
// answers with its pods' addresses. Services dial their peers as
// dns://<this server>/<name>:<port>, so gRPC's own DNS resolver and its
// round_robin balancer (libs/grpcx) spread calls over the replicas and
// steer around a dead one, exactly as in a cluster. Every other query gets
// an empty answer (AAAA) or NXDOMAIN.
type dnsServer struct {
	conn *net.UDPConn

	mu    sync.Mutex // guards names
	names map[string][]netip.Addr
}

// startDNS serves on a random UDP port of 127.0.0.1 until close.
func startDNS() (*dnsServer, error) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	d := &dnsServer{conn: conn, names: map[string][]netip.Addr{}}
	go d.serve()
	return d, nil
}

// addr is the server's address, the authority of a dns:// target.
func (d *dnsServer) addr() string { return d.conn.LocalAddr().String() }

// set makes name resolve to addrs.
func (d *dnsServer) set(name string, addrs ...netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.names[strings.ToLower(strings.TrimSuffix(name, "."))] = addrs
}

func (d *dnsServer) close() { d.conn.Close() }

func (d *dnsServer) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := d.conn.ReadFromUDP(buf)
		if err != nil {
			return // closed
		}
		if resp, ok := d.answer(buf[:n]); ok {
			_, _ = d.conn.WriteToUDP(resp, from)
		}
	}
}

// answer builds the response to one query message.
func (d *dnsServer) answer(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	name := strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
	d.mu.Lock()
	addrs, known := d.names[name]
	d.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, false
	}
	if err := b.Question(q); err != nil {
		return nil, false
	}
	if err := b.StartAnswers(); err != nil {
		return nil, false
	}
	if known && q.Type == dnsmessage.TypeA {
		for _, a := range addrs {
			// TTL 1 s: a resolver that caches asks again soon.
			rr := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 1}
			if err := b.AResource(rr, dnsmessage.AResource{A: a.As4()}); err != nil {
				return nil, false
			}
		}
	}
	resp, err := b.Finish()
	if err != nil {
		return nil, false
	}
	return resp, true
}
