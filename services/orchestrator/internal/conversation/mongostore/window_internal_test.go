package mongostore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
)

// TestLateWindowWriteDoesNotRegress: a holder A whose lease was taken over,
// writing its window after its successor B wrote a newer one, leaves the
// newer one in place, so the next turn reads every message and numbers its
// own after them. With many writers A and B are two replicas (two Stores);
// a single writer is one process, so one Store serves both turns.
func TestLateWindowWriteDoesNotRegress(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		a, err := New(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		b := a
		if !mongox.SingleWriter(db) {
			if b, err = New(ctx, db); err != nil {
				t.Fatal(err)
			}
		}
		scope := conversation.Scope{TenantID: "acme"}
		t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		if err := a.Create(ctx, &conversation.Conversation{ID: "c1", Scope: scope, CreateTime: t0, UpdateTime: t0}); err != nil {
			t.Fatal(err)
		}
		msg := func(seq int64) conversation.Message {
			return conversation.Message{ID: fmt.Sprint("m", seq), Seq: seq, Role: conversation.RoleUser, Content: "x", CreateTime: t0}
		}
		for seq := int64(1); seq <= 2; seq++ {
			if err := a.Append(ctx, scope, "c1", msg(seq)); err != nil {
				t.Fatal(err)
			}
		}
		// A inserts its message 3, then stalls before writing its window.
		late := newMsgDoc(scope, "c1", msg(3))
		if _, err := a.msgs.InsertOne(ctx, late); err != nil {
			t.Fatal(err)
		}
		// B took the conversation over and appends message 4.
		if err := b.Append(ctx, scope, "c1", msg(4)); err != nil {
			t.Fatal(err)
		}
		// A wakes up and writes its window for message 3.
		if err := a.cacheRecent(ctx, "c1", []msgDoc{late}); err != nil {
			t.Fatalf("late window write: %v", err)
		}
		fresh, err := New(ctx, db) // a reader with no cache of its own
		if err != nil {
			t.Fatal(err)
		}
		// A single writer stores its window only now and then (see
		// windowDoc): what counts is what a reader gets from it.
		if !mongox.SingleWriter(db) {
			var w windowDoc
			if _, err := findByID(ctx, fresh.windows, "c1", &w); err != nil || w.LastSeq != 4 || len(w.Recent) != 4 {
				t.Fatalf("window after a late write: last_seq %d with %d messages (%v), want 4 and 4", w.LastSeq, len(w.Recent), err)
			}
		}
		for _, r := range []*Store{fresh, b} {
			got, err := r.Messages(ctx, scope, "c1", 0)
			if err != nil {
				t.Fatal(err)
			}
			if seqs := fmt.Sprint(seqsOf(got)); seqs != "[1 2 3 4]" {
				t.Fatalf("messages after a late window write: %s, want [1 2 3 4]", seqs)
			}
		}
		if err := b.Append(ctx, scope, "c1", msg(5)); err != nil {
			t.Fatalf("next append: %v", err)
		}
	})
}

func seqsOf(msgs []conversation.Message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.Seq
	}
	return out
}

// TestSingleWriterStoresItsWindowNowAndThen: a single writer writes the
// window document once every windowEvery messages, not at every append
// (on FerretDB each write parses and rewrites the whole window), and a
// store that starts over the lagging document — the process restarted —
// still reads every message, in order, and appends after them.
func TestSingleWriterStoresItsWindowNowAndThen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, rt := testkit.MongoDBCounted(t)
	mongox.MarkSingleWriter(db.Client())
	a, err := New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	scope := conversation.Scope{TenantID: "acme"}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := a.Create(ctx, &conversation.Conversation{ID: "c1", Scope: scope, CreateTime: t0, UpdateTime: t0}); err != nil {
		t.Fatal(err)
	}
	msg := func(seq int64) conversation.Message {
		return conversation.Message{ID: fmt.Sprint("m", seq), Seq: seq, Role: conversation.RoleUser, Content: fmt.Sprint("message ", seq), CreateTime: t0}
	}
	rt.Reset()
	for seq := int64(1); seq <= 40; seq++ {
		if err := a.Append(ctx, scope, "c1", msg(seq)); err != nil {
			t.Fatal(err)
		}
	}
	counts := rt.String()
	if want := "update " + WindowsCollection + "=2"; !strings.Contains(counts+" ", want+" ") {
		t.Errorf("40 appends: %s, want %s (at messages 16 and 32)", counts, want)
	}
	check := func(r *Store, last int, from, to int64) {
		t.Helper()
		got, err := r.Messages(ctx, scope, "c1", last)
		if err != nil {
			t.Fatal(err)
		}
		var want []int64
		for seq := from; seq <= to; seq++ {
			want = append(want, seq)
		}
		if fmt.Sprint(seqsOf(got)) != fmt.Sprint(want) {
			t.Fatalf("Messages(last %d): %v, want %v", last, seqsOf(got), want)
		}
		for _, m := range got {
			if m.Content != fmt.Sprint("message ", m.Seq) {
				t.Fatalf("message %d reads %q", m.Seq, m.Content)
			}
		}
	}
	check(a, 0, 1, 40)
	check(a, 10, 31, 40)
	// A restart: the stored window ends at 32.
	b, err := New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	check(b, 10, 31, 40)
	check(b, 0, 1, 40)
	c, err := New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Append(ctx, scope, "c1", msg(41), msg(42)); err != nil {
		t.Fatal(err)
	}
	check(c, 5, 38, 42)
	d, err := New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	check(d, 32, 11, 42)
}
