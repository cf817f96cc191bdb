package upstream

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// H1Transport is a lean HTTP/1.1 client transport that does the whole
// exchange in the caller's goroutine: take an idle connection (or dial one),
// write the request, parse the response head, and hand back a body that
// returns the connection to the pool when read to its end.
//
// net/http's Transport runs a read and a write goroutine per connection and
// passes every request and response between them and the caller over
// channels; at a few thousand requests a second those wake-ups and its
// allocations cost about a quarter of the gateway's CPU. Provider APIs all
// speak HTTP/1.1, so the gateway needs none of what that machinery buys.
//
// Requests through a proxy, and URLs that are not plain http or https, go
// to a net/http Transport instead.
type H1Transport struct {
	// Proxy returns the proxy for a request, as http.Transport.Proxy does;
	// a request with a proxy goes through net/http's Transport. It is
	// http.ProxyFromEnvironment after NewH1Transport; nil means no proxy.
	Proxy func(*http.Request) (*url.URL, error)
	// TLSClientConfig is the TLS configuration for https connections,
	// cloned for each; nil uses the defaults.
	TLSClientConfig *tls.Config
	// IdleTimeout is how long a connection may wait in the pool before it
	// is closed; 90 s after NewH1Transport. Set it before first use.
	IdleTimeout time.Duration

	connectTimeout time.Duration
	maxIdle        int
	dialer         net.Dialer

	mu       sync.Mutex
	idle     map[connKey][]*h1Conn // per host, oldest first
	sweeper  *time.Timer           // armed while idle holds connections
	fallback *http.Transport       // built on first use
}

// connKey names the connections that can carry a request: same scheme,
// same host as written in the URL.
type connKey struct {
	https bool
	host  string
}

const (
	// defaultIdleTimeout is how long an idle connection may wait in the
	// pool, as net/http's default transport has it.
	defaultIdleTimeout = 90 * time.Second
	// readBufSize sizes each connection's read buffer.
	readBufSize = 16 << 10
	// maxHeadBytes bounds a response head, so a broken server cannot make
	// us buffer without end.
	maxHeadBytes = 1 << 20
	// oneWriteBody is the largest body copied behind the head so the
	// request goes out in one write; larger ones are a second write.
	oneWriteBody = 64 << 10
	// maxPooledBuf is the largest request buffer kept for reuse.
	maxPooledBuf = 256 << 10
	// defaultUserAgent is sent when the request sets none.
	defaultUserAgent = "agentmesh-modelgateway"
)

var (
	errBodyClosed   = errors.New("upstream: read on closed response body")
	errHeadTooLarge = fmt.Errorf("response head larger than %d bytes", maxHeadBytes)
)

// NewH1Transport returns a transport that dials with connectTimeout (which
// also bounds the TLS handshake; zero means no limit) and keeps up to
// maxIdlePerHost idle connections per host (2 if maxIdlePerHost <= 0).
func NewH1Transport(connectTimeout time.Duration, maxIdlePerHost int) *H1Transport {
	if maxIdlePerHost <= 0 {
		maxIdlePerHost = 2
	}
	return &H1Transport{
		Proxy:          http.ProxyFromEnvironment,
		IdleTimeout:    defaultIdleTimeout,
		connectTimeout: connectTimeout,
		maxIdle:        maxIdlePerHost,
		dialer:         net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second},
		idle:           map[connKey][]*h1Conn{},
	}
}

// RoundTrip implements http.RoundTripper.
func (t *H1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.Host == "" || (req.URL.Scheme != "http" && req.URL.Scheme != "https") {
		return t.fallbackTransport().RoundTrip(req)
	}
	if t.Proxy != nil {
		proxy, err := t.Proxy(req)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		if proxy != nil {
			return t.fallbackTransport().RoundTrip(req)
		}
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		closeBody(req)
		return nil, err
	}
	rb := reqBufs.Get().(*reqBuf)
	defer rb.free()
	if err := rb.encode(req); err != nil {
		return nil, err
	}
	key := connKey{https: req.URL.Scheme == "https", host: req.URL.Host}
	c := t.get(key)
	reused := c != nil
	if !reused {
		var err error
		if c, err = t.dial(ctx, key, req.URL); err != nil {
			return nil, ctxErr(ctx, err)
		}
	}
	resp, err := t.exchange(c, req, rb)
	if err != nil && reused && c.nread == 0 && ctx.Err() == nil && stale(err) {
		// The server closed the idle connection (uvicorn does after 5 s)
		// before reading the request: send it again, once, on a new one.
		if c, err = t.dial(ctx, key, req.URL); err == nil {
			resp, err = t.exchange(c, req, rb)
		}
	}
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	return resp, nil
}

