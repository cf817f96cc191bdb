package jobstore_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobstore"
)

// TestEveryQueryIsIndexed: with many writers (MongoDB), an index the store
// creates at start serves every query it makes (testkit.AssertIndexed):
// reads and versioned writes by _id, ListJobs with each filter and with a
// page key in both collections, the recovery sweep Live, Lapsed, Archive,
// and the relay's sweep of the live set.
func TestEveryQueryIsIndexed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, rt := testkit.MongoDBCounted(t)
	s := openStore(t, db)
	// Before any write, so no outbox is pending: the sweep publishes
	// nothing and needs no bus.
	if _, err := events.NewRelay(nil, s.Collection(), slog.New(slog.DiscardHandler)).Sweep(ctx); err != nil {
		t.Fatal(err)
	}

	now := time.Now().UTC().Truncate(time.Millisecond)
	root := newJob(uuid.NewString(), "", analysis.StatusComplete, now)
	tool := newJob(root.ID, root.ID, analysis.StatusFailed, now.Add(time.Millisecond))
	for _, j := range []*analysis.Job{root, tool} {
		if err := s.Insert(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Get(ctx, "acme", "research", tool.ID)
	if err != nil {
		t.Fatal(err)
	}
	// An analysis's children in one read of each collection.
	if _, err := s.GetMany(ctx, "acme", "research", []string{tool.ID, "not-created-yet"}); err != nil {
		t.Fatal(err)
	}
	got.UpdateTime = now.Add(time.Second)
	if err := s.Update(ctx, got, got.Version); err != nil {
		t.Fatal(err)
	}
	for _, after := range []string{"", uuid.NewString()} {
		if _, err := s.Live(ctx, now.Add(time.Hour), after, 10); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Lapsed(ctx, now, 10); err != nil {
		t.Fatal(err)
	}
	list := func() {
		t.Helper()
		base := analysis.ListQuery{Tenant: "acme", Project: "research", Limit: 1}
		for _, q := range []analysis.ListQuery{
			base,
			{Tenant: "acme", Project: "research", Limit: 1, Status: analysis.StatusFailed},
			{Tenant: "acme", Project: "research", Limit: 1, Type: analysis.TypeTool},
			{Tenant: "acme", Project: "research", Limit: 1, ParentID: root.ID},
			{Tenant: "acme", Project: "research", Limit: 1, From: now.Add(-time.Hour), To: now.Add(time.Hour)},
		} {
			_, next, err := s.List(ctx, q)
			if err != nil {
				t.Fatalf("List %+v: %v", q, err)
			}
			if next != "" {
				q.After = next
				if _, _, err := s.List(ctx, q); err != nil {
					t.Fatalf("List %+v: %v", q, err)
				}
			}
		}
	}
	list()
	if done, err := archiveOne(ctx, s, relayed, root, got); !done || err != nil {
		t.Fatalf("Archive = %v, %v", done, err)
	}
	if _, err := s.Get(ctx, "acme", "research", tool.ID); err != nil {
		t.Fatal(err)
	}
	list() // now from the archive
	testkit.AssertIndexed(t, db, rt)

	// An index of an earlier version is dropped at the next start; a
	// single writer keeps no secondary index at all.
	if _, err := db.Collection(jobstore.Collection).Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys: bson.D{{Key: "status", Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName("unfinished"),
	}); err != nil {
		t.Fatal(err)
	}
	openStore(t, db)
	if got := indexNames(t, db, jobstore.Collection); slices.Contains(got, "unfinished") || !slices.Contains(got, "stale") {
		t.Errorf("live indexes after a restart: %v", got)
	}
	mongox.MarkSingleWriter(db.Client())
	openStore(t, db)
	for _, coll := range []string{jobstore.Collection, jobstore.ArchiveCollection} {
		if got := indexNames(t, db, coll); !slices.Equal(got, []string{"_id_"}) {
			t.Errorf("%s indexes for a single writer: %v, want _id_ alone", coll, got)
		}
	}
}

// indexNames lists the indexes of db's collection coll by name.
func indexNames(t *testing.T, db *mongo.Database, coll string) []string {
	t.Helper()
	specs, err := db.Collection(coll).Indexes().ListSpecifications(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	return names
}
