package upstream_test

import (
	"net/http"
	"testing"
	"time"

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
