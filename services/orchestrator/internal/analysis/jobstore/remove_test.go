package jobstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobstore"
)

// TestWholeDocumentWrites: a single writer's mirror knows each live job's
// document, its outbox included, so every update and every removal of
// relayed entries (RemoveRelayed, the relay's remover) writes the whole
// document beneath the driver, and an entry removed stays removed: the
// next write does not bring it back. A removal while a write is held back
// writes the job as stored, not the held state, whose entries then go
// with it. A restarted store loads the documents and goes on the same way.
// A failed removal leaves a state held back as it was. A job whose
// document the mirror does not know (a write's outcome unknown, then read
// without its lock) is left to the relay's own removal until its next
// update reads it under the lock, and what the relay removed stays
// removed.
// With many writers RemoveRelayed declines every removal.
func TestWholeDocumentWrites(t *testing.T) {
	t.Parallel()
	eachCountedMode(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips, single bool) {
		ctx := context.Background()
		s, _, now := openNoted(t, db)
		s.SetLazyDelay(time.Hour) // held until the next write
		job := newJob("whole-root", "", analysis.StatusPending, now)
		if err := s.Insert(ctx, job, entry("a")); err != nil {
			t.Fatal(err)
		}
		want := func(status analysis.Status, ids ...string) {
			t.Helper()
			if got, gotIDs := stored(t, db, job.ID); got != status || !slices.Equal(gotIDs, ids) {
				t.Fatalf("stored %s %q, want %s %q", got, gotIDs, status, ids)
			}
		}
		writes := func(direct, commands int) {
			t.Helper()
			if d, c := rt.Count("update "+jobstore.Collection+" (sqlite)"), rt.Count("update "+jobstore.Collection); d != direct || c != commands {
				t.Fatalf("%d updates beneath the driver and %d update commands, want %d and %d (%s)", d, c, direct, commands, rt)
			}
			rt.Reset()
		}
		update := func(s *jobstore.Store, status analysis.Status, lazy bool, e string) {
			t.Helper()
			cur, err := s.Get(ctx, "acme", "research", job.ID)
			if err != nil {
				t.Fatal(err)
			}
			next := *cur
			next.Status = status
			write := s.Update
			if lazy {
				write = s.UpdateLazily
			}
			if err := write(ctx, &next, cur.Version, entry(e)); err != nil {
				t.Fatal(err)
			}
		}
		remove := func(s *jobstore.Store, wantDone bool, ids ...string) {
			t.Helper()
			if done, err := s.RemoveRelayed(ctx, job.ID, ids); err != nil || done != wantDone {
				t.Fatalf("RemoveRelayed(%q) = %v, %v; want %v", ids, done, err, wantDone)
			}
		}
		if !single {
			update(s, analysis.StatusRunning, false, "b")
			remove(s, false, "a")
			want(analysis.StatusRunning, "a", "b")
			return
		}

		rt.Reset()
		update(s, analysis.StatusRunning, false, "b")
		want(analysis.StatusRunning, "a", "b")
		writes(1, 0)
		remove(s, true, "a")
		want(analysis.StatusRunning, "b")
		writes(1, 0)
		remove(s, true, "a") // nothing left to remove: nothing written
		writes(0, 0)

		// Held back: the removal writes the job as stored.
		update(s, analysis.StatusComplete, true, "c")
		remove(s, true, "b")
		want(analysis.StatusRunning)
		update(s, analysis.StatusFailed, false, "d")
		want(analysis.StatusFailed, "c", "d")
		writes(2, 0)

		// A removal that fails (its outcome unknown) leaves the state
		// held back as it was, and the document unknown: the next write
		// reads it again under the lock and goes on whole.
		update(s, analysis.StatusRunning, true, "g")
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if done, err := s.RemoveRelayed(cancelled, job.ID, []string{"c"}); !done || err == nil {
			t.Fatalf("RemoveRelayed with a cancelled context = %v, %v; want done with an error", done, err)
		}
		if got, err := s.Get(ctx, "acme", "research", job.ID); err != nil || got.Status != analysis.StatusRunning {
			t.Fatalf("after a failed removal Get = %+v, %v; want the state held back (running)", got, err)
		}
		rt.Reset()
		update(s, analysis.StatusFailed, false, "h")
		if r, d := rt.Count("find "+jobstore.Collection), rt.Count("update "+jobstore.Collection+" (sqlite)"); r != 1 || d != 1 {
			t.Fatalf("the write after a failed removal: %d reads and %d whole writes, want 1 and 1 (%s)", r, d, rt)
		}
		want(analysis.StatusFailed, "c", "d", "g", "h")
		remove(s, true, "c", "d", "g", "h")
		want(analysis.StatusFailed)

		// Restarted: the documents are loaded, outboxes included.
		s2, _, _ := openNoted(t, db)
		rt.Reset()
		update(s2, analysis.StatusRunning, false, "c")
		update(s2, analysis.StatusRunning, false, "d")
		update(s2, analysis.StatusRunning, false, "e")
		want(analysis.StatusRunning, "c", "d", "e")
		remove(s2, true, "c")
		want(analysis.StatusRunning, "d", "e")
		writes(4, 0)

		// Unknown, then read without the lock: the relay removes itself;
		// the next update reads the document under the lock, so what the
		// relay removed stays removed, and goes on whole.
		s2.Forget(job.ID)
		if _, err := s2.Get(ctx, "acme", "research", job.ID); err != nil {
			t.Fatal(err)
		}
		remove(s2, false, "d")
		pullAll(t, db, job.ID, entry("d"))
		rt.Reset()
		update(s2, analysis.StatusComplete, false, "f")
		want(analysis.StatusComplete, "e", "f")
		writes(1, 0)
		remove(s2, true, "e")
		want(analysis.StatusComplete, "f")
	})
}

// pullAll removes entries from job id's outbox as the relay does itself.
func pullAll(t *testing.T, db *mongo.Database, id string, entries ...events.OutboxEntry) {
	t.Helper()
	update := bson.D{{Key: "$pullAll", Value: bson.D{{Key: events.OutboxField, Value: entries}}}}
	if _, err := db.Collection(jobstore.Collection).UpdateOne(context.Background(), bson.D{{Key: "_id", Value: id}}, update); err != nil {
		t.Fatal(err)
	}
}
