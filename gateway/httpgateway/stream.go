package httpgateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// How a server stream reaches the client:
//
//  1. streamConn hands the generated clients a peekStream, which waits for
//     the stream's first response headers (at most one keep-alive interval).
//     A stream that fails before that is returned as the RPC's error, so it
//     becomes an ordinary HTTP error (Aborted → 409 with a JSON body). One
//     that ends empty becomes 204, which stops an EventSource reconnecting.
//  2. runtime.ForwardResponseStream then calls startStream, which commits
//     200 text/event-stream and flushes, so the client sees the stream open.
//  3. eventStreamMarshaler turns each message into one complete SSE event;
//     runtime writes it and flushes through http.ResponseController.
//  4. While the stream is silent, streamWriter sends ": keep-alive" comments.
//     It serialises those writes with the handler's, and its Unwrap keeps
//     the connection's Flush reachable.
//  5. A client disconnect cancels the request context, which is the gRPC
//     stream's context: the service sees the call cancelled.

// errResponseDone refuses a write after the handler returned.
var errResponseDone = errors.New("httpgateway: write after the response was finished")

// errEmptyStream reports a server stream that ended before its first event.
var errEmptyStream = errors.New("httpgateway: stream ended without events")

// streamConn is the connection the generated clients use: unary calls pass
// through, server streams are wrapped in a peekStream. Failures to reach the
// service are reported without the transport's details (addresses, retry
// counts), which are logged instead.
type streamConn struct {
	*grpc.ClientConn
	name string        // the service, as /healthz names it
	wait time.Duration // how long a stream may take to send its headers
	log  *slog.Logger
}

var _ grpc.ClientConnInterface = streamConn{}

// Invoke performs a unary RPC.
func (c streamConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.reachable(ctx, c.ClientConn.Invoke(ctx, method, args, reply, opts...))
}

// NewStream begins a streaming RPC.
func (c streamConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := c.ClientConn.NewStream(ctx, desc, method, opts...)
	if err != nil {
		return nil, c.reachable(ctx, err)
	}
	if !desc.ServerStreams || desc.ClientStreams {
		return cs, nil
	}
	return &peekStream{ClientStream: cs, conn: c, ctx: ctx}, nil
}

// reachable replaces an Unavailable raised by the connection itself (the
// service is not reachable) with a message that names the service. An
// Unavailable over a ready connection is the service's own answer (say, its
// database is down) and passes unchanged.
func (c streamConn) reachable(ctx context.Context, err error) error {
	if status.Code(err) != codes.Unavailable || c.ClientConn.GetState() == connectivity.Ready {
		return err
	}
	c.log.WarnContext(ctx, "service unreachable", "service", c.name, "error", err)
	return status.Errorf(codes.Unavailable, "%s is unreachable", c.name)
}

// peekStream waits, after the request is sent, for the response headers, so
// that an immediate failure is reported as the call's error. Not safe for
// concurrent use beyond what grpc.ClientStream allows.
type peekStream struct {
	grpc.ClientStream
	conn streamConn
	ctx  context.Context

	header metadata.MD // the headers, when they arrived during CloseSend
	end    error       // set when the stream ended before its first message
}

// CloseSend closes the send direction, then waits for the headers. Called
// by the generated client right after sending the request.
func (s *peekStream) CloseSend() error {
	if err := s.ClientStream.CloseSend(); err != nil {
		return s.conn.reachable(s.ctx, err)
	}
	got := make(chan metadata.MD, 1)
	go func() {
		// Header blocks until the headers arrive or the stream ends; it
		// returns nil headers when the stream ended without any.
		md, _ := s.ClientStream.Header()
		got <- md
	}()
	timer := time.NewTimer(s.conn.wait)
	defer timer.Stop()
	select {
	case md := <-got:
		s.header = md
		if md != nil {
			return nil
		}
		// Trailers only: no message will come; RecvMsg reports how it ended.
		err := s.ClientStream.RecvMsg(new(emptypb.Empty))
		if err == nil || errors.Is(err, io.EOF) {
			s.end = io.EOF
			return errEmptyStream
		}
		s.end = s.conn.reachable(s.ctx, err)
		return s.end
	case <-timer.C:
		// Slow to start: open the HTTP stream anyway, so the client sees it
		// and its keep-alives. A failure from now on ends it with an error
		// event. The goroutine above ends with the stream.
		return nil
	}
}

// Header returns the headers if they arrived during CloseSend, else none,
// without blocking.
func (s *peekStream) Header() (metadata.MD, error) {
	return s.header, nil
}

// RecvMsg receives the next message.
func (s *peekStream) RecvMsg(m any) error {
	if s.end != nil {
		return s.end
	}
	if err := s.ClientStream.RecvMsg(m); err != nil {
		if errors.Is(err, io.EOF) {
			return err
		}
		return s.conn.reachable(s.ctx, err)
	}
	return nil
}

// startStream is a runtime forward-response option. runtime calls it with
// a nil message only when a server stream starts forwarding, so it commits
// the stream's status and headers there.
func startStream(_ context.Context, w http.ResponseWriter, resp proto.Message) error {
	if resp != nil {
		return nil
	}
	if sw := findStreamWriter(w); sw != nil {
		sw.start()
	}
	return nil
}

