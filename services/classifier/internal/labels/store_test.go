package labels

import (
	"context"
	"testing"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// Saving a batch twice stores each label once and keeps the first answer.
func TestSaveIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewStore(testkit.MongoDB(t))
	if err := s.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	scope := &commonv1.Scope{TenantId: "acme"}
	batch := []statemachine.Classification{
		{ConversationID: "b", Label: statemachine.Unresolved, Reason: "pending"},
		{ConversationID: "a", Label: statemachine.Resolved, Reason: "fixed"},
	}
	if n, err := s.Save(ctx, scope, "run-1", batch); err != nil || n != 2 {
		t.Fatalf("first save: %d new (%v)", n, err)
	}
	again := append(batch, statemachine.Classification{ConversationID: "c", Label: statemachine.Resolved})
	again[0].Label = statemachine.Resolved
	if n, err := s.Save(ctx, scope, "run-1", again); err != nil || n != 1 {
		t.Fatalf("second save: %d new (%v), want only c", n, err)
	}
	if n, err := s.Save(ctx, scope, "run-2", batch[:1]); err != nil || n != 1 {
		t.Fatalf("another run labels b too: %d (%v)", n, err)
	}
	got, err := s.List(ctx, scope, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ConversationID != "a" || got[1].ConversationID != "b" || got[1].Label != statemachine.Unresolved || got[1].SavedAt.IsZero() {
		t.Errorf("labels %+v", got)
	}
	if other, err := s.List(ctx, &commonv1.Scope{TenantId: "globex"}, "run-1"); err != nil || len(other) != 0 {
		t.Errorf("another tenant sees %d labels (%v)", len(other), err)
	}
}
