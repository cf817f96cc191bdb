package mongostore_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/mongostore"
)

// TestSingleWriterHoldsTouchesBack: a single writer writes a
// conversation's update time (set by each turn's release) up to a second
// after the release, once for all the turns of that second. Until then its
// reads, List among them (which reads the documents), show the newest
// time; then the document holds it with no Close; and Close writes at
// once what is held.
func TestSingleWriterHoldsTouchesBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, rt := testkit.MongoDBCounted(t)
	mongox.MarkSingleWriter(db.Client())
	s, err := mongostore.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	sc := conversation.Scope{TenantID: "acme"}
	t0 := time.Now().Add(-time.Hour)
	if err := s.Create(ctx, &conversation.Conversation{ID: "c1", Scope: sc, CreateTime: t0, UpdateTime: t0}); err != nil {
		t.Fatal(err)
	}
	stored := func() time.Time { // the document's update time, read by another client
		t.Helper()
		var d struct {
			UpdateTime time.Time `bson:"update_time"`
		}
		err := testkit.Uncounted(t, db).Collection(mongostore.ConversationsCollection).FindOne(ctx, bson.D{{Key: "_id", Value: "c1"}}).Decode(&d)
		if err != nil {
			t.Fatal(err)
		}
		return d.UpdateTime.UTC()
	}
	turns := func(n int, from time.Time) time.Time {
		t.Helper()
		var last time.Time
		for i := range n {
			at := from.Add(time.Duration(i) * time.Minute)
			c, err := s.AcquireLease(ctx, sc, "c1", conversation.Lease{ID: "turn", Holder: "h", Until: at.Add(time.Minute)}, at)
			if err != nil {
				t.Fatal(err)
			}
			last = conversation.Millis(at.Add(time.Second))
			if err := s.ReleaseLease(ctx, sc, "c1", c.Lease, last); err != nil {
				t.Fatal(err)
			}
		}
		return last
	}

	rt.Reset()
	last := turns(5, t0.Add(time.Minute))
	if c, err := s.Get(ctx, sc, "c1"); err != nil || !c.UpdateTime.Equal(last) {
		t.Fatalf("Get after 5 turns = %+v, %v; want update time %v", c, err, last)
	}
	list, _, err := s.List(ctx, sc, conversation.ListQuery{})
	if err != nil || len(list) != 1 || !list[0].UpdateTime.Equal(last) {
		t.Fatalf("List after 5 turns = %+v, %v; want update time %v", list, err, last)
	}
	testkit.Eventually(t, 3*time.Second, func() bool { return stored().Equal(last) }, "the update time written without a Close")
	if n := rt.Count("update conversations"); n > 2 {
		t.Errorf("5 turns wrote the update time %d times; want once (twice if a second passed between them): %s", n, rt)
	}

	last = turns(1, t0.Add(time.Hour))
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := stored(); !got.Equal(last) {
		t.Errorf("after Close the document's update time is %v; want %v", got, last)
	}
	last = turns(1, t0.Add(2*time.Hour))
	if got := stored(); !got.Equal(last) {
		t.Errorf("a release after Close left the update time %v; want %v written at once", got, last)
	}
}
