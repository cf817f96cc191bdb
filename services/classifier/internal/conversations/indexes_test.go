package conversations

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/plan"
)

// TestEveryQueryIsIndexed: with many writers (MongoDB), an index the store
// creates at start serves every query it makes (testkit.AssertIndexed):
// Prepare's search for documents of earlier versions, imports and reads by
// _id, the fallback by scope and id, Count, and Find by scope in id order
// with what a plan's filter adds beside it. A plan's equalities are the
// user's own: scope_id serves the scope and the order, and MongoDB applies
// them to the documents it walks.
func TestEveryQueryIsIndexed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, rt := testkit.MongoDBCounted(t)
	s := NewStore(db)
	sample, err := Sample()
	if err != nil {
		t.Fatal(err)
	}
	// A document of an earlier version, for Prepare to move.
	if _, err := db.Collection(Collection).InsertOne(ctx, legacyDoc(acme, sample[0], "legacy")); err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Upsert(ctx, acme, sample); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, acme, []string{sample[1].ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, acme, []string{"not-there"}); err == nil {
		t.Fatal("Get of an unknown id succeeded")
	}
	if _, err := s.Count(ctx, acme); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`{}`, `{"messages.text": {"$regex": "refund", "$options": "i"}}`, `{"channel": "email"}`} {
		f, err := plan.Compile(q)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Find(ctx, acme, f, []string{sample[0].ID}, 10); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Find(ctx, acme, bson.D{}, nil, 10); err != nil {
		t.Fatal(err)
	}
	testkit.AssertIndexed(t, db, rt, testkit.Scan{
		Shape: "find classifier_conversations {channel: eq, project_id: eq, tenant_id: eq, id: filter} sort {id: 1} limit",
		Why:   "a plan's equality on a field of the user's choosing: scope_id walks the scope in id order",
	})
}
