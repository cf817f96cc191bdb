// Package storetest is the behaviour every conversation.Store must have, as
// one test suite that each implementation runs over itself (the way
// nats-server runs one body over its memory and file stores), so the
// storage modes cannot drift apart.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
)

// Opener prepares a fresh, empty backing store for one test and returns a
// function that opens a Store on it. Every call of that function must return
// a Store sharing the same data, the way two replicas of the service share
// one database (an in-memory implementation returns the same Store).
type Opener func(t *testing.T) func() conversation.Store

// Run runs the suite over the stores open makes.
func Run(t *testing.T, open Opener) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, open func() conversation.Store)
	}{
		{"CreateGet", testCreateGet},
		{"List", testList},
		{"Delete", testDelete},
		{"Messages", testMessages},
		{"Lease", testLease},
		{"LeaseRace", testLeaseRace},
		{"Scope", testScope},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

var (
	t0     = time.Date(2025, 3, 1, 12, 0, 0, 123_456_789, time.UTC)
	scopeA = conversation.Scope{TenantID: "acme", ProjectID: "p1"}
	scopeB = conversation.Scope{TenantID: "acme", ProjectID: "p2"}
)

func mustCreate(t *testing.T, s conversation.Store, c conversation.Conversation) *conversation.Conversation {
	t.Helper()
	if err := s.Create(context.Background(), &c); err != nil {
		t.Fatalf("Create(%s): %v", c.ID, err)
	}
	return &c
}

func conv(id string, scope conversation.Scope, created time.Time) conversation.Conversation {
	return conversation.Conversation{ID: id, Scope: scope, Caller: "alice", Title: "t " + id, Strategy: "deepseek_single", CreateTime: created, UpdateTime: created}
}

func testCreateGet(t *testing.T, open func() conversation.Store) {
	ctx := context.Background()
	s := open()
	c := conv("c1", scopeA, t0)
	mustCreate(t, s, c)

	got, err := s.Get(ctx, scopeA, "c1")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	want := c
	want.CreateTime, want.UpdateTime = conversation.Millis(t0), conversation.Millis(t0)
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("Get mismatch (-want +got):\n%s", diff)
	}
	if err := s.Create(ctx, &c); !errors.Is(err, conversation.ErrAlreadyExists) {
		t.Errorf("second Create: got %v, want ErrAlreadyExists", err)
	}
	if _, err := s.Get(ctx, scopeA, "nope"); !errors.Is(err, conversation.ErrNotFound) {
		t.Errorf("Get(missing): got %v, want ErrNotFound", err)
	}
}

