package labels

import (
	"context"
	"testing"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// TestEveryQueryIsIndexed: with many writers (MongoDB), every query the
// store makes is served by an index (testkit.AssertIndexed): Save inserts,
// a repeated Save is refused by the unique _id, and List reads by _id.
func TestEveryQueryIsIndexed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, rt := testkit.MongoDBCounted(t)
	s := NewStore(db)
	if err := s.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	scope := &commonv1.Scope{TenantId: "acme", ProjectId: "p"}
	cls := []statemachine.Classification{{ConversationID: "a", Label: statemachine.Resolved, Reason: "ok"}}
	for range 2 {
		if _, err := s.Save(ctx, scope, "run", cls); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.List(ctx, scope, "run", []string{"a", "b"}); err != nil || len(got) != 1 {
		t.Fatalf("List: %v, %v", got, err)
	}
	testkit.AssertIndexed(t, db, rt)
}