// stale reports whether err is what a request on a keep-alive connection
// that the server had already closed meets.
func stale(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// ctxErr returns the context's error in place of err once ctx is done, so
// callers see why the request ended (and context.Cause classifies it)
// rather than a deadline error on the connection.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

// closeBody closes the request body, as RoundTrip must on every path.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// exchange sends the encoded request on c and reads the response head. From
// here until the body is done, cancelling the request's context poisons c
// with a past deadline, which unblocks any write or read on it at once.
func (t *H1Transport) exchange(c *h1Conn, req *http.Request, rb *reqBuf) (*http.Response, error) {
	ctx := req.Context()
	stop := context.AfterFunc(ctx, c.interrupt)
	c.nread = 0
	var (
		resp    *http.Response
		chunked bool
		n       int64
	)
	err := rb.writeTo(c.conn)
	if err != nil {
		err = fmt.Errorf("upstream: writing request: %w", err)
	} else if resp, err = c.readHead(req); err == nil {
		chunked, n, err = framing(resp.Header)
	}
	if err != nil {
		stop()
		c.close()
		return nil, err
	}
	reuse := !rb.close && keepAlive(resp)
	resp.ContentLength = n
	switch {
	case resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified:
		resp.ContentLength = 0
		fallthrough
	case req.Method == http.MethodHead || n == 0:
		resp.Close = !reuse
		resp.Body = http.NoBody
		t.release(c, stop, reuse)
		return resp, nil
	case chunked:
		resp.TransferEncoding = []string{"chunked"}
	case n < 0:
		// The body ends when the server closes the connection.
		reuse = false
	}
	resp.Close = !reuse
	b := &h1Body{t: t, c: c, ctx: ctx, stop: stop, remain: n, reuse: reuse}
	if chunked {
		b.chunked = httputil.NewChunkedReader(c.br)
	}
	resp.Body = b
	return resp, nil
}

// framing reads how the response body is delimited: chunked, by a
// Content-Length n, or (n = -1) by the server closing the connection.
func framing(h http.Header) (chunked bool, n int64, err error) {
	if te := h["Transfer-Encoding"]; len(te) > 0 {
		if len(te) != 1 || !strings.EqualFold(strings.TrimSpace(te[0]), "chunked") {
			return false, 0, fmt.Errorf("upstream: unsupported Transfer-Encoding %q", te)
		}
		return true, -1, nil
	}
	cl := h["Content-Length"]
	if len(cl) == 0 {
		return false, -1, nil
	}
	v := strings.TrimSpace(cl[0])
	for _, w := range cl[1:] {
		if strings.TrimSpace(w) != v {
			return false, 0, fmt.Errorf("upstream: conflicting Content-Length headers %q", cl)
		}
	}
	u, err := strconv.ParseUint(v, 10, 63)
	if err != nil {
		return false, 0, fmt.Errorf("upstream: bad Content-Length %q", v)
	}
	return false, int64(u), nil
}

// keepAlive reports whether the response lets the connection carry
// another request.
func keepAlive(resp *http.Response) bool {
	conn := resp.Header["Connection"]
	if hasToken(conn, "close") {
		return false
	}
	return resp.ProtoMinor >= 1 || hasToken(conn, "keep-alive")
}

// hasToken reports whether the comma-separated header values hold token.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for v != "" {
			var t string
			t, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// release ends the exchange on c: back to the pool if reuse and the
// context did not fire (it may have left a past deadline on c), closed
// otherwise.
func (t *H1Transport) release(c *h1Conn, stop func() bool, reuse bool) {
	if !stop() {
		reuse = false
	}
	// Bytes past the end of the response mean a confused server.
	if reuse && c.br.Buffered() == 0 {
		t.put(c)
		return
	}
	c.close()
}

// get takes the most recently used idle connection for key, or returns nil.
func (t *H1Transport) get(key connKey) *h1Conn {
	now := time.Now()
	var c *h1Conn
	var expired []*h1Conn
	t.mu.Lock()
	list := t.idle[key]
	if n := len(list); n > 0 && now.Sub(list[n-1].idleAt) < t.IdleTimeout {
		c = list[n-1]
		list[n-1] = nil
		t.idle[key] = list[:n-1]
	} else if n > 0 {
		// The most recent one is too old, so all of them are.
		expired = list
		delete(t.idle, key)
	}
	t.mu.Unlock()
	for _, e := range expired {
		e.close()
	}
	return c
}

// put returns c to the pool, closing the oldest idle connection for its
// host if the pool is full.
func (t *H1Transport) put(c *h1Conn) {
	var evict *h1Conn
	t.mu.Lock()
	c.idleAt = time.Now() // under the lock, so each list stays in age order
	list := t.idle[c.key]
	if len(list) >= t.maxIdle {
		evict = list[0]
		list = append(list[:0], list[1:]...)
	}
	t.idle[c.key] = append(list, c)
	if t.sweeper == nil {
		t.sweeper = time.AfterFunc(t.IdleTimeout, t.sweep)
	}
	t.mu.Unlock()
	if evict != nil {
		evict.close()
	}
}

// sweep closes the connections idle for longer than IdleTimeout, so a
// provider that goes quiet, or the surplus left after a burst (the pool
// hands out the most recent first, the rest only age), does not hold
// sockets open. It re-arms itself for the next expiry while any remain.
func (t *H1Transport) sweep() {
	now := time.Now()
	var expired []*h1Conn
	var next time.Duration
	t.mu.Lock()
	for key, list := range t.idle {
		i := 0
		for i < len(list) && now.Sub(list[i].idleAt) >= t.IdleTimeout {
			i++
		}
		expired = append(expired, list[:i]...)
		if i == len(list) {
			delete(t.idle, key)
			continue
		}
		clear(list[:i])
		t.idle[key] = append(list[:0], list[i:]...)
		if d := t.IdleTimeout - now.Sub(list[0].idleAt); next == 0 || d < next {
			next = d
		}
	}
	if len(t.idle) == 0 {
		t.sweeper = nil
	} else {
		t.sweeper.Reset(next)
	}
	t.mu.Unlock()
	for _, c := range expired {
		c.close()
	}
}

// CloseIdleConnections closes the pooled connections. Connections in use
// are not affected.
func (t *H1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[connKey][]*h1Conn{}
	if t.sweeper != nil {
		t.sweeper.Stop()
		t.sweeper = nil
	}
	fallback := t.fallback
	t.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			c.close()
		}
	}
	if fallback != nil {
		fallback.CloseIdleConnections()
	}
}

