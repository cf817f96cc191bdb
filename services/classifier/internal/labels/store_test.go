package labels

import (
	"context"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// Saving a batch twice stores each label once and keeps the first answer;
// List reads back what the run labelled, in its scope only.
func TestSaveIsIdempotent(t *testing.T) {
	t.Parallel()
	testkit.EachWriterModeCounted(t, func(t *testing.T, db *mongo.Database, _ *testkit.RoundTrips) {
		ctx := context.Background()
		s := NewStore(db)
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
		// Asked in saving order, with a repeat and a conversation never
		// labelled: sorted, each once, the unlabelled one left out.
		got, err := s.List(ctx, scope, "run-1", []string{"b", "a", "c", "b", "never"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 || got[0].ConversationID != "a" || got[1].ConversationID != "b" || got[2].ConversationID != "c" ||
			got[1].Label != statemachine.Unresolved || got[1].SavedAt.IsZero() || got[1].RunID != "run-1" {
			t.Errorf("labels %+v", got)
		}
		if got, err := s.List(ctx, scope, "run-2", []string{"a", "b"}); err != nil || len(got) != 1 || got[0].ConversationID != "b" {
			t.Errorf("run-2 labels %+v (%v)", got, err)
		}
		if other, err := s.List(ctx, &commonv1.Scope{TenantId: "globex"}, "run-1", []string{"a", "b", "c"}); err != nil || len(other) != 0 {
			t.Errorf("another tenant sees %d labels (%v)", len(other), err)
		}
	})
}

// The labels of a run's end are read by _id, one round trip each, however
// many labels earlier runs left in the collection.
func TestListCostFollowsTheRun(t *testing.T) {
	t.Parallel()
	testkit.EachWriterModeCounted(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips) {
		ctx := context.Background()
		s := NewStore(db)
		if err := s.EnsureIndexes(ctx); err != nil {
			t.Fatal(err)
		}
		scope := &commonv1.Scope{TenantId: "acme", ProjectId: "support"}
		var ids []string
		for r := range 20 {
			var batch []statemachine.Classification
			for c := range 5 {
				batch = append(batch, statemachine.Classification{ConversationID: fmt.Sprintf("c%d", c), Label: statemachine.Resolved, Reason: "ok"})
			}
			if _, err := s.Save(ctx, scope, fmt.Sprintf("run-%d", r), batch); err != nil {
				t.Fatal(err)
			}
			if ids == nil {
				for _, c := range batch {
					ids = append(ids, c.ConversationID)
				}
			}
		}
		rt.Reset()
		got, err := s.List(ctx, scope, "run-7", ids)
		if err != nil || len(got) != len(ids) {
			t.Fatalf("List: %d labels (%v)", len(got), err)
		}
		if want := fmt.Sprintf("find %s=%d", Collection, len(ids)); rt.String() != want {
			t.Errorf("round trips %q, want %q", rt.String(), want)
		}
		if scans := rt.NotExact(); len(scans) > 0 {
			t.Errorf("List selected by more than _id: %v", scans)
		}
	})
}