func testList(t *testing.T, open func() conversation.Store) {
	ctx := context.Background()
	s := open()
	// c0..c6, one second apart; c7 and c8 share c6's time, to test the tie
	// break by id; one conversation of bob's and one in another project.
	var want []string
	for i := range 7 {
		mustCreate(t, s, conv(fmt.Sprintf("c%d", i), scopeA, t0.Add(time.Duration(i)*time.Second)))
	}
	mustCreate(t, s, conv("c7", scopeA, t0.Add(6*time.Second)))
	mustCreate(t, s, conv("c8", scopeA, t0.Add(6*time.Second)))
	bob := conv("b1", scopeA, t0.Add(time.Hour))
	bob.Caller = "bob"
	mustCreate(t, s, bob)
	mustCreate(t, s, conv("other", scopeB, t0))
	want = []string{"c8", "c7", "c6", "c5", "c4", "c3", "c2", "c1", "c0"}

	var got []string
	token, pages := "", 0
	for {
		page, next, err := s.List(ctx, scopeA, conversation.ListQuery{Caller: "alice", PageSize: 4, PageToken: token})
		if err != nil {
			t.Fatalf("List page %d: %v", pages, err)
		}
		for _, c := range page {
			got = append(got, c.ID)
		}
		pages++
		if next == "" {
			break
		}
		if pages > 5 {
			t.Fatalf("List does not end: %v", got)
		}
		token = next
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("alice's conversations, newest first (-want +got):\n%s", diff)
	}
	if pages != 3 {
		t.Errorf("9 conversations in pages of 4 took %d pages, want 3", pages)
	}

	all, next, err := s.List(ctx, scopeA, conversation.ListQuery{})
	if err != nil {
		t.Fatalf("List(all callers): %v", err)
	}
	if len(all) != 10 || next != "" || all[0].ID != "b1" {
		t.Errorf("List(all callers) = %d conversations, first %q, next %q; want 10, b1, none", len(all), all[0].ID, next)
	}
	first, next, err := s.List(ctx, scopeA, conversation.ListQuery{PageSize: 9})
	if err != nil || len(first) != 9 || next == "" {
		t.Fatalf("List(all callers, page size 9) = %d conversations, next %q, %v; want 9 and a token", len(first), next, err)
	}
	last, next, err := s.List(ctx, scopeA, conversation.ListQuery{PageSize: 9, PageToken: next})
	if err != nil || len(last) != 1 || last[0].ID != "c0" || next != "" {
		t.Errorf("List(all callers, second page) = %d conversations, next %q, %v; want c0 alone", len(last), next, err)
	}

	// A time range: from inclusive, to exclusive, with paging inside it.
	var ranged []string
	token = ""
	for {
		page, next, err := s.List(ctx, scopeA, conversation.ListQuery{
			PageSize: 2, PageToken: token, CreatedFrom: t0.Add(2 * time.Second), CreatedTo: t0.Add(6 * time.Second),
		})
		if err != nil {
			t.Fatalf("List(time range): %v", err)
		}
		for _, c := range page {
			ranged = append(ranged, c.ID)
		}
		if token = next; token == "" || len(ranged) > 10 {
			break
		}
	}
	if fmt.Sprint(ranged) != "[c5 c4 c3 c2]" {
		t.Errorf("List(created in [t0+2s, t0+6s)) = %v, want [c5 c4 c3 c2]", ranged)
	}
	if since, _, err := s.List(ctx, scopeA, conversation.ListQuery{CreatedFrom: t0.Add(time.Minute)}); err != nil || len(since) != 1 || since[0].ID != "b1" {
		t.Errorf("List(created from t0+1m) = %v, %v; want b1 alone", since, err)
	}

	_, tok, err := s.List(ctx, scopeA, conversation.ListQuery{Caller: "alice", PageSize: 1})
	if err != nil || tok == "" {
		t.Fatalf("List(page size 1): token %q, err %v", tok, err)
	}
	for name, q := range map[string]conversation.ListQuery{
		"garbage":            {PageToken: "%%%"},
		"another caller":     {Caller: "bob", PageToken: tok},
		"another time range": {Caller: "alice", PageToken: tok, CreatedFrom: t0},
	} {
		if _, _, err := s.List(ctx, scopeA, q); !errors.Is(err, conversation.ErrInvalidPageToken) {
			t.Errorf("List with a %s token: got %v, want ErrInvalidPageToken", name, err)
		}
	}
	// Replayed by another scope (a key of another tenant or project), the
	// token is refused, not taken as a position in that scope's list.
	if _, _, err := s.List(ctx, scopeB, conversation.ListQuery{Caller: "alice", PageToken: tok}); !errors.Is(err, conversation.ErrInvalidPageToken) {
		t.Errorf("List in another scope with scope A's token: got %v, want ErrInvalidPageToken", err)
	}
}

