package mongostore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
)

// TestWindowRecoversAfterCrash: a holder that died between storing a
// message and updating the window leaves the window behind. The replica
// that takes over the expired lease must still see that message and
// continue the sequence after it.
func TestWindowRecoversAfterCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := New(ctx, testkit.MongoDB(t))
	if err != nil {
		t.Fatal(err)
	}
	sc := conversation.Scope{TenantID: "acme"}
	t0 := time.Now()
	if err := s.Create(ctx, &conversation.Conversation{ID: "c1", Scope: sc, CreateTime: t0, UpdateTime: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, sc, "c1", conversation.Lease{ID: "dead", Holder: "pod-1", Until: t0.Add(30 * time.Second)}, t0); err != nil {
		t.Fatal(err)
	}
	msg := func(seq int64, content string) conversation.Message {
		return conversation.Message{ID: content, Seq: seq, Role: conversation.RoleUser, Content: content, CreateTime: t0}
	}
	if err := s.Append(ctx, sc, "c1", msg(1, "m1"), msg(2, "m2")); err != nil {
		t.Fatal(err)
	}
	// The crash: message 3 is stored, the window update never happens, and
	// the lease is never released.
	if _, err := s.msgs.InsertOne(ctx, newMsgDoc(sc, "c1", msg(3, "m3"))); err != nil {
		t.Fatal(err)
	}

	if _, err := s.AcquireLease(ctx, sc, "c1", conversation.Lease{ID: "next", Holder: "pod-2", Until: t0.Add(2 * time.Minute)}, t0.Add(31*time.Second)); err != nil {
		t.Fatalf("taking over the expired lease: %v", err)
	}
	got, err := s.Messages(ctx, sc, "c1", 20)
	if err != nil || len(got) != 3 || got[2].Content != "m3" {
		t.Fatalf("Messages after the takeover = %+v, %v; want m1..m3", got, err)
	}
	if err := s.Append(ctx, sc, "c1", msg(4, "m4")); err != nil {
		t.Fatalf("Append after the takeover: %v", err)
	}
	got, err = s.Messages(ctx, sc, "c1", 3)
	if err != nil || len(got) != 3 || got[0].Content != "m2" || got[2].Content != "m4" {
		t.Fatalf("window after the repair = %+v, %v; want m2..m4", got, err)
	}
	var w windowDoc
	if _, err := findByID(ctx, s.windows, "c1", &w); err != nil || w.Suspect || w.LastSeq != 4 {
		t.Errorf("window = %+v (%v), want current and trusted again", w, err)
	}
	if err := s.Append(ctx, sc, "c1", msg(4, "stale")); !errors.Is(err, conversation.ErrLeaseLost) {
		t.Errorf("a reused sequence number: %v, want ErrLeaseLost", err)
	}
}