// fallbackTransport returns the net/http Transport for the requests
// H1Transport does not send itself, built on first use so that it sees the
// fields set after NewH1Transport.
func (t *H1Transport) fallbackTransport() *http.Transport {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fallback == nil {
		t.fallback = &http.Transport{
			Proxy:                 t.Proxy,
			DialContext:           t.dialer.DialContext,
			TLSClientConfig:       t.TLSClientConfig.Clone(),
			TLSHandshakeTimeout:   t.connectTimeout,
			MaxIdleConns:          t.maxIdle * 2,
			MaxIdleConnsPerHost:   t.maxIdle,
			IdleConnTimeout:       t.IdleTimeout,
			ExpectContinueTimeout: time.Second,
			ForceAttemptHTTP2:     true,
		}
	}
	return t.fallback
}

// dial opens a new connection for key, with TLS for https.
func (t *H1Transport) dial(ctx context.Context, key connKey, u *url.URL) (*h1Conn, error) {
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
		if key.https {
			port = "443"
		}
	}
	conn, err := t.dialer.DialContext(ctx, "tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, err
	}
	if key.https {
		cfg := &tls.Config{}
		if t.TLSClientConfig != nil {
			cfg = t.TLSClientConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = host
		}
		cfg.NextProtos = []string{"http/1.1"}
		hctx := ctx
		if t.connectTimeout > 0 {
			var cancel context.CancelFunc
			hctx, cancel = context.WithTimeout(ctx, t.connectTimeout)
			defer cancel()
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("upstream: TLS handshake with %s: %w", host, err)
		}
		conn = tc
	}
	c := &h1Conn{conn: conn, key: key}
	c.br = bufio.NewReaderSize(c, readBufSize)
	c.tp.R = c.br
	return c, nil
}