// streamWriter wraps the ResponseWriter of every API request. Until a server
// stream starts it only passes calls through; once started it guards the
// writes, which then come from the handler and from the keep-alive ticker.
type streamWriter struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	ndjson    bool          // the client asked for application/x-ndjson
	keepAlive time.Duration // silence after which a comment is sent
	begun     time.Time     // when the request arrived
	onStart   func()        // called once when a stream starts

	mu        sync.Mutex // guards the fields below and writes to w once streaming
	streaming bool
	closed    bool // the handler returned: w must not be touched
	lastWrite time.Time
	stop      chan struct{} // closed to stop the keep-alive goroutine
	stopped   chan struct{} // closed when it has stopped
}

func newStreamWriter(w http.ResponseWriter, ndjson bool, keepAlive time.Duration) *streamWriter {
	return &streamWriter{w: w, rc: http.NewResponseController(w), ndjson: ndjson, keepAlive: keepAlive, begun: time.Now()}
}

func findStreamWriter(w http.ResponseWriter) *streamWriter {
	for w != nil {
		if sw, ok := w.(*streamWriter); ok {
			return sw
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
}

// Header returns the response headers.
func (s *streamWriter) Header() http.Header { return s.w.Header() }

// WriteHeader sends the status, except once a stream has started: runtime
// then still tries to send an error status, which can no longer apply.
func (s *streamWriter) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streaming || s.closed {
		return
	}
	s.w.WriteHeader(code)
}

// Write writes body bytes.
func (s *streamWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, errResponseDone
	}
	s.lastWrite = time.Now()
	return s.w.Write(p)
}

// FlushError flushes buffered data to the client; http.ResponseController
// and runtime's stream forwarding call it after every event.
func (s *streamWriter) FlushError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	return s.rc.Flush()
}

// Flush is FlushError for callers that use http.Flusher.
func (s *streamWriter) Flush() { _ = s.FlushError() }

// Unwrap returns the wrapped ResponseWriter, for http.ResponseController.
func (s *streamWriter) Unwrap() http.ResponseWriter { return s.w }

// started reports whether a stream has committed its 200 response.
func (s *streamWriter) started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streaming
}

// start commits the stream's headers and begins the keep-alives.
func (s *streamWriter) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streaming || s.closed {
		return
	}
	h := s.w.Header()
	h.Del("Content-Length")
	if s.ndjson {
		h.Set("Content-Type", mimeNDJSON)
	} else {
		h.Set("Content-Type", mimeEventStream)
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	s.w.WriteHeader(http.StatusOK)
	_ = s.rc.Flush()
	s.streaming = true
	if s.onStart != nil {
		s.onStart()
	}
	// Silence counts from the request's arrival: a stream that was slow to
	// start gets its first keep-alive at once.
	s.lastWrite = s.begun
	if !s.ndjson && s.keepAlive > 0 {
		s.stop, s.stopped = make(chan struct{}), make(chan struct{})
		go s.keepAlives()
	}
}

// writeEvent writes one SSE event and flushes it.
func (s *streamWriter) writeEvent(e sseEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.lastWrite = time.Now()
	if _, err := s.w.Write(e.encode()); err == nil {
		_ = s.rc.Flush()
	}
}

// keepAlives sends a comment whenever the stream has been silent for the
// keep-alive interval, so proxies and browsers keep an idle stream open.
func (s *streamWriter) keepAlives() {
	defer close(s.stopped)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-timer.C:
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		next := s.keepAlive - time.Since(s.lastWrite)
		if next <= 0 {
			s.lastWrite = time.Now()
			if _, err := io.WriteString(s.w, ": keep-alive\n\n"); err == nil {
				_ = s.rc.Flush()
			}
			next = s.keepAlive
		}
		s.mu.Unlock()
		timer.Reset(next)
	}
}

// finish is called when the handler returns: nothing may write to the
// response after it.
func (s *streamWriter) finish() {
	s.mu.Lock()
	s.closed = true
	stop, stopped := s.stop, s.stopped
	s.mu.Unlock()
	if stop != nil {
		close(stop)
		<-stopped
	}
}

// wantsNDJSON reports whether the client explicitly asked for newline-
// delimited JSON rather than Server-Sent Events.
func wantsNDJSON(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == mimeNDJSON {
				return true
			}
		}
	}
	return false
}

// streaming wraps the response of every API request in a streamWriter and
// normalises Accept so runtime picks the stream encoding the client gets:
// text/event-stream whatever Accept says, unless it names
// application/x-ndjson.
func (g *gateway) streaming(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ndjson := wantsNDJSON(r)
		if ndjson {
			r.Header.Set("Accept", mimeNDJSON)
		} else {
			r.Header.Del("Accept")
		}
		sw := newStreamWriter(w, ndjson, g.cfg.SSEKeepAlive)
		ctx := r.Context()
		sw.onStart = func() { g.metrics.streams.Add(ctx, 1) }
		defer func() {
			sw.finish()
			if sw.started() {
				g.metrics.streams.Add(ctx, -1)
			}
		}()
		next.ServeHTTP(sw, r)
	})
}
