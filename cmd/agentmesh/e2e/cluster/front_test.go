//go:build e2ecluster

package cluster

import (
	"io"
	"net"
	"sync"
	"time"
)

// front is the load balancer before the gateway replicas: a round-robin
// TCP proxy, one backend per client connection, skipping backends that
// refuse the connection (a killed replica), as a cloud load balancer or
// kube-proxy would. It remembers which backend serves each client
// connection, so the suite can kill the replica under a given stream.
type front struct {
	lis      net.Listener
	backends []frontBackend

	mu     sync.Mutex        // guards next and served
	next   int               // the backend the next connection tries first
	served map[string]string // client address → backend name
}

type frontBackend struct{ name, addr string }

// startFront serves on a random port of 127.0.0.1 until close.
func startFront(backends []frontBackend) (*front, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &front{lis: lis, backends: backends, served: map[string]string{}}
	go f.serve()
	return f, nil
}

// url is the base URL clients use.
func (f *front) url() string { return "http://" + f.lis.Addr().String() }

func (f *front) close() { f.lis.Close() }

// backendOf names the backend serving the client connection whose local
// address is client, "" when none does.
func (f *front) backendOf(client string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served[client]
}

func (f *front) serve() {
	for {
		c, err := f.lis.Accept()
		if err != nil {
			return
		}
		go f.proxy(c)
	}
}

func (f *front) proxy(c net.Conn) {
	defer c.Close()
	f.mu.Lock()
	first := f.next
	f.next = (f.next + 1) % len(f.backends)
	f.mu.Unlock()
	var up net.Conn
	var name string
	for i := range f.backends {
		b := f.backends[(first+i)%len(f.backends)]
		u, err := net.DialTimeout("tcp", b.addr, time.Second)
		if err == nil {
			up, name = u, b.name
			break
		}
	}
	if up == nil {
		return // no replica: the client sees the connection close
	}
	defer up.Close()
	client := c.RemoteAddr().String()
	f.mu.Lock()
	f.served[client] = name
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.served, client)
		f.mu.Unlock()
	}()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	// One side ended (HTTP clients do not half-close): when a killed
	// backend's side ends, the client must see its connection end too
	// rather than wait on a dead stream.
	c.Close()
	up.Close()
	<-done
}
