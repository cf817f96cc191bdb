package upstream_test

import (
	"context"
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
