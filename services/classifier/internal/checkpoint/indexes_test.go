package checkpoint

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// TestEveryQueryIsIndexed: with many writers (MongoDB), an index the store
// creates at start serves every query it makes (testkit.AssertIndexed):
// the reads and versioned writes by _id, MarkCorrupt, List by scope with
// and without a state in both collections, ArchiveFinished's {state: $in}
// over the live runs, and the relay's sweep of the live collection.
func TestEveryQueryIsIndexed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, rt := testkit.MongoDBCounted(t)
	s := openStore(t, db)
	m := machine(t)

	tr := m.Start("live", scope.GetTenantId(), scope.GetProjectId(), "i")
	rec, err := s.Create(ctx, tr.Run, &Lease{Owner: "a", ExpiresAt: time.Now().Add(time.Minute)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RenewLease(ctx, rec, Lease{Owner: "a", ExpiresAt: time.Now().Add(2 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, scope, "live"); err != nil {
		t.Fatal(err)
	}

	finishedRun(t, s, m, "done", "stopped")
	if err := s.ArchiveFinished(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, scope, "done"); err != nil {
		t.Fatalf("load archived: %v", err)
	}

	// A run whose header version is unreadable is stopped by scope.
	if _, err := s.Create(ctx, m.Start("broken", scope.GetTenantId(), scope.GetProjectId(), "i").Run, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection(Collection).UpdateOne(ctx, bson.D{{Key: "_id", Value: "broken"}}, bson.M{"$set": bson.M{"version": "seven"}}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Load(ctx, scope, "broken")
	var cerr *CorruptError
	if !errors.As(err, &cerr) {
		t.Fatalf("load damaged: %v, want a CorruptError", err)
	}
	if _, err := s.MarkCorrupt(ctx, scope, cerr, "damaged", nil); err != nil {
		t.Fatal(err)
	}

	for _, o := range []ListOptions{{Limit: 10}, {Limit: 10, State: statemachine.Planning}, {Offset: 1, Limit: 1}} {
		if _, err := s.List(ctx, scope, o); err != nil {
			t.Fatalf("list %+v: %v", o, err)
		}
	}
	if _, err := s.InFlight(ctx); err != nil {
		t.Fatal(err)
	}
	// No outbox is pending, so the sweep publishes nothing and needs no bus.
	if _, err := s.NewRelay(nil, slog.New(slog.DiscardHandler)).Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.AssertIndexed(t, db, rt)
}
