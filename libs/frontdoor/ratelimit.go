package frontdoor

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"
)

// RateLimit holds each caller (an API key; in development mode the
// tenant, project and caller its headers name) to Rate requests a second,
// with bursts of up to Burst, on this replica: a token bucket per caller.
// The mesh-wide limit is the replicas' count times Rate. A nil RateLimit
// admits everything.
type RateLimit struct {
	Rate  float64
	Burst int

	now     func() time.Time // time.Now, unless a test sets it
	mu      sync.Mutex
	buckets map[Principal]*bucket // guarded by mu
}

type bucket struct {
	tokens float64
	at     time.Time // when tokens was right
}

// NewRateLimit returns a limit of rate requests a second per caller with
// bursts of burst (0: a second's worth, at least 1); nil for a rate of 0
// or less (no limit).
func NewRateLimit(rate float64, burst int) *RateLimit {
	if rate <= 0 {
		return nil
	}
	if burst <= 0 {
		burst = int(math.Ceil(rate))
	}
	return &RateLimit{Rate: rate, Burst: burst, now: time.Now, buckets: map[Principal]*bucket{}}
}

// maxBuckets is how many callers' buckets are kept before the full ones
// (callers idle long enough to have their whole burst again) are dropped:
// in development mode the headers name callers without bound.
const maxBuckets = 10_000

// take spends one token of p's bucket. It returns 0 when the request may
// go, else how long until a token is there.
func (l *RateLimit) take(p Principal) time.Duration {
	if l == nil {
		return 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[p]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.dropFull(now)
			if len(l.buckets) >= maxBuckets {
				// Only the development mode's headers name this many
				// callers at once: forget them all rather than grow, or
				// sweep at every request.
				clear(l.buckets)
			}
		}
		b = &bucket{tokens: float64(l.Burst), at: now}
		l.buckets[p] = b
	}
	b.tokens = math.Min(float64(l.Burst), b.tokens+now.Sub(b.at).Seconds()*l.Rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) / l.Rate * float64(time.Second))
}

// dropFull forgets the buckets that have refilled: a new bucket starts
// full, so nothing changes for their callers. l.mu must be held.
func (l *RateLimit) dropFull(now time.Time) {
	for p, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*l.Rate >= float64(l.Burst) {
			delete(l.buckets, p)
		}
	}
}

// SetRetryAfter tells the client of an answer in h to wait at least wait
// before it tries again: Retry-After in whole seconds, rounded up, and
// Retry-After-Ms, which OpenAI's SDKs read first; each at least 1.
func SetRetryAfter(h http.Header, wait time.Duration) {
	h.Set("Retry-After", fmt.Sprint(max(1, int(math.Ceil(wait.Seconds())))))
	h.Set("Retry-After-Ms", fmt.Sprint(max(1, wait.Milliseconds())))
}
