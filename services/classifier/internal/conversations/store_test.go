package conversations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// Keys of different (tenant, project, id) differ, even where a separator
// would be ambiguous: a scope may contain '/' and ':'.
func TestKeysAreDistinct(t *testing.T) {
	t.Parallel()
	cases := []struct{ tenant, project, id string }{
		{"a/b", "c", "d"},
		{"a", "b/c", "d"},
		{"a", "b", "c/d"},
		{"a", "", "b/c/d"},
		{"", "a", "b/c/d"},
		{"1:a", "", "x"},
		{"1", "a", "x"},
		{"a", "1:", "x"},
	}
	seen := map[string]int{}
	for i, c := range cases {
		k := key(&commonv1.Scope{TenantId: c.tenant, ProjectId: c.project}, c.id)
		if j, dup := seen[k]; dup {
			t.Errorf("cases %d and %d share key %q", j, i, k)
		}
		seen[k] = i
	}
}

// A batch's conversations are read by _id, one round trip each, and an
// import writes by _id: no filter that makes FerretDB read the whole
// collection. Only an id that is not there costs a query by scope.
func TestGetAndUpsertGoByKey(t *testing.T) {
	t.Parallel()
	testkit.EachWriterModeCounted(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips) {
		ctx := context.Background()
		s := NewStore(db)
		if err := s.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		sample, err := Sample()
		if err != nil {
			t.Fatal(err)
		}
		rt.Reset()
		if n, err := s.Upsert(ctx, acme, sample); err != nil || n != len(sample) {
			t.Fatalf("Upsert: %d (%v)", n, err)
		}
		if scans := rt.NotExact(); len(scans) > 0 {
			t.Errorf("Upsert selected by more than _id: %v", scans)
		}
		// The same ids in another scope are other conversations.
		other := slices.Clone(sample[:2])
		other[0].Channel, other[1].Channel = "fax", "fax"
		if _, err := s.Upsert(ctx, globex, other); err != nil {
			t.Fatal(err)
		}
		ids := []string{sample[4].ID, sample[1].ID, sample[0].ID}
		rt.Reset()
		got, err := s.Get(ctx, acme, ids)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range got {
			if c.ID != ids[i] || c.Channel == "fax" || len(c.Messages) == 0 {
				t.Errorf("Get[%d] = %s %s (%d messages), want %s of acme", i, c.ID, c.Channel, len(c.Messages), ids[i])
			}
		}
		if want := fmt.Sprintf("find %s=%d", Collection, len(ids)); rt.String() != want {
			t.Errorf("round trips %q, want %q", rt.String(), want)
		}
		if scans := rt.NotExact(); len(scans) > 0 {
			t.Errorf("Get selected by more than _id: %v", scans)
		}
		if got, err := s.Get(ctx, globex, ids[2:]); err != nil || got[0].Channel != "fax" {
			t.Errorf("globex's copy: %+v (%v)", got, err)
		}
		if _, err := s.Get(ctx, globex, ids[:1]); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get of an id only acme has, in globex: %v", err)
		}
		if n, err := db.Collection(Collection).CountDocuments(ctx, bson.D{}); err != nil || n != int64(len(sample)+2) {
			t.Errorf("%d documents (%v), want %d", n, err, len(sample)+2)
		}
	})
}

// legacyDoc is a conversation as earlier versions stored it: an ObjectID
// _id, unique by (tenant, project, id).
func legacyDoc(scope *commonv1.Scope, c Conversation, channel string) bson.M {
	return bson.M{
		"tenant_id": scope.GetTenantId(), "project_id": scope.GetProjectId(), "id": c.ID,
		"channel": channel, "customer": c.Customer, "message_count": len(c.Messages),
		"messages": bson.A{bson.M{"role": "customer", "text": "from " + channel}},
	}
}

// Documents of earlier versions are found before the move (a replica of
// the earlier version may write them during an upgrade), moved to their
// keys by Prepare, and a move a crash cut short is finished by the next
// Prepare, keeping the copy under the key.
func TestPrepareMovesEarlierDocuments(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		coll := db.Collection(Collection)
		old := scopeIndex
		old.Unique = true
		if err := mongox.EnsureIndexes(ctx, coll, old); err != nil {
			t.Fatal(err)
		}
		sample, err := Sample()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range sample[:3] {
			if _, err := coll.InsertOne(ctx, legacyDoc(acme, c, "legacy")); err != nil {
				t.Fatal(err)
			}
		}
		s := NewStore(db)
		ids := []string{sample[2].ID, sample[0].ID}
		got, err := s.Get(ctx, acme, ids)
		if err != nil || got[0].ID != ids[0] || got[1].Channel != "legacy" {
			t.Fatalf("Get before the move: %+v (%v)", got, err)
		}

		if err := s.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		var stored []struct {
			ID any    `bson:"_id"`
			CI string `bson:"id"`
		}
		cur, err := coll.Find(ctx, bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		if err := cur.All(ctx, &stored); err != nil {
			t.Fatal(err)
		}
		if len(stored) != 3 {
			t.Fatalf("%d documents after the move, want 3", len(stored))
		}
		for _, d := range stored {
			if d.ID != key(acme, d.CI) {
				t.Errorf("document %s has _id %v, want %q", d.CI, d.ID, key(acme, d.CI))
			}
		}
		specs, err := coll.Indexes().ListSpecifications(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, sp := range specs {
			if sp.Name == scopeIndex.Name && sp.Unique != nil && *sp.Unique {
				t.Errorf("index %s is still unique", sp.Name)
			}
		}

		// A crash between the copy and the deletion: both are there. Find
		// lists the id once; Prepare keeps the copy under the key (written
		// later: newer) and deletes the original.
		if _, err := s.Upsert(ctx, acme, []Conversation{{ID: sample[0].ID, Channel: "newer", Messages: sample[0].Messages}}); err != nil {
			t.Fatal(err)
		}
		if _, err := coll.InsertOne(ctx, legacyDoc(acme, sample[0], "stale")); err != nil {
			t.Fatal(err)
		}
		found, err := s.Find(ctx, acme, nil, nil, 10)
		if want := []string{sample[0].ID, sample[1].ID, sample[2].ID}; err != nil || !slices.Equal(found, want) {
			t.Errorf("Find during a move: %v (%v), want %v", found, err, want)
		}
		if err := s.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := coll.CountDocuments(ctx, bson.D{}); err != nil || n != 3 {
			t.Errorf("%d documents after the second Prepare (%v), want 3", n, err)
		}
		got, err = s.Get(ctx, acme, ids[1:])
		if err != nil || got[0].Channel != "newer" {
			t.Errorf("after finishing the move: %+v (%v), want the newer copy", got, err)
		}
	})
}
