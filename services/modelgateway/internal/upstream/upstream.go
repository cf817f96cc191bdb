// Package upstream is the HTTP client side shared by every adapter: one
// request to a provider with the gateway's timeouts (first chunk, idle
// between chunks, whole request), API keys in turn, and provider errors
// classified into llm.Error with the provider's own message and Retry-After,
// keys scrubbed.
package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentmesh/agentmesh/libs/utf8x"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/credentials"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
)

// Timeouts bound one upstream request. Zero disables a timeout.
type Timeouts struct {
	// FirstChunk bounds the wait from sending the request to the first
	// answer data (the first stream event, or the first body byte).
	FirstChunk time.Duration
	// Idle bounds the wait between two stream events once data flows.
	Idle time.Duration
	// Request bounds the whole request.
	Request time.Duration
}

// NewTransport returns the HTTP transport for one provider: an H1Transport
// (HTTP/1.1, each exchange in the caller's goroutine) with the connect
// timeout, keeping up to maxConns idle keep-alive connections so that
// maxConns concurrent requests reuse theirs. Requests through a proxy from
// the environment go through net/http's Transport.
func NewTransport(connectTimeout time.Duration, maxConns int) *H1Transport {
	if maxConns <= 0 {
		maxConns = 64
	}
	return NewH1Transport(connectTimeout, maxConns)
}

// Client sends requests to one provider.
type Client struct {
	// Provider names the provider in errors.
	Provider string
	// BaseURL is the API base, without a trailing slash.
	BaseURL string
	// Transport sends the requests (NewTransport's in production). There
	// is no redirect following: a provider API that answers 3xx is
	// misconfigured, and the status surfaces as an error.
	Transport http.RoundTripper
	// Keys are sent as `Authorization: Bearer` in turn; nil or empty sends none.
	Keys *credentials.KeyRing
	// Timeouts bound each request.
	Timeouts Timeouts

	headersOnce sync.Once
	// headers are the request headers, built once and shared read-only by
	// every request (a RoundTripper must not modify them): [0] without a
	// body, [1] with a JSON body; one per key, in turn order.
	headers [2][]http.Header
}

// header returns the headers for the next request.
func (c *Client) header(jsonBody bool) http.Header {
	c.headersOnce.Do(func() {
		keys := c.Keys.All()
		if len(keys) == 0 {
			keys = []string{""}
		}
		for i := range c.headers {
			for _, k := range keys {
				h := http.Header{}
				if i == 1 {
					h.Set("Content-Type", "application/json")
				}
				if k != "" {
					h.Set("Authorization", "Bearer "+k)
				}
				c.headers[i] = append(c.headers[i], h)
			}
		}
	})
	hs := c.headers[0]
	if jsonBody {
		hs = c.headers[1]
	}
	if len(hs) == 1 {
		return hs[0]
	}
	return hs[c.Keys.NextIndex()]
}

// Timeout causes, so a cancelled read can say which timeout fired.
var (
	errFirstChunk = errors.New("first-chunk timeout")
	errIdle       = errors.New("idle timeout between chunks")
	errRequest    = errors.New("request timeout")
	errDrain      = errors.New("drain timeout")
)

// Call is one request in flight. Read the answer from Body, call Progress
// after each stream event, and Close when done.
type Call struct {
	// Body is the response body.
	Body io.ReadCloser
	// Header is the response header.
	Header http.Header

	client *Client
	parent context.Context
	ctx    context.Context
	cancel context.CancelCauseFunc
	// deadline ends the request timeout; zero when there is none.
	deadline time.Time
	// timer is the one timer of the call: it fires at the end of the
	// current phase's wait or at deadline, whichever is first.
	timer *time.Timer
	phase atomic.Int32
	// body is Body: the response body, counting what arrived.
	body countingBody
}