func testDelete(t *testing.T, open func() conversation.Store) {
	ctx := context.Background()
	s := open()
	mustCreate(t, s, conv("c1", scopeA, t0))
	if err := s.Append(ctx, scopeA, "c1", conversation.Message{ID: "m1", Seq: 1, Role: conversation.RoleUser, Content: "hi", CreateTime: t0}); err != nil {
		t.Fatalf("Append: %v", err)
	}
	if _, err := s.AcquireLease(ctx, scopeA, "c1", conversation.Lease{ID: "l1", Holder: "r1", Until: t0.Add(time.Minute)}, t0); err != nil {
		t.Fatalf("AcquireLease: %v", err)
	}
	if err := s.Delete(ctx, scopeA, "c1", t0.Add(time.Second)); !errors.Is(err, conversation.ErrBusy) {
		t.Fatalf("Delete during a turn: got %v, want ErrBusy", err)
	}
	// Once the lease has expired (its holder died), the delete goes through.
	if err := s.Delete(ctx, scopeA, "c1", t0.Add(2*time.Minute)); err != nil {
		t.Fatalf("Delete after the lease expired: %v", err)
	}
	if _, err := s.Get(ctx, scopeA, "c1"); !errors.Is(err, conversation.ErrNotFound) {
		t.Errorf("Get after Delete: got %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, scopeA, "c1", t0); !errors.Is(err, conversation.ErrNotFound) {
		t.Errorf("second Delete: got %v, want ErrNotFound", err)
	}
	// A new conversation under the same id starts empty: the messages went too.
	mustCreate(t, s, conv("c1", scopeA, t0))
	msgs, err := s.Messages(ctx, scopeA, "c1", 0)
	if err != nil || len(msgs) != 0 {
		t.Errorf("Messages of a re-created conversation = %d messages, %v; want none", len(msgs), err)
	}
}

func testMessages(t *testing.T, open func() conversation.Store) {
	ctx := context.Background()
	s := open()
	mustCreate(t, s, conv("c1", scopeA, t0))
	all := []conversation.Message{
		{ID: "m1", Seq: 1, Role: conversation.RoleUser, Content: "What is BHP's price?", CreateTime: t0},
		{ID: "m2", Seq: 2, Role: conversation.RoleAssistant, Content: "Let me look.", Reasoning: "I should search.",
			ToolCalls:  []conversation.ToolCall{{ID: "call_1", Name: "rag_search", Arguments: `{"query":"BHP"}`}, {ID: "call_2", Name: "price", Arguments: `{}`}},
			CreateTime: t0.Add(time.Millisecond)},
		{ID: "m3", Seq: 3, Role: conversation.RoleTool, Content: "45.10", ToolCallID: "call_1", ToolName: "rag_search", CreateTime: t0.Add(2 * time.Millisecond)},
		{ID: "m4", Seq: 4, Role: conversation.RoleTool, Content: "boom", ToolCallID: "call_2", ToolName: "price", ToolError: true, CreateTime: t0.Add(3 * time.Millisecond)},
		{ID: "m5", Seq: 5, Role: conversation.RoleAssistant, Content: "It trades at", Cancelled: true, CreateTime: t0.Add(4 * time.Millisecond)},
	}
	if err := s.Append(ctx, scopeA, "c1", all[0]); err != nil {
		t.Fatalf("Append(m1): %v", err)
	}
	if err := s.Append(ctx, scopeA, "c1", all[1:]...); err != nil {
		t.Fatalf("Append(m2..m5): %v", err)
	}
	want := make([]conversation.Message, len(all))
	for i, m := range all {
		m.CreateTime = conversation.Millis(m.CreateTime)
		want[i] = m
	}
	got, err := s.Messages(ctx, scopeA, "c1", 0)
	if err != nil {
		t.Fatalf("Messages: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Messages(all) mismatch (-want +got):\n%s", diff)
	}
	got, err = s.Messages(ctx, scopeA, "c1", 2)
	if err != nil {
		t.Fatalf("Messages(last 2): %v", err)
	}
	if diff := cmp.Diff(want[3:], got); diff != "" {
		t.Errorf("Messages(last 2) mismatch (-want +got):\n%s", diff)
	}
	got, err = s.Messages(ctx, scopeA, "c1", 50)
	if err != nil || len(got) != 5 {
		t.Errorf("Messages(last 50) = %d messages, %v; want 5", len(got), err)
	}

	// A writer that lost its lease reuses a sequence number: refused.
	dup := conversation.Message{ID: "m-stale", Seq: 3, Role: conversation.RoleAssistant, Content: "stale", CreateTime: t0}
	if err := s.Append(ctx, scopeA, "c1", dup); !errors.Is(err, conversation.ErrLeaseLost) {
		t.Errorf("Append with a taken seq: got %v, want ErrLeaseLost", err)
	}
	if got, _ := s.Messages(ctx, scopeA, "c1", 0); len(got) != 5 {
		t.Errorf("after the refused Append there are %d messages, want 5", len(got))
	}
	if _, err := s.Messages(ctx, scopeA, "missing", 0); !errors.Is(err, conversation.ErrNotFound) {
		t.Errorf("Messages(missing): got %v, want ErrNotFound", err)
	}
}

func testLease(t *testing.T, open func() conversation.Store) {
	ctx := context.Background()
	s := open()
	mustCreate(t, s, conv("c1", scopeA, t0))
	l1 := conversation.Lease{ID: "l1", Holder: "replica-1", Until: t0.Add(30 * time.Second)}

	got, err := s.AcquireLease(ctx, scopeA, "c1", l1, t0)
	if err != nil {
		t.Fatalf("AcquireLease: %v", err)
	}
	if got.Lease.ID != "l1" || !got.Lease.Until.Equal(conversation.Millis(l1.Until)) || got.Title != "t c1" || got.Lease.Gen == 0 {
		t.Errorf("AcquireLease returned %+v, want the conversation holding l1", got)
	}
	held1 := got.Lease
	if c, _ := s.Get(ctx, scopeA, "c1"); !c.Lease.Held(t0.Add(time.Second)) {
		t.Errorf("Get shows lease %+v, want it held", c.Lease)
	}

	l2 := conversation.Lease{ID: "l2", Holder: "replica-2", Until: t0.Add(time.Minute)}
	_, err = s.AcquireLease(ctx, scopeA, "c1", l2, t0.Add(10*time.Second))
	var busy *conversation.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, conversation.ErrBusy) || busy.Holder != "replica-1" {
		t.Fatalf("second AcquireLease: got %v, want a BusyError naming replica-1", err)
	}

	// Renewal keeps the lease past its first expiry.
	if err := s.RenewLease(ctx, scopeA, "c1", held1, t0.Add(60*time.Second)); err != nil {
		t.Fatalf("RenewLease: %v", err)
	}
	if _, err := s.AcquireLease(ctx, scopeA, "c1", l2, t0.Add(40*time.Second)); !errors.Is(err, conversation.ErrBusy) {
		t.Fatalf("AcquireLease after renewal: got %v, want ErrBusy", err)
	}
	forged := held1
	forged.ID = "l2"
	for name, l := range map[string]conversation.Lease{"a forged": forged, "an empty": {}} {
		if err := s.RenewLease(ctx, scopeA, "c1", l, t0.Add(time.Hour)); !errors.Is(err, conversation.ErrLeaseLost) {
			t.Errorf("RenewLease with %s lease: got %v, want ErrLeaseLost", name, err)
		}
	}

	// After expiry another holder takes over; the old one is locked out.
	l2.Until = t0.Add(2 * time.Minute)
	got2, err := s.AcquireLease(ctx, scopeA, "c1", l2, t0.Add(61*time.Second))
	if err != nil {
		t.Fatalf("AcquireLease after expiry: %v", err)
	}
	if got2.Lease.Gen <= held1.Gen {
		t.Errorf("lease generations %d then %d, want increasing", held1.Gen, got2.Lease.Gen)
	}
	if err := s.RenewLease(ctx, scopeA, "c1", held1, t0.Add(time.Hour)); !errors.Is(err, conversation.ErrLeaseLost) {
		t.Errorf("RenewLease by the old holder: got %v, want ErrLeaseLost", err)
	}
	if err := s.ReleaseLease(ctx, scopeA, "c1", held1, t0); !errors.Is(err, conversation.ErrLeaseLost) {
		t.Errorf("ReleaseLease by the old holder: got %v, want ErrLeaseLost", err)
	}

	// Release frees it at once and stamps the update time.
	released := t0.Add(90 * time.Second)
	if err := s.ReleaseLease(ctx, scopeA, "c1", got2.Lease, released); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	if err := s.ReleaseLease(ctx, scopeA, "c1", got2.Lease, released); !errors.Is(err, conversation.ErrLeaseLost) {
		t.Errorf("second ReleaseLease: got %v, want ErrLeaseLost", err)
	}
	c, err := s.Get(ctx, scopeA, "c1")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if c.Lease != (conversation.Lease{}) || !c.UpdateTime.Equal(conversation.Millis(released)) {
		t.Errorf("after release: lease %+v, update time %v; want free, %v", c.Lease, c.UpdateTime, conversation.Millis(released))
	}
	l3 := conversation.Lease{ID: "l3", Holder: "replica-1", Until: released.Add(time.Minute)}
	if _, err := s.AcquireLease(ctx, scopeA, "c1", l3, released); err != nil {
		t.Errorf("AcquireLease right after release: %v", err)
	}
	if _, err := s.AcquireLease(ctx, scopeA, "missing", l3, released); !errors.Is(err, conversation.ErrNotFound) {
		t.Errorf("AcquireLease(missing): got %v, want ErrNotFound", err)
	}
}

