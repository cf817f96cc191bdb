// Package usage counts the model gateway's tokens per logical model,
// provider and tenant in memory, in two rings of time buckets (a minute
// each over the last hour, an hour each over the last day), for GetUsage
// and the console's usage panel; and bounds the tenant label of the token
// metrics. Counts are this replica's, since its start.
package usage

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// Tenant labels that are not a tenant's id.
const (
	// Other stands for every tenant first seen after the limit.
	Other = "other"
	// None stands for calls made on no tenant's behalf.
	None = "none"
)

// Resolution is a ring's bucket width and span.
type Resolution struct {
	Width   time.Duration
	Buckets int
}

// The two rings.
var (
	Minutes = Resolution{Width: time.Minute, Buckets: 60}
	Hours   = Resolution{Width: time.Hour, Buckets: 24}
)

// Key is what a count is kept by.
type Key struct {
	Logical, Provider string
	// Tenant is the tenant's id, Other or None.
	Tenant string
	// named is true when Tenant is a tenant's id (a tenant called
	// "other" is not the Other bucket).
	named bool
}

// Counts are the tokens of the calls counted under one key.
type Counts struct {
	Calls, Prompt, Completion, Reasoning int64
}

func (c *Counts) add(o Counts) {
	c.Calls += o.Calls
	c.Prompt += o.Prompt
	c.Completion += o.Completion
	c.Reasoning += o.Reasoning
}

// Point is one key's counts in one bucket.
type Point struct {
	Start time.Time
	Key
	Counts
}

// Recorder counts. Safe for concurrent use; mu guards every field below it.
type Recorder struct {
	limit int
	now   func() time.Time

	mu      sync.Mutex
	tenants map[string]bool // tenants counted by name, at most limit
	rings   map[Resolution][]bucket
}

type bucket struct {
	start  time.Time
	counts map[Key]*Counts
}

// New returns a Recorder that counts at most limit tenants by name (at
// least 1); now is the clock (nil: time.Now).
func New(limit int, now func() time.Time) *Recorder {
	if now == nil {
		now = time.Now
	}
	r := &Recorder{limit: max(limit, 1), now: now, tenants: map[string]bool{}, rings: map[Resolution][]bucket{}}
	for _, res := range []Resolution{Minutes, Hours} {
		r.rings[res] = make([]bucket, res.Buckets)
	}
	return r
}

// Limit is how many tenants are counted by name.
func (r *Recorder) Limit() int { return r.limit }

func (r *Recorder) key(logical, provider, tenant string) Key {
	tenant = strings.TrimSpace(tenant)
	if tenant == "" {
		return Key{Logical: logical, Provider: provider, Tenant: None}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.tenants[tenant] {
		if len(r.tenants) >= r.limit {
			return Key{Logical: logical, Provider: provider, Tenant: Other}
		}
		r.tenants[tenant] = true
	}
	return Key{Logical: logical, Provider: provider, Tenant: tenant, named: true}
}

// Add counts one call's tokens and returns the label tenant is counted
// under: its id while fewer than the limit have been seen (or it was seen
// before), else Other; None for "". The first tenants seen keep their
// names for the life of the process, so a label never changes meaning and
// a metric series never moves between labels.
func (r *Recorder) Add(logical, provider, tenant string, c Counts) string {
	k := r.key(logical, provider, tenant)
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for res, ring := range r.rings {
		start := now.Truncate(res.Width)
		b := &ring[int(start.Unix()/int64(res.Width/time.Second))%res.Buckets]
		if !b.start.Equal(start) {
			*b = bucket{start: start, counts: map[Key]*Counts{}}
		}
		cur := b.counts[k]
		if cur == nil {
			cur = &Counts{}
			b.counts[k] = cur
		}
		cur.add(c)
	}
	return k.Tenant
}

// Filter says whose usage Series returns.
type Filter struct {
	// All returns every tenant's (Tenant empty) or the named one's.
	All bool
	// Tenant is the one tenant returned; with All false only its own
	// named counts (never Other or None).
	Tenant string
}

// Series returns the points of res's window ending now, oldest first, then
// by logical model, provider and tenant, and the window's start.
func (r *Recorder) Series(res Resolution, f Filter) ([]Point, time.Time) {
	now := r.now()
	from := now.Truncate(res.Width).Add(-time.Duration(res.Buckets-1) * res.Width)
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Point
	for _, b := range r.rings[res] {
		if b.start.Before(from) || b.start.After(now) {
			continue
		}
		for k, c := range b.counts {
			switch {
			case f.Tenant != "" && (k.Tenant != f.Tenant || (!f.All && !k.named)):
				continue
			case f.Tenant == "" && !f.All:
				continue
			}
			out = append(out, Point{Start: b.start, Key: k, Counts: *c})
		}
	}
	slices.SortFunc(out, func(a, b Point) int {
		if c := a.Start.Compare(b.Start); c != 0 {
			return c
		}
		return strings.Compare(a.Logical+"\x00"+a.Provider+"\x00"+a.Tenant, b.Logical+"\x00"+b.Provider+"\x00"+b.Tenant)
	})
	return out, from
}
