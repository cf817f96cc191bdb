package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/credentials"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/upstream"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for h, want := range map[string]time.Duration{
		"":    0,
		"3":   3 * time.Second,
		"0.5": 500 * time.Millisecond,
		"-1":  0,
		now.Add(7 * time.Second).Format(http.TimeFormat): 7 * time.Second,
		"soon": 0,
	} {
		if got := upstream.RetryAfter(h, now); got != want {
			t.Errorf("Retry-After %q = %v, want %v", h, got, want)
		}
	}
}

func TestErrorMessageShapes(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}`: "Insufficient Balance (invalid_request_error)",
		`{"error":"model \"x\" not found, try pulling it first"}`:                                                         `model "x" not found, try pulling it first`,
		`{"code":"Throttling","message":"Requests rate limit exceeded"}`:                                                  "Requests rate limit exceeded",
		"<html>502 Bad Gateway</html>":                                                                                    "<html>502 Bad Gateway</html>",
		"":                                                                                                                "(empty body)",
		"<p>Fehler: \xfcberlastet</p>":                                                                                    "<p>Fehler: \uFFFDberlastet</p>",
		strings.Repeat("错", 200):                                                                                          strings.Repeat("错", 166) + "…",
	} {
		if got := upstream.ErrorMessage([]byte(body)); got != want {
			t.Errorf("%s → %q, want %q", body, got, want)
		}
	}
}

// TestRedirectIsAnErrorNamingTheTarget: a provider answering 3xx is not
// followed (a POST would turn into a GET); the error says where it points.
func TestRedirectIsAnErrorNamingTheTarget(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			t.Errorf("followed the redirect to %s", r.URL.Path)
		}
		http.Redirect(w, r, "/v2/chat/completions", http.StatusPermanentRedirect)
	}))
	defer srv.Close()
	c := &upstream.Client{Provider: "p", BaseURL: srv.URL + "/v1", Transport: upstream.NewTransport(time.Second, 2)}
	call, err := c.Post(context.Background(), "/chat/completions", []byte(`{}`))
	if err == nil {
		call.Close()
		t.Fatal("no error")
	}
	var le *llm.Error
	if !errors.As(err, &le) || le.Status != http.StatusPermanentRedirect || le.Kind != llm.KindInvalidRequest ||
		!strings.Contains(le.Message, `"/v2/chat/completions"`) || !strings.Contains(le.Message, "base_url") {
		t.Fatalf("err = %#v", err)
	}
}

// TestKeysInTurnAndContentTypeOnlyWithBody: the shared per-key headers
// still hand the keys out in turn, and a GET carries no Content-Type.
func TestKeysInTurnAndContentTypeOnlyWithBody(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.Header.Get("Authorization")+" "+r.Header.Get("Content-Type"))
		mu.Unlock()
		_, _ = io.WriteString(w, "{}")
	}))
	defer srv.Close()
	c := &upstream.Client{Provider: "p", BaseURL: srv.URL, Transport: upstream.NewTransport(time.Second, 2), Keys: credentials.New("k1", "k2")}
	for i := range 4 {
		var call *upstream.Call
		var err error
		if i == 2 {
			call, err = c.Get(context.Background(), "/models")
		} else {
			call, err = c.Post(context.Background(), "/chat", []byte(`{}`))
		}
		if err != nil {
			t.Fatal(err)
		}
		call.Drain()
		call.Close()
	}
	want := []string{"POST Bearer k1 application/json", "POST Bearer k2 application/json", "GET Bearer k1 ", "POST Bearer k2 application/json"}
	if !slices.Equal(seen, want) {
		t.Fatalf("requests = %q, want %q", seen, want)
	}
}

// slowStream answers with a chunk every gap, n times, then ends.
func slowStream(gap time.Duration, n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		for range n {
			time.Sleep(gap)
			_, _ = io.WriteString(w, "data: x\n\n")
			_ = rc.Flush()
		}
	}
}

// readAll reads the call's body, reporting progress per read, and returns
// the classified error (nil at a clean end).
func readAll(call *upstream.Call) *llm.Error {
	buf := make([]byte, 512)
	for {
		_, err := call.Body.Read(buf)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return call.Fail(err)
		}
		call.Progress()
	}
}

// TestCallTimeoutsEachNamed: one timer serves every wait of a call; each
// expiry is reported as the timeout that ran out.
func TestCallTimeoutsEachNamed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		timeouts upstream.Timeouts
		handler  http.HandlerFunc
		unary    bool
		want     string // in the error message; "" = no error
	}{
		{"first chunk", upstream.Timeouts{FirstChunk: 100 * time.Millisecond, Idle: time.Second, Request: 5 * time.Second},
			slowStream(400*time.Millisecond, 1), false, "first-chunk timeout"},
		{"idle", upstream.Timeouts{FirstChunk: time.Second, Idle: 100 * time.Millisecond, Request: 5 * time.Second},
			func(w http.ResponseWriter, r *http.Request) {
				slowStream(10*time.Millisecond, 2)(w, r)
				time.Sleep(400 * time.Millisecond)
			}, false, "idle timeout"},
		{"request, while events keep coming", upstream.Timeouts{FirstChunk: time.Second, Idle: time.Second, Request: 300 * time.Millisecond},
			slowStream(50*time.Millisecond, 12), false, "request timeout"},
		{"whole answer: only the request timeout", upstream.Timeouts{FirstChunk: 100 * time.Millisecond, Idle: 100 * time.Millisecond, Request: 5 * time.Second},
			slowStream(150*time.Millisecond, 3), true, ""},
		{"whole answer past the request timeout", upstream.Timeouts{FirstChunk: 100 * time.Millisecond, Idle: 100 * time.Millisecond, Request: 300 * time.Millisecond},
			slowStream(150*time.Millisecond, 4), true, "request timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			c := &upstream.Client{Provider: "p", BaseURL: srv.URL, Transport: upstream.NewTransport(time.Second, 2), Timeouts: tc.timeouts}
			call, err := c.Post(context.Background(), "/chat", []byte(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			defer call.Close()
			if tc.unary {
				call.Unary()
				_, err := io.ReadAll(call.Body)
				var le *llm.Error
				if err != nil {
					le = call.Fail(err)
				}
				check(t, le, tc.want)
				return
			}
			check(t, readAll(call), tc.want)
		})
	}
}

func check(t *testing.T, le *llm.Error, want string) {
	t.Helper()
	switch {
	case want == "" && le != nil:
		t.Fatalf("err = %v, want none", le)
	case want != "" && (le == nil || le.Kind != llm.KindTimeout || !strings.Contains(le.Message, want)):
		t.Fatalf("err = %v, want a timeout naming %q", le, want)
	}
}

// TestDrainIsBounded: a server that keeps the body open after the answer
// costs Drain a bounded wait, and an answer read to its end costs none.
func TestDrainIsBounded(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		_ = http.NewResponseController(w).Flush()
		if r.URL.Path == "/open" {
			<-hold
		}
	}))
	defer srv.Close()
	defer close(hold) // before Close, which waits for the handler
	c := &upstream.Client{Provider: "p", BaseURL: srv.URL, Transport: upstream.NewTransport(time.Second, 2), Timeouts: upstream.Timeouts{Request: time.Minute}}
	for _, path := range []string{"/open", "/ends"} {
		call, err := c.Post(context.Background(), path, []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if _, err := io.ReadAtLeast(call.Body, buf, len("data: [DONE]\n\n")); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		call.Drain()
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("%s: Drain took %v", path, d)
		}
		call.Close()
	}
}

// TestFailTellsACutAnswerFromAnUnreachableProvider: a failure before the
// response head is a connection failure; once the head is in, a broken or
// early-ending body is a cut answer that counts the bytes received, and
// DecodeFail tells truncated JSON (cut) from malformed JSON (bad answer).
func TestFailTellsACutAnswerFromAnUnreachableProvider(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/short": // announces 40 bytes, sends 11, and the connection closes
			w.Header().Set("Content-Length", "40")
			_, _ = io.WriteString(w, `{"choices":`)
		case "/truncated": // a complete HTTP body holding half a JSON value
			_, _ = io.WriteString(w, `{"choices":[{"index":0`)
		case "/malformed":
			_, _ = io.WriteString(w, `{"choices": nope}`)
		case "/blank":
			_, _ = io.WriteString(w, "\n\n")
		}
	}))
	defer srv.Close()
	c := &upstream.Client{Provider: "p", BaseURL: srv.URL, Transport: upstream.NewTransport(time.Second, 2), Timeouts: upstream.Timeouts{Request: 5 * time.Second}}
	for _, tc := range []struct {
		path  string
		kind  llm.ErrorKind
		bytes int64
	}{
		{"/short", llm.KindStreamCut, 11},
		{"/truncated", llm.KindStreamCut, 22},
		{"/malformed", llm.KindBadResponse, 0},
		{"/blank", llm.KindStreamCut, 2},
	} {
		t.Run(tc.path, func(t *testing.T) {
			call, err := c.Post(context.Background(), tc.path, []byte(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			defer call.Close()
			call.Unary()
			var v map[string]any
			err = json.NewDecoder(call.Body).Decode(&v)
			if err == nil {
				t.Fatalf("decoded %v", v)
			}
			le := call.DecodeFail(err)
			if le.Kind != tc.kind || le.BytesReceived != tc.bytes {
				t.Errorf("%v: kind %v, %d bytes; want %v, %d", le, le.Kind, le.BytesReceived, tc.kind, tc.bytes)
			}
		})
	}
	// Nobody listening: the provider cannot be reached, nothing was cut.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	down := &upstream.Client{Provider: "p", BaseURL: closed.URL, Transport: upstream.NewTransport(time.Second, 2)}
	_, err := down.Post(context.Background(), "/chat", []byte(`{}`))
	var le *llm.Error
	if !errors.As(err, &le) || le.Kind != llm.KindConnection {
		t.Errorf("closed port: %v, want a connection error", err)
	}
}
