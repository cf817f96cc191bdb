//go:build e2ecluster

package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/gateway/httpgateway/httpgatewaytest"
)

// api is a client of the mesh's REST/SSE API through the front, in the
// gateway's open development mode (tenant "default").
type api struct {
	base  string
	front *front
	http  *http.Client
}

func newAPI(f *front) *api {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	// A kept-alive connection to a killed gateway replica would fail the
	// next request; a new connection per request lets the front pick a
	// live replica, as a browser's reconnect does.
	tr.DisableKeepAlives = true
	return &api{base: f.url(), front: f, http: &http.Client{Transport: tr}}
}

// httpError is an answer outside 2xx. Its body is the gateway's
// {code, message} error when the mesh answered.
type httpError struct {
	method, path string
	status       int
	body         string
}

func (e *httpError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d %s", e.method, e.path, e.status, strings.TrimSpace(e.body))
}

// reason is the message of the gateway's JSON error, "" when the body is
// not one: a failure with a reason is one the user can read.
func (e *httpError) reason() string {
	var b struct {
		Code    any    `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal([]byte(e.body), &b) != nil || b.Message == "" {
		return ""
	}
	return b.Message
}

// streamError is a stream the gateway ended with `event: error`: the
// service behind it failed (or died) mid-stream.
type streamError struct{ data string }

func (e *streamError) Error() string { return "stream ended with error event " + e.data }

// code is the gRPC code of the error event, -1 when it has none.
func (e *streamError) code() int {
	var b struct {
		Code *int `json:"code"`
	}
	if json.Unmarshal([]byte(e.data), &b) != nil || b.Code == nil {
		return -1
	}
	return *b.Code
}

// transient reports whether err is worth a retry: no answer at all (a
// replica died under the request), or the mesh saying a dependency is
// unavailable.
func transient(err error) bool {
	var se *streamError
	if errors.As(err, &se) {
		switch se.code() {
		case 1, 4, 10, 14: // CANCELLED, DEADLINE_EXCEEDED, ABORTED, UNAVAILABLE
			return true
		}
		return false
	}
	var he *httpError
	if errors.As(err, &he) {
		return he.status == http.StatusBadGateway || he.status == http.StatusServiceUnavailable || he.status == http.StatusGatewayTimeout
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(fmt.Sprint(err), "connection reset") || strings.Contains(fmt.Sprint(err), "connection refused")
}

// do sends one request and returns a 2xx response, with the gateway
// replica that serves it (through the front).
func (a *api) do(ctx context.Context, method, path string, body any, header http.Header) (*http.Response, string, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, "", err
		}
		rd = bytes.NewReader(b)
	}
	var local string
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { local = i.Conn.LocalAddr().String() }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, a.base+path, rd)
	if err != nil {
		return nil, "", err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, "", err
	}
	backend := a.front.backendOf(local)
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		resp.Body.Close()
		return nil, backend, &httpError{method, path, resp.StatusCode, string(b)}
	}
	return resp, backend, nil
}

// call sends a unary request and decodes the answer into out (unless nil).
// Transient failures are retried with backoff until ctx ends, as a client
// of a service behind a load balancer does.
func (a *api) call(ctx context.Context, method, path string, body, out any) error {
	return retry(ctx, func() error {
		resp, _, err := a.do(ctx, method, path, body, nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if out == nil {
			return nil
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		return nil
	})
}

// retry runs f until it succeeds, fails for good, or ctx ends; the last
// error is returned.
func retry(ctx context.Context, f func() error) error {
	wait := 200 * time.Millisecond
	for {
		err := f()
		if err == nil || !transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up: %v)", err, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(wait*2, 2*time.Second)
	}
}

// stream sends a request answered by an event stream and calls fn with
// each event until the stream ends or fn returns false. It returns the
// gateway replica that served it and how the stream ended: nil at its
// end, else the transport error that cut it.
func (a *api) stream(ctx context.Context, method, path string, body any, header http.Header, fn func(ev httpgatewaytest.Event, backend string) bool) (string, error) {
	resp, backend, err := a.do(ctx, method, path, body, header)
	if err != nil {
		return backend, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return backend, fmt.Errorf("%s %s: Content-Type %q, not an event stream", method, path, ct)
	}
	// Events drops a cut-off final event and closes its channel at the
	// end of the body, whatever ended it; the body's read error says which.
	er := &errReader{r: resp.Body}
	events := httpgatewaytest.Events(er)
	defer func() {
		resp.Body.Close()
		for range events { // the parser ends once the body is closed
		}
	}()
	for ev := range events {
		if ev.Comment != "" {
			continue
		}
		if !fn(ev, backend) {
			return backend, nil
		}
	}
	if er.err != nil && !errors.Is(er.err, io.EOF) {
		return backend, er.err
	}
	return backend, nil
}

// errReader remembers the error that ended its reader.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.err = err
	}
	return n, err
}
