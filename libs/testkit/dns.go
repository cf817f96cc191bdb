package testkit

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// NewDNS starts a DNS server (see DNS) and closes it in t.Cleanup.
func NewDNS(t testing.TB) *DNS {
	t.Helper()
	d, err := StartDNS()
	if err != nil {
		t.Fatalf("testkit.NewDNS: %v", err)
	}
	t.Cleanup(d.Close)
	return d
}

// DNS answers A queries for the names it is given with their addresses,
// as a Kubernetes headless Service answers with its pods' addresses: a
// process dialing dns://<DNS.Addr>/<name>:<port> gets every replica of
// name, so gRPC's own DNS resolver and its round_robin balancer
// (libs/grpcx) spread calls over the replicas and steer around a dead one,
// exactly as in a cluster. Every other query gets an empty answer (AAAA)
// or NXDOMAIN.
type DNS struct {
	conn *net.UDPConn

	mu    sync.Mutex // guards names
	names map[string][]netip.Addr
}

// StartDNS serves on a random UDP port of 127.0.0.1 until Close.
func StartDNS() (*DNS, error) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	d := &DNS{conn: conn, names: map[string][]netip.Addr{}}
	go d.serve()
	return d, nil
}

// Addr is the server's address, the authority of a dns:// target.
func (d *DNS) Addr() string { return d.conn.LocalAddr().String() }

// Set makes name resolve to addrs.
func (d *DNS) Set(name string, addrs ...netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.names[strings.ToLower(strings.TrimSuffix(name, "."))] = addrs
}

// Close stops the server.
func (d *DNS) Close() { d.conn.Close() }

func (d *DNS) serve() {
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
func (d *DNS) answer(query []byte) ([]byte, bool) {
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