// h1Conn is one connection with its read buffer, which stays with it in
// the pool: bytes the buffer holds belong to the connection's next
// response.
type h1Conn struct {
	conn   net.Conn
	br     *bufio.Reader    // reads from the connection through Read
	tp     textproto.Reader // parses response heads from br
	key    connKey
	idleAt time.Time // when it went back to the pool
	nread  int64     // bytes received since the current request was sent
	inHead bool      // a response head is being read: maxHeadBytes applies
}

// Read feeds br from the connection, counting the bytes of the current
// response so a failure can tell whether the server answered at all.
func (c *h1Conn) Read(p []byte) (int, error) {
	if c.inHead && c.nread >= maxHeadBytes {
		return 0, errHeadTooLarge
	}
	n, err := c.conn.Read(p)
	c.nread += int64(n)
	return n, err
}

// interrupt makes every blocked and future read and write on c fail at
// once; c is then closed, never reused.
func (c *h1Conn) interrupt() { _ = c.conn.SetDeadline(time.Unix(1, 0)) }

func (c *h1Conn) close() { _ = c.conn.Close() }

// readHead reads the response head for req, skipping interim (1xx)
// responses.
func (c *h1Conn) readHead(req *http.Request) (*http.Response, error) {
	c.inHead = true
	resp, err := c.readHeads(req)
	c.inHead = false
	if err != nil {
		return nil, fmt.Errorf("upstream: reading response head: %w", err)
	}
	return resp, nil
}

// readHeads is readHead without the error context.
func (c *h1Conn) readHeads(req *http.Request) (*http.Response, error) {
	for {
		line, err := c.tp.ReadLine()
		if err != nil {
			return nil, err
		}
		resp, err := parseStatusLine(line)
		if err != nil {
			return nil, err
		}
		h, err := c.tp.ReadMIMEHeader()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errors.New("unexpected 101 Switching Protocols")
		case resp.StatusCode < 200:
			continue
		}
		resp.Header = http.Header(h)
		resp.Request = req
		return resp, nil
	}
}

// parseStatusLine parses "HTTP/1.x NNN reason".
func parseStatusLine(line string) (*http.Response, error) {
	proto, status, ok := strings.Cut(line, " ")
	major, minor, vok := http.ParseHTTPVersion(proto)
	status = strings.TrimLeft(status, " ")
	code, _, _ := strings.Cut(status, " ")
	n, err := strconv.Atoi(code)
	if !ok || !vok || major != 1 || len(code) != 3 || err != nil || n < 100 {
		return nil, fmt.Errorf("malformed status line %q", line[:min(len(line), 80)])
	}
	return &http.Response{Status: status, StatusCode: n, Proto: proto, ProtoMajor: major, ProtoMinor: minor}, nil
}

// skipTrailer reads the trailer after the last chunk up to its empty line,
// so the connection's next response starts at the right byte.
func (c *h1Conn) skipTrailer() error {
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
}

// h1Body is a response body. Read at the end of the body returns the
// connection to the pool before it returns io.EOF; Close before the end
// closes the connection, and may be called from another goroutine to
// unblock a Read.
type h1Body struct {
	t       *H1Transport
	c       *h1Conn
	ctx     context.Context
	stop    func() bool
	chunked io.Reader // chunked decoder, or nil
	remain  int64     // unread bytes of a Content-Length body; -1 without one
	reuse   bool      // the connection may carry another request after the body

	mu  sync.Mutex
	err error // once the body is done: io.EOF, the failure, or errBodyClosed
}

func (b *h1Body) Read(p []byte) (int, error) {
	b.mu.Lock()
	err := b.err
	b.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if err := b.ctx.Err(); err != nil {
		return 0, b.finish(err)
	}
	n, err := b.read(p)
	if err != nil {
		if err != io.EOF {
			err = ctxErr(b.ctx, err)
		}
		err = b.finish(err)
	}
	return n, err
}

