package upstream_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/upstream"
)

// newServer starts an httptest server that counts the connections it
// accepts.
func newServer(t *testing.T, h http.HandlerFunc, useTLS bool) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	if useTLS {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, &conns
}

// rawServer serves each accepted connection with serve, then closes it,
// and counts the connections.
func rawServer(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			wg.Go(func() {
				defer c.Close()
				serve(c, bufio.NewReader(c))
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return "http://" + ln.Addr().String(), &conns
}

// readRequest reads one request and its body from br.
func readRequest(br *bufio.Reader) error {
	req, err := http.ReadRequest(br)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, req.Body)
	return err
}

func send(t *testing.T, tr *upstream.H1Transport, ctx context.Context, method, url string, body []byte) (*http.Response, error) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	return tr.RoundTrip(req)
}

// fetch sends a request that must succeed and returns the body, read to
// its end (the connection goes back to the pool there, before Close).
func fetch(t *testing.T, tr *upstream.H1Transport, method, url string, body []byte) (*http.Response, string) {
	t.Helper()
	resp, err := send(t, tr, context.Background(), method, url, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp, string(b)
}

func newTransport(t *testing.T) *upstream.H1Transport {
	tr := upstream.NewH1Transport(time.Second, 4)
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func TestH1KeepAliveReuse(t *testing.T) {
	t.Parallel()
	srv, conns := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if ua, ae := r.Header.Get("User-Agent"), r.Header.Get("Accept-Encoding"); ua != "agentmesh-modelgateway" || ae != "" {
			http.Error(w, fmt.Sprintf("User-Agent %q, Accept-Encoding %q", ua, ae), http.StatusBadRequest)
			return
		}
		b, _ := io.ReadAll(r.Body)
		if r.ContentLength != int64(len(b)) {
			http.Error(w, fmt.Sprintf("Content-Length %d, body %d bytes", r.ContentLength, len(b)), http.StatusBadRequest)
			return
		}
		_, _ = w.Write(b)
	}, false)
	tr := newTransport(t)
	for i := range 20 {
		want := fmt.Sprintf(`{"n":%d}`, i)
		resp, got := fetch(t, tr, http.MethodPost, srv.URL+"/echo", []byte(want))
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || got != want {
			t.Fatalf("request %d: %s %q, want 200 %q", i, resp.Status, got, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 sequential requests opened %d connections, want 1", n)
	}
}

func TestH1ContentLengthBody(t *testing.T) {
	t.Parallel()
	srv, conns := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "11")
		w.Header()["x-custom-thing"] = []string{"v"}
		_, _ = io.WriteString(w, "hello world")
	}, false)
	tr := newTransport(t)
	resp, body := fetch(t, tr, http.MethodGet, srv.URL, nil)
	_ = resp.Body.Close()
	if resp.Status != "200 OK" || resp.Proto != "HTTP/1.1" || resp.ContentLength != 11 || body != "hello world" {
		t.Errorf("got %s %s, ContentLength %d, body %q", resp.Proto, resp.Status, resp.ContentLength, body)
	}
	if got := resp.Header["X-Custom-Thing"]; len(got) != 1 || got[0] != "v" {
		t.Errorf("header keys not canonical: %v", resp.Header)
	}
	// A HEAD response has no body whatever its Content-Length says; the
	// connection stays usable.
	resp, body = fetch(t, tr, http.MethodHead, srv.URL, nil)
	_ = resp.Body.Close()
	if body != "" || resp.ContentLength != 11 {
		t.Errorf("HEAD: ContentLength %d, body %q", resp.ContentLength, body)
	}
	_, body = fetch(t, tr, http.MethodGet, srv.URL, nil)
	if body != "hello world" {
		t.Errorf("GET after HEAD: body %q", body)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

func TestH1ChunkedStreaming(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var watchdog atomic.Bool
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		<-release
		for _, ev := range []string{"data: two\n\n", "data: [DONE]\n\n"} {
			time.Sleep(10 * time.Millisecond)
			_, _ = io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	}, false)
	// If the transport buffered the body, the first Read would wait for
	// the handler, which waits for us: release it after a while, noting it.
	timer := time.AfterFunc(2*time.Second, func() {
		watchdog.Store(true)
		close(release)
	})
	tr := newTransport(t)
	resp, err := send(t, tr, context.Background(), http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ContentLength != -1 || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Errorf("ContentLength %d, TransferEncoding %v", resp.ContentLength, resp.TransferEncoding)
	}
	first := make([]byte, len("data: one\n\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	if watchdog.Load() {
		t.Fatal("the first event arrived only after the handler went on: the body was buffered")
	}
	if timer.Stop() {
		close(release)
	}
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(first) + string(rest); got != "data: one\n\ndata: two\n\ndata: [DONE]\n\n" {
		t.Errorf("stream %q", got)
	}
}

func TestH1ReuseAfterChunkedEOF(t *testing.T) {
	t.Parallel()
	srv, conns := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Done")
		for i := range 3 {
			_, _ = fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
		}
		w.Header().Set("X-Done", "yes")
	}, false)
	tr := newTransport(t)
	for i := range 5 {
		// Read to io.EOF without Close: the connection must already be
		// back in the pool for the next request.
		resp, body := fetch(t, tr, http.MethodGet, srv.URL, nil)
		if resp.ContentLength != -1 || body != "data: 0\n\ndata: 1\n\ndata: 2\n\n" {
			t.Fatalf("request %d: ContentLength %d, body %q", i, resp.ContentLength, body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 chunked responses read to EOF opened %d connections, want 1", n)
	}
}

func TestH1ConnectionCloseNotReused(t *testing.T) {
	t.Parallel()
	srv, conns := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "bye")
	}, false)
	tr := newTransport(t)
	for i := range 3 {
		resp, body := fetch(t, tr, http.MethodGet, srv.URL, nil)
		if !resp.Close || body != "bye" {
			t.Fatalf("request %d: Close %v, body %q", i, resp.Close, body)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("3 Connection: close responses used %d connections, want 3", n)
	}
}