// testLeaseRace has many goroutines on two Store instances (two replicas)
// race for one lease: exactly one may win.
func testLeaseRace(t *testing.T, open func() conversation.Store) {
	ctx := context.Background()
	replicas := []conversation.Store{open(), open()}
	mustCreate(t, replicas[0], conv("c1", scopeA, t0))
	const racers = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
		errs    []error
	)
	start := make(chan struct{})
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			id := fmt.Sprintf("lease-%d", i)
			_, err := replicas[i%2].AcquireLease(ctx, scopeA, "c1", conversation.Lease{ID: id, Holder: id, Until: t0.Add(time.Minute)}, t0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				winners = append(winners, id)
			case !errors.Is(err, conversation.ErrBusy):
				errs = append(errs, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("AcquireLease failed with something other than ErrBusy: %v", errs)
	}
	if len(winners) != 1 {
		t.Fatalf("%d racers took the lease (%v), want exactly 1", len(winners), winners)
	}
	c, err := replicas[1].Get(ctx, scopeA, "c1")
	if err != nil || c.Lease.ID != winners[0] {
		t.Errorf("stored lease = %+v (%v), want %s", c.Lease, err, winners[0])
	}
}

// testScope checks that no operation reaches into another project.
func testScope(t *testing.T, open func() conversation.Store) {
	ctx := context.Background()
	s := open()
	mustCreate(t, s, conv("c1", scopeA, t0))
	if err := s.Append(ctx, scopeA, "c1", conversation.Message{ID: "m1", Seq: 1, Role: conversation.RoleUser, Content: "secret", CreateTime: t0}); err != nil {
		t.Fatalf("Append: %v", err)
	}
	other := []struct {
		op string
		fn func() error
	}{
		{"Get", func() error { _, err := s.Get(ctx, scopeB, "c1"); return err }},
		{"Messages", func() error { _, err := s.Messages(ctx, scopeB, "c1", 0); return err }},
		{"AcquireLease", func() error {
			_, err := s.AcquireLease(ctx, scopeB, "c1", conversation.Lease{ID: "x", Until: t0.Add(time.Minute)}, t0)
			return err
		}},
		{"Delete", func() error { return s.Delete(ctx, scopeB, "c1", t0) }},
		{"Delete in another tenant", func() error { return s.Delete(ctx, conversation.Scope{TenantID: "evil", ProjectID: "p1"}, "c1", t0) }},
	}
	for _, o := range other {
		if err := o.fn(); !errors.Is(err, conversation.ErrNotFound) {
			t.Errorf("%s from another scope: got %v, want ErrNotFound", o.op, err)
		}
	}
	list, _, err := s.List(ctx, scopeB, conversation.ListQuery{})
	if err != nil || len(list) != 0 {
		t.Errorf("List in another project = %d conversations, %v; want none", len(list), err)
	}
	if msgs, err := s.Messages(ctx, scopeA, "c1", 0); err != nil || len(msgs) != 1 {
		t.Errorf("the owner still sees %d messages (%v), want 1", len(msgs), err)
	}
}
