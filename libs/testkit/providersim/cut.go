package providersim

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
)

// CutMode is how an answer cut by [Rule.Cut] ends.
type CutMode int

// The ways an answer can break off.
const (
	// CutEOF ends the answer early but cleanly, as a server that stops
	// writing does: a stream's HTTP body ends (its chunked encoding
	// complete) without the terminator; a non-streaming body sends fewer
	// bytes than its Content-Length announced, and the connection closes.
	CutEOF CutMode = iota + 1
	// CutReset aborts the TCP connection with a reset (RST) where the
	// answer stands, as a crashing server or a proxy does; the HTTP
	// framing is left unfinished.
	CutReset
)

// Cut breaks the answer off before it is complete, after n units: for a
// stream, n data events (SSE `data:` events or NDJSON lines; keep-alive
// comments do not count, and on the OpenAI-style path the first event is the
// role chunk, whose content is empty); for a non-streaming answer, n bytes
// of its body. A stream's terminator (`data: [DONE]`, the `"done": true`
// line) is never sent: an n past the last event sends every event but that.
func (r *Rule) Cut(n int, how CutMode) *Rule {
	return r.set(func() { r.cutAfter, r.cut = n, how })
}

// cutStream breaks a stream off as rp says, after what was written.
func (s *Sim) cutStream(w http.ResponseWriter, rp *reply) {
	if rp.cut == CutReset {
		reset(w)
	}
	// CutEOF: returning ends the chunked body cleanly.
}

// writeCutBody writes the first rp.cutAfter bytes of body under a
// Content-Length announcing all of it, then breaks off as rp says.
func writeCutBody(w http.ResponseWriter, rp *reply, body []byte) {
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	n := min(max(rp.cutAfter, 0), len(body))
	_, _ = w.Write(body[:n])
	flush(w)
	if rp.cut == CutReset {
		reset(w)
	}
	// CutEOF: net/http closes a connection whose body fell short of its
	// Content-Length when the handler returns.
}

// reset aborts the connection under w with a TCP reset: SO_LINGER 0 makes
// Close send RST instead of FIN. Over in-memory pipes, where there is no
// TCP, the connection just closes.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // net/http drops the connection
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// jsonBody encodes v as json.Encoder does (with a newline), after prefix.
func jsonBody(prefix string, v any) []byte {
	var b bytes.Buffer
	b.WriteString(prefix)
	_ = json.NewEncoder(&b).Encode(v)
	return b.Bytes()
}