func TestH1StaleIdleConnRetried(t *testing.T) {
	t.Parallel()
	// The server promises keep-alive, then closes the connection after
	// one response, as a server's idle timeout does.
	closed := make(chan struct{}, 2)
	url, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		defer func() { closed <- struct{}{} }()
		if readRequest(br) != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok")
	})
	tr := newTransport(t)
	if _, body := fetch(t, tr, http.MethodPost, url, []byte(`{"a":1}`)); body != "ok" {
		t.Fatalf("first body %q", body)
	}
	<-closed
	if _, body := fetch(t, tr, http.MethodPost, url, []byte(`{"a":2}`)); body != "ok" {
		t.Fatalf("second body %q", body)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

func TestH1FreshConnNotRetried(t *testing.T) {
	t.Parallel()
	url, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) { _ = readRequest(br) })
	tr := newTransport(t)
	if resp, err := send(t, tr, context.Background(), http.MethodPost, url, []byte(`{}`)); err == nil {
		_ = resp.Body.Close()
		t.Fatal("no error from a server that closed without answering")
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1: a fresh connection must not be retried", n)
	}
}

func TestH1CancelWaitingForHeaders(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		// With the body read, the server notices the client going away.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}, false)
	tr := newTransport(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	resp, err := send(t, tr, ctx, http.MethodPost, srv.URL, []byte(`{}`))
	elapsed := time.Since(start)
	if err == nil {
		_ = resp.Body.Close()
		t.Fatal("no error")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if elapsed > 500*time.Millisecond {
		t.Errorf("returned %v after the start, cancelled at 50ms", elapsed)
	}
}

// blockedBody starts a stream whose handler sends one event and then waits
// for the client to go away, reporting it on the returned channel.
func blockedBody(t *testing.T, ctx context.Context) (*http.Response, <-chan struct{}) {
	t.Helper()
	gone := make(chan struct{})
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			close(gone)
		case <-time.After(5 * time.Second):
		}
	}, false)
	tr := newTransport(t)
	resp, err := send(t, tr, ctx, http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("data: one\n\n"))
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	return resp, gone
}

func waitClosed(t *testing.T, gone <-chan struct{}) {
	t.Helper()
	select {
	case <-gone:
	case <-time.After(2 * time.Second):
		t.Error("the server did not see its connection closed")
	}
}

func TestH1CancelMidBody(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, gone := blockedBody(t, ctx)
	defer resp.Body.Close()
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := resp.Body.Read(make([]byte, 64))
	if elapsed := time.Since(start); elapsed > 500*time.Millisecond {
		t.Errorf("Read returned %v after the start, cancelled at 50ms", elapsed)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Read error %v, want context.Canceled", err)
	}
	if _, err := resp.Body.Read(make([]byte, 64)); !errors.Is(err, context.Canceled) {
		t.Errorf("Read after cancellation: %v, want context.Canceled", err)
	}
	waitClosed(t, gone)
}