// countingBody counts the bytes read through it, so a cut answer can say
// how much of it arrived. Reads come from one goroutine (the adapter's),
// and so does Fail, which reads n.
type countingBody struct {
	io.ReadCloser
	n int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

// The phases of a call, each with its own wait.
const (
	phaseFirst int32 = iota // waiting for the first answer data: FirstChunk
	phaseIdle               // streaming: Idle between events
	phaseWhole              // reading a whole answer: only the deadline
	phaseDrain              // reading past the end: drainWait
)

// Post sends body (JSON) to BaseURL+path.
func (c *Client) Post(ctx context.Context, path string, body []byte) (*Call, error) {
	return c.do(ctx, http.MethodPost, path, body)
}

// Get sends a GET to BaseURL+path.
func (c *Client) Get(ctx context.Context, path string) (*Call, error) {
	return c.do(ctx, http.MethodGet, path, nil)
}

func (c *Client) do(ctx context.Context, method, path string, body []byte) (*Call, error) {
	call := &Call{client: c, parent: ctx}
	cctx, cancel := context.WithCancelCause(ctx)
	call.ctx, call.cancel = cctx, cancel
	if c.Timeouts.Request > 0 {
		call.deadline = time.Now().Add(c.Timeouts.Request)
	}
	call.arm(phaseFirst, c.Timeouts.FirstChunk)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(cctx, method, c.BaseURL+path, rd)
	if err != nil {
		call.Close()
		return nil, &llm.Error{Provider: c.Provider, Kind: llm.KindInternal, Message: c.scrub(err.Error()), Err: err}
	}
	req.Header = c.header(body != nil)
	resp, err := c.Transport.RoundTrip(req)
	if err != nil {
		// As net/http's Client words it: `Post "url": cause`.
		e := call.Fail(&url.Error{Op: method[:1] + strings.ToLower(method[1:]), URL: req.URL.String(), Err: err})
		call.Close()
		return nil, e
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := c.statusError(resp)
		call.Close()
		return nil, e
	}
	call.body.ReadCloser = resp.Body
	call.Body = &call.body
	call.Header = resp.Header
	return call, nil
}

// arm enters phase and restarts the timer to fire after wait (none if
// wait <= 0), or at the request deadline if that comes first.
func (c *Call) arm(phase int32, wait time.Duration) {
	c.phase.Store(phase)
	if !c.deadline.IsZero() {
		if left := time.Until(c.deadline); wait <= 0 || left < wait {
			wait = max(left, time.Nanosecond)
		}
	}
	switch {
	case wait <= 0:
		if c.timer != nil {
			c.timer.Stop()
		}
	case c.timer == nil:
		c.timer = time.AfterFunc(wait, c.expire)
	default:
		c.timer.Reset(wait)
	}
}

// expire cancels the request with the cause of the wait that ran out.
func (c *Call) expire() {
	if !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
		c.cancel(errRequest)
		return
	}
	switch c.phase.Load() {
	case phaseFirst:
		c.cancel(errFirstChunk)
	case phaseIdle:
		c.cancel(errIdle)
	case phaseDrain:
		c.cancel(errDrain)
	default:
		c.cancel(errRequest)
	}
}

// Progress records that answer data arrived: the first-chunk timeout gives
// way to the idle timeout, which restarts.
func (c *Call) Progress() { c.arm(phaseIdle, c.client.Timeouts.Idle) }

// Unary switches the call to non-streaming mode once the headers are in:
// the answer arrives whole, so only the request timeout bounds the rest.
func (c *Call) Unary() { c.arm(phaseWhole, 0) }

// Drain reads what is left of a completely parsed answer (at most a few
// kilobytes), so the connection goes back to the pool instead of being
// closed. Call it before Close when the answer ended normally.
// A server that keeps the body open after the end marker costs at most
// drainWait.
func (c *Call) Drain() {
	if c.Body == nil {
		return
	}
	if b, ok := c.body.ReadCloser.(*h1Body); ok && b.ended() {
		return // read to its end already (or failed): nothing to wait for
	}
	c.arm(phaseDrain, drainWait)
	_, _ = io.Copy(io.Discard, io.LimitReader(c.Body, 8<<10))
	c.arm(phaseWhole, 0)
}

// drainWait bounds Drain.
const drainWait = 50 * time.Millisecond

// Close releases the call. It is safe to call more than once.
func (c *Call) Close() {
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.Body != nil {
		_ = c.Body.Close()
	}
	c.cancel(nil)
}

