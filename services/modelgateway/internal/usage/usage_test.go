package usage

import (
	"fmt"
	"testing"
	"time"
)

// clock is a settable test clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestTenantsPastTheLimitAreOther(t *testing.T) {
	t.Parallel()
	r := New(2, nil)
	for _, tc := range []struct{ tenant, want string }{
		{"acme", "acme"},
		{"", None},
		{"globex", "globex"},
		{"initech", Other}, // third tenant: past the limit
		{"acme", "acme"},   // seen before: keeps its name
		{"other", Other},   // a tenant named like the bucket is still past the limit
		{"initech", Other},
	} {
		if got := r.Add("chat", "sim", tc.tenant, Counts{Calls: 1, Prompt: 1}); got != tc.want {
			t.Errorf("Add(%q) label %q, want %q", tc.tenant, got, tc.want)
		}
	}
}

func TestSeriesBucketsAndScopes(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2026, 3, 1, 10, 0, 30, 0, time.UTC)}
	r := New(2, c.now)
	r.Add("chat", "sim", "acme", Counts{Calls: 1, Prompt: 10, Completion: 5})
	r.Add("chat", "sim", "acme", Counts{Calls: 1, Prompt: 1, Completion: 1, Reasoning: 1})
	r.Add("embed", "sim", "globex", Counts{Calls: 1, Prompt: 7})
	r.Add("chat", "sim", "initech", Counts{Calls: 1, Prompt: 100}) // other
	r.Add("chat", "sim", "", Counts{Calls: 1, Prompt: 3})          // none
	c.t = c.t.Add(time.Minute)
	r.Add("chat", "sim", "acme", Counts{Calls: 1, Prompt: 2})

	all, from := r.Series(Minutes, Filter{All: true})
	if want := time.Date(2026, 3, 1, 9, 2, 0, 0, time.UTC); !from.Equal(want) {
		t.Errorf("window starts %s, want %s", from, want)
	}
	var got []string
	for _, p := range all {
		got = append(got, fmt.Sprintf("%s %s/%s/%s calls=%d p=%d c=%d r=%d", p.Start.Format("15:04"), p.Logical, p.Provider, p.Tenant, p.Calls, p.Prompt, p.Completion, p.Reasoning))
	}
	want := []string{
		"10:00 chat/sim/acme calls=2 p=11 c=6 r=1",
		"10:00 chat/sim/none calls=1 p=3 c=0 r=0",
		"10:00 chat/sim/other calls=1 p=100 c=0 r=0",
		"10:00 embed/sim/globex calls=1 p=7 c=0 r=0",
		"10:01 chat/sim/acme calls=1 p=2 c=0 r=0",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("all tenants:\n got %q\nwant %q", got, want)
	}

	for _, tc := range []struct {
		name   string
		f      Filter
		points int
	}{
		{"a tenant sees its own", Filter{Tenant: "acme"}, 2},
		{"a tenant past the limit sees nothing, not other's counts", Filter{Tenant: "initech"}, 0},
		{"a tenant named other is not the other bucket", Filter{Tenant: Other}, 0},
		{"a tenant named none is not the none bucket", Filter{Tenant: None}, 0},
		{"no tenant and not all: nothing", Filter{}, 0},
		{"all, one tenant", Filter{All: true, Tenant: "globex"}, 1},
		{"all, the other bucket", Filter{All: true, Tenant: Other}, 1},
	} {
		if pts, _ := r.Series(Minutes, tc.f); len(pts) != tc.points {
			t.Errorf("%s: %d points, want %d: %+v", tc.name, len(pts), tc.points, pts)
		}
	}

	// The hour ring holds both minutes in one bucket.
	hours, _ := r.Series(Hours, Filter{Tenant: "acme"})
	if len(hours) != 1 || hours[0].Calls != 3 || hours[0].Prompt != 13 {
		t.Errorf("hours: %+v", hours)
	}

	// An hour later the minute ring has forgotten, the hour ring has not;
	// a reused slot starts from zero.
	c.t = c.t.Add(time.Hour)
	if pts, _ := r.Series(Minutes, Filter{All: true}); len(pts) != 0 {
		t.Errorf("minutes an hour later: %+v", pts)
	}
	r.Add("chat", "sim", "acme", Counts{Calls: 1, Prompt: 1})
	if pts, _ := r.Series(Minutes, Filter{Tenant: "acme"}); len(pts) != 1 || pts[0].Prompt != 1 {
		t.Errorf("reused minute slot: %+v", pts)
	}
	if pts, _ := r.Series(Hours, Filter{Tenant: "acme"}); len(pts) != 2 {
		t.Errorf("hours a day apart: %+v", pts)
	}
	c.t = c.t.Add(24 * time.Hour)
	if pts, _ := r.Series(Hours, Filter{All: true}); len(pts) != 0 {
		t.Errorf("hours a day later: %+v", pts)
	}
}
