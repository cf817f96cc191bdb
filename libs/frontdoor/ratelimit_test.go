package frontdoor

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestRateLimit: a burst, then one request per 1/rate; callers apart; a
// wait that says when the next token comes; idle callers' full buckets
// dropped when too many are kept, without changing their allowance.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	if NewRateLimit(0, 5) != nil || NewRateLimit(-1, 5).take(Principal{}) != 0 {
		t.Fatal("a rate of 0 or less is no limit")
	}
	now := time.Unix(1000, 0)
	l := NewRateLimit(2, 3) // 2 a second, bursts of 3
	l.now = func() time.Time { return now }
	alice, bob := Principal{Tenant: "acme", Caller: "alice"}, Principal{Tenant: "acme", Caller: "bob"}
	for i := range 3 {
		if w := l.take(alice); w != 0 {
			t.Fatalf("request %d of the burst waits %v", i+1, w)
		}
	}
	if w := l.take(alice); w != 500*time.Millisecond {
		t.Fatalf("past the burst: wait %v, want 500ms", w)
	}
	if w := l.take(bob); w != 0 {
		t.Fatalf("another caller waits %v", w)
	}
	now = now.Add(250 * time.Millisecond)
	if w := l.take(alice); w != 250*time.Millisecond {
		t.Fatalf("a quarter second on: wait %v, want 250ms", w)
	}
	now = now.Add(250 * time.Millisecond)
	if w := l.take(alice); w != 0 {
		t.Fatalf("a token later: wait %v", w)
	}
	if w := l.take(alice); w == 0 {
		t.Fatal("the token was spent twice")
	}
	// As many callers as are kept: then at the next new one the full
	// buckets go (all of them, an hour on).
	for i := range maxBuckets - len(l.buckets) {
		l.take(Principal{Tenant: fmt.Sprint("t", i)})
	}
	now = now.Add(time.Hour) // every bucket full again, alice's too
	l.take(Principal{Tenant: "newcomer"})
	if len(l.buckets) != 1 {
		t.Fatalf("%d buckets kept after the sweep, want the newcomer's", len(l.buckets))
	}
	for i := range 3 {
		if w := l.take(alice); w != 0 {
			t.Fatalf("after an hour, request %d of a new burst waits %v", i+1, w)
		}
	}
	// Callers named faster than their buckets refill: the buckets are
	// forgotten rather than kept without bound.
	for i := range 3 * maxBuckets {
		l.take(Principal{Tenant: fmt.Sprint("flood", i)})
	}
	if len(l.buckets) > maxBuckets {
		t.Fatalf("%d buckets kept, at most %d", len(l.buckets), maxBuckets)
	}
	if NewRateLimit(2.5, 0).Burst != 3 {
		t.Fatal("burst 0 is a second's worth, rounded up")
	}
	h := http.Header{}
	SetRetryAfter(h, 200*time.Millisecond)
	if h.Get("Retry-After") != "1" || h.Get("Retry-After-Ms") != "200" {
		t.Fatalf("a wait of 200ms: %v, want Retry-After 1 and Retry-After-Ms 200", h)
	}
}