func TestH1CloseUnblocksRead(t *testing.T) {
	t.Parallel()
	resp, gone := blockedBody(t, context.Background())
	time.AfterFunc(50*time.Millisecond, func() { _ = resp.Body.Close() })
	start := time.Now()
	_, err := resp.Body.Read(make([]byte, 64))
	if elapsed := time.Since(start); elapsed > 500*time.Millisecond {
		t.Errorf("Read returned %v after the start, closed at 50ms", elapsed)
	}
	if err == nil || err == io.EOF {
		t.Errorf("Read error %v after Close", err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	waitClosed(t, gone)
}

func TestH1TLS(t *testing.T) {
	t.Parallel()
	srv, conns := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "%s tls=%v", r.Proto, r.TLS != nil)
	}, true)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	tr := newTransport(t)
	tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	for i := range 3 {
		if _, body := fetch(t, tr, http.MethodGet, srv.URL, nil); body != "HTTP/1.1 tls=true" {
			t.Fatalf("request %d: body %q", i, body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

func TestH1ProxyDelegation(t *testing.T) {
	t.Parallel()
	proxy, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "via proxy: "+r.RequestURI)
	}, false)
	proxyURL, err := url.Parse(proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr := newTransport(t)
	tr.Proxy = func(*http.Request) (*url.URL, error) { return proxyURL, nil }
	const target = "http://provider.invalid/v1/models?page=2"
	if _, body := fetch(t, tr, http.MethodGet, target, nil); body != "via proxy: "+target {
		t.Errorf("body %q, want the proxy to see the absolute URI %s", body, target)
	}
}

func TestH1LargeRequestBody(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		_, _ = fmt.Fprintf(w, "%d %d %x", r.ContentLength, n, h.Sum(nil))
	}, false)
	body := make([]byte, 1<<20)
	_, _ = rand.Read(body)
	sum := sha256.Sum256(body)
	want := fmt.Sprintf("%d %d %s", len(body), len(body), hex.EncodeToString(sum[:]))
	tr := newTransport(t)
	if _, got := fetch(t, tr, http.MethodPost, srv.URL, body); got != want {
		t.Errorf("server got %q, want %q", got, want)
	}
}

func TestH1RawResponses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, reply string
		bad         bool   // RoundTrip must fail
		body        string // the body of a valid response
		readErr     error  // the error reading the body ends with, if not io.EOF
	}{
		{name: "interim 100 skipped", reply: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", body: "ok"},
		{name: "HTTP/1.0 until close", reply: "HTTP/1.0 200 OK\r\n\r\nuntil close", body: "until close"},
		{name: "204 without body", reply: "HTTP/1.1 204 No Content\r\n\r\n"},
		{name: "truncated body", reply: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", body: "abc", readErr: io.ErrUnexpectedEOF},
		{name: "no status code", bad: true, reply: "HTTP/1.1 OK\r\n\r\n"},
		{name: "not HTTP", bad: true, reply: "SSH-2.0-OpenSSH_9.6\r\n\r\n"},
		{name: "HTTP/2 status line", bad: true, reply: "HTTP/2.0 200 OK\r\n\r\n"},
		{name: "header without colon", bad: true, reply: "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"},
		{name: "negative Content-Length", bad: true, reply: "HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n"},
		{name: "conflicting Content-Length", bad: true, reply: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"},
		{name: "gzip transfer coding", bad: true, reply: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"},
		{name: "101 Switching Protocols", bad: true, reply: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
				if readRequest(br) == nil {
					_, _ = io.WriteString(c, tc.reply)
				}
			})
			resp, err := send(t, newTransport(t), context.Background(), http.MethodGet, url, nil)
			if tc.bad {
				if err == nil {
					_ = resp.Body.Close()
					t.Fatal("no error for a malformed response")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if string(b) != tc.body || !errors.Is(err, tc.readErr) {
				t.Errorf("body %q, error %v; want %q, %v", b, err, tc.body, tc.readErr)
			}
		})
	}
}

// TestH1IdleConnectionsSwept: connections left idle past IdleTimeout are
// closed without another request coming; the surplus a burst left behind
// goes too while a steady trickle keeps one connection alive.
func TestH1IdleConnectionsSwept(t *testing.T) {
	t.Parallel()
	var open atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	tr := upstream.NewH1Transport(time.Second, 8)
	tr.IdleTimeout = 300 * time.Millisecond
	t.Cleanup(tr.CloseIdleConnections)

	// A burst of four concurrent calls leaves four idle connections.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { fetch(t, tr, http.MethodGet, srv.URL+"/slow", nil) })
	}
	waitFor(t, func() bool { return open.Load() == 4 })
	close(release)
	wg.Wait()

	// A trickle of sequential calls reuses the most recent connection.
	deadline := time.Now().Add(900 * time.Millisecond)
	for time.Now().Before(deadline) {
		fetch(t, tr, http.MethodGet, srv.URL+"/fast", nil)
		time.Sleep(50 * time.Millisecond)
	}
	if n := open.Load(); n != 1 {
		t.Fatalf("%d connections open after the burst aged out, want the one in use", n)
	}
	// Then silence: the last one goes too.
	waitFor(t, func() bool { return open.Load() == 0 })
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 5 s")
}