// Fail classifies err, met while sending or reading: which timeout fired,
// whether the caller went away, a connection failure (before the response
// head arrived), or, once it has, a cut answer (llm.KindStreamCut with the
// bytes received): the read broke, or the adapter found the body ended
// before the answer did and says so with an error wrapping
// io.ErrUnexpectedEOF.
func (c *Call) Fail(err error) *llm.Error {
	var le *llm.Error
	if errors.As(err, &le) {
		return le
	}
	p := c.client.Provider
	if cause := context.Cause(c.ctx); cause != nil && c.parent.Err() == nil {
		switch {
		case errors.Is(cause, errFirstChunk):
			return &llm.Error{Provider: p, Kind: llm.KindTimeout, Message: fmt.Sprintf("no answer within the first-chunk timeout (%s)", c.client.Timeouts.FirstChunk), Err: cause}
		case errors.Is(cause, errIdle):
			return &llm.Error{Provider: p, Kind: llm.KindTimeout, Message: fmt.Sprintf("stream stalled longer than the idle timeout (%s)", c.client.Timeouts.Idle), Err: cause}
		case errors.Is(cause, errRequest):
			return &llm.Error{Provider: p, Kind: llm.KindTimeout, Message: fmt.Sprintf("request took longer than the request timeout (%s)", c.client.Timeouts.Request), Err: cause}
		}
	}
	if perr := c.parent.Err(); perr != nil {
		if errors.Is(perr, context.DeadlineExceeded) {
			return &llm.Error{Provider: p, Kind: llm.KindTimeout, Message: "caller's deadline exceeded", Err: perr}
		}
		return &llm.Error{Provider: p, Kind: llm.KindCanceled, Message: "caller cancelled", Err: perr}
	}
	if c.Body != nil {
		return &llm.Error{Provider: p, Kind: llm.KindStreamCut, BytesReceived: c.body.n, Err: err,
			Message: fmt.Sprintf("answer cut off after %d bytes: %s", c.body.n, c.client.scrub(err.Error()))}
	}
	return &llm.Error{Provider: p, Kind: llm.KindConnection, Message: c.client.scrub(err.Error()), Err: err}
}

// DecodeFail classifies err, met while decoding a whole (non-streaming) JSON
// answer from Body: malformed JSON is a bad answer (llm.KindBadResponse);
// JSON that stops before its value is complete (io.EOF or
// io.ErrUnexpectedEOF, as json.Decoder reports an empty or truncated
// input) and a broken read are a cut answer, as Fail says.
func (c *Call) DecodeFail(err error) *llm.Error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	if errors.As(err, &se) || errors.As(err, &te) {
		return &llm.Error{Provider: c.client.Provider, Kind: llm.KindBadResponse, Err: err,
			Message: "unparsable answer: " + c.client.scrub(err.Error())}
	}
	if errors.Is(err, io.EOF) {
		err = fmt.Errorf("answer ended before its JSON began: %w", io.ErrUnexpectedEOF)
	}
	return c.Fail(err)
}

// statusError reads an error response into an llm.Error.
func (c *Client) statusError(resp *http.Response) *llm.Error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := ErrorMessage(b)
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		msg = fmt.Sprintf("redirected (%d) to %q, and redirects are not followed: set the provider's base_url to the address the API is served at",
			resp.StatusCode, resp.Header.Get("Location"))
	}
	return &llm.Error{
		Provider:   c.Provider,
		Kind:       llm.KindFromStatus(resp.StatusCode),
		Status:     resp.StatusCode,
		Message:    c.scrub(msg),
		RetryAfter: RetryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
}

func (c *Client) scrub(s string) string { return c.Keys.Scrub(s) }

// Scrub removes the client's API keys from s.
func (c *Client) Scrub(s string) string { return c.scrub(s) }

// ErrorMessage extracts the provider's message from an error body:
// OpenAI-style {"error": {"message", "code", "type"}}, Ollama {"error": "msg"},
// or {"message"}; otherwise the body's text, shortened.
func ErrorMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Code    any             `json:"code"`
	}
	if json.Unmarshal(bytes.TrimSpace(body), &v) == nil {
		if len(v.Error) > 0 {
			var s string
			if json.Unmarshal(v.Error, &s) == nil {
				return s
			}
			var o struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    any    `json:"code"`
			}
			if json.Unmarshal(v.Error, &o) == nil && o.Message != "" {
				if code := fmt.Sprint(o.Code); o.Code != nil && code != "" && !strings.Contains(o.Message, code) {
					return o.Message + " (" + code + ")"
				}
				return o.Message
			}
		}
		if v.Message != "" {
			return v.Message
		}
	}
	// Not JSON (an HTML page of a proxy, in any charset): its text, as
	// UTF-8 (the message travels in protobuf strings and events), cut at
	// 500 bytes on a character's boundary.
	s := utf8x.Valid(strings.TrimSpace(string(body)))
	if len(s) > 500 {
		s = utf8x.Prefix(s, 500) + "…"
	}
	if s == "" {
		s = "(empty body)"
	}
	return s
}

// RetryAfter parses a Retry-After header: delay seconds or an HTTP date.
func RetryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(h, 64); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(h); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
