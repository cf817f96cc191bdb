package llm

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ErrorKind classifies a failure.
type ErrorKind uint8

// The failure kinds.
const (
	// KindInternal is a gateway bug or an unclassified failure.
	KindInternal ErrorKind = iota
	// KindInvalidRequest: the provider rejected the request (400, 422).
	KindInvalidRequest
	// KindAuth: the provider rejected the credentials (401, 403).
	KindAuth
	// KindBalance: the account cannot pay (402).
	KindBalance
	// KindNotFound: the model does not exist there (404).
	KindNotFound
	// KindRateLimited: 429.
	KindRateLimited
	// KindServer: 500, 502, 503, 504.
	KindServer
	// KindConnection: the connection failed or broke.
	KindConnection
	// KindTimeout: a first-chunk, idle or request timeout fired.
	KindTimeout
	// KindBadResponse: the provider answered something unparsable, an
	// error mid-stream, or a stream that ended early.
	KindBadResponse
	// KindUnsupported: the provider cannot do what was asked (images on a
	// text-only provider, embeddings where there are none).
	KindUnsupported
	// KindOverloaded: the provider's local queue is full.
	KindOverloaded
	// KindUnavailable: no provider is configured or reachable.
	KindUnavailable
	// KindCanceled: the caller went away.
	KindCanceled
	// KindInvalidOutput: the answer did not validate against the requested
	// schema, even after a repair attempt.
	KindInvalidOutput
	// KindUnknownModel: the logical model name is not configured.
	KindUnknownModel
	// KindStreamCut: the provider answered (status and headers came) but
	// its answer ended before it was complete: a stream without its
	// terminator, a connection reset mid-body, a body cut mid-JSON. The
	// provider is up; this one answer broke.
	KindStreamCut
)

var kindNames = [...]string{
	KindInternal: "internal", KindInvalidRequest: "invalid_request", KindAuth: "auth",
	KindBalance: "insufficient_balance", KindNotFound: "not_found", KindRateLimited: "rate_limited",
	KindServer: "server_error", KindConnection: "connection_error", KindTimeout: "timeout",
	KindBadResponse: "bad_response", KindUnsupported: "unsupported", KindOverloaded: "overloaded",
	KindUnavailable: "unavailable", KindCanceled: "canceled", KindInvalidOutput: "invalid_output",
	KindUnknownModel: "unknown_model", KindStreamCut: "stream_cut",
}

// String names the kind (used as a metric outcome).
func (k ErrorKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Error is a failure of one upstream call, with the provider's own message.
// Messages never contain API keys: adapters scrub them before building one.
type Error struct {
	// Provider names the provider, e.g. "deepseek".
	Provider string
	// Kind classifies the failure.
	Kind ErrorKind
	// Status is the HTTP status, 0 if none.
	Status int
	// Message is the provider's message (or a description of the failure).
	Message string
	// RetryAfter is the provider's Retry-After, 0 if absent.
	RetryAfter time.Duration
	// Err is the underlying error, if any.
	Err error
	// BytesReceived counts the answer body bytes that arrived before a
	// KindStreamCut failure.
	BytesReceived int64
	// PartialSent says part of the answer (content, reasoning or a tool
	// call) had already reached the caller when the call failed, so it was
	// neither retried nor sent to another provider.
	PartialSent bool
}

func (e *Error) Error() string {
	p := e.Provider
	if p == "" {
		p = "modelgateway"
	}
	if e.Status != 0 {
		return fmt.Sprintf("%s: HTTP %d %s: %s", p, e.Status, http.StatusText(e.Status), e.Message)
	}
	return fmt.Sprintf("%s: %s", p, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether the same request may succeed if sent again:
// rate limits, server errors, connection errors, timeouts and cut answers.
func (e *Error) Retryable() bool {
	switch e.Kind {
	case KindRateLimited, KindServer, KindConnection, KindTimeout, KindStreamCut:
		return true
	}
	return false
}

// Errorf builds an Error.
func Errorf(provider string, kind ErrorKind, format string, args ...any) *Error {
	return &Error{Provider: provider, Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// KindFromStatus classifies an HTTP error status.
func KindFromStatus(status int) ErrorKind {
	switch {
	case status == http.StatusBadRequest || status == http.StatusUnprocessableEntity:
		return KindInvalidRequest
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return KindAuth
	case status == http.StatusPaymentRequired:
		return KindBalance
	case status == http.StatusNotFound:
		return KindNotFound
	case status == http.StatusTooManyRequests:
		return KindRateLimited
	case status == http.StatusRequestTimeout || status == http.StatusGatewayTimeout:
		return KindTimeout
	case status >= 500:
		return KindServer
	}
	return KindInvalidRequest
}

// AsError returns err as an *Error, wrapping unknown errors as KindInternal.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Kind: KindInternal, Message: err.Error(), Err: err}
}
