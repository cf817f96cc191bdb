package testkit

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Cutter forwards TCP connections to a server and, on Cut, closes the
// connections open at that moment, as the death of the server's process
// would: a client sees its calls in flight fail with a lost connection and
// dials again (through the cutter) for the next ones.
type Cutter struct {
	addr string

	mu    sync.Mutex
	conns []net.Conn // guarded by mu
}

// StartCutter listens on a loopback port forwarding to addr and returns the
// address to dial instead; it stops and cuts everything in t.Cleanup.
func StartCutter(t testing.TB, addr string) (string, *Cutter) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	c := &Cutter{addr: addr}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				_ = in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
	t.Cleanup(c.Cut)
	return ln.Addr().String(), c
}

// Cut closes every connection open now.
func (c *Cutter) Cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}