func (b *h1Body) read(p []byte) (int, error) {
	switch {
	case b.chunked != nil:
		n, err := b.chunked.Read(p)
		if err == io.EOF {
			if err = b.c.skipTrailer(); err == nil {
				err = io.EOF
			}
		}
		return n, err
	case b.remain >= 0:
		if b.remain == 0 {
			return 0, io.EOF
		}
		if int64(len(p)) > b.remain {
			p = p[:b.remain]
		}
		n, err := b.c.br.Read(p)
		b.remain -= int64(n)
		if b.remain == 0 {
			return n, io.EOF
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return n, err
	default:
		return b.c.br.Read(p)
	}
}

// finish ends the body with err (io.EOF at its end) and releases the
// connection, unless Close got there first; it returns what Read reports.
func (b *h1Body) finish(err error) error {
	b.mu.Lock()
	if b.err != nil {
		err = b.err
		b.mu.Unlock()
		return err
	}
	b.err = err
	b.mu.Unlock()
	b.t.release(b.c, b.stop, err == io.EOF && b.reuse)
	return err
}

// Close closes the connection unless the body was read to its end. It is
// safe to call more than once, and while a Read is blocked.
// ended reports whether the body is done: read to its end, failed or
// closed.
func (b *h1Body) ended() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err != nil
}

func (b *h1Body) Close() error {
	_ = b.finish(errBodyClosed)
	return nil
}

// reqBuf holds one encoded request. It is kept until the response head is
// in, so that a request that met a stale connection can be sent again.
type reqBuf struct {
	head  bytes.Buffer // request line, header fields and a small body
	body  bytes.Buffer // a body too large to copy into head
	close bool         // the request asked for Connection: close
}

var reqBufs = sync.Pool{New: func() any { return new(reqBuf) }}

// free returns b to the pool unless it grew too large to keep.
func (b *reqBuf) free() {
	if b.head.Cap() > maxPooledBuf || b.body.Cap() > maxPooledBuf {
		return
	}
	b.head.Reset()
	b.body.Reset()
	b.close = false
	reqBufs.Put(b)
}

// encode reads and closes req.Body and encodes the request. The body is
// always small JSON here, so it is sent with a Content-Length.
func (b *reqBuf) encode(req *http.Request) error {
	if req.Body != nil && req.Body != http.NoBody {
		_, err := b.body.ReadFrom(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return fmt.Errorf("upstream: reading request body: %w", err)
		}
		if req.ContentLength > 0 && int64(b.body.Len()) != req.ContentLength {
			return fmt.Errorf("upstream: request ContentLength %d but body has %d bytes", req.ContentLength, b.body.Len())
		}
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !validToken(method) {
		return fmt.Errorf("upstream: invalid method %q", method)
	}
	if !validValue(host) {
		return fmt.Errorf("upstream: invalid host %q", host)
	}
	h := &b.head
	h.WriteString(method)
	h.WriteByte(' ')
	h.WriteString(req.URL.RequestURI())
	h.WriteString(" HTTP/1.1\r\nHost: ")
	h.WriteString(host)
	h.WriteString("\r\n")
	for k, vs := range req.Header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer", "Connection":
			continue
		}
		if !validToken(k) {
			return fmt.Errorf("upstream: invalid header name %q", k)
		}
		for _, v := range vs {
			if !validValue(v) {
				return fmt.Errorf("upstream: invalid value for header %q", k)
			}
			h.WriteString(k)
			h.WriteString(": ")
			h.WriteString(v)
			h.WriteString("\r\n")
		}
	}
	if len(req.Header["User-Agent"]) == 0 {
		h.WriteString("User-Agent: " + defaultUserAgent + "\r\n")
	}
	b.close = req.Close || hasToken(req.Header["Connection"], "close")
	if b.close {
		h.WriteString("Connection: close\r\n")
	}
	if b.body.Len() > 0 || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
		h.WriteString("Content-Length: ")
		h.Write(strconv.AppendInt(h.AvailableBuffer(), int64(b.body.Len()), 10))
		h.WriteString("\r\n")
	}
	h.WriteString("\r\n")
	if b.body.Len() <= oneWriteBody {
		h.Write(b.body.Bytes())
		b.body.Reset()
	}
	return nil
}

// writeTo writes the request: one write, or head and body for a large body.
func (b *reqBuf) writeTo(w io.Writer) error {
	if b.body.Len() == 0 {
		_, err := w.Write(b.head.Bytes())
		return err
	}
	bufs := net.Buffers{b.head.Bytes(), b.body.Bytes()}
	_, err := bufs.WriteTo(w)
	return err
}

// validToken reports whether s is an HTTP token (a method or header name).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// validValue reports whether s can be sent as a header value: no control
// characters but tab, so nothing can be smuggled into the head.
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
