package jobstore_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobstore"
)

// notes records what the store tells its relay: one call per write.
type notes struct {
	mu     sync.Mutex
	writes [][]string // the entry ids of each NotifyEntries, in order
	docs   int        // NotifyDocument calls
}

func (n *notes) NotifyDocument(any) { n.mu.Lock(); n.docs++; n.mu.Unlock() }

func (n *notes) NotifyEntries(_ any, entries ...events.OutboxEntry) {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	n.mu.Lock()
	n.writes = append(n.writes, ids)
	n.mu.Unlock()
}

// count is how many writes the relay was told about.
func (n *notes) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.writes) + n.docs
}

func (n *notes) entryWrites() [][]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.writes)
}

// openNoted opens a store on db whose relay is notes, and the time its jobs
// are created at.
func openNoted(t *testing.T, db *mongo.Database) (*jobstore.Store, *notes, time.Time) {
	t.Helper()
	s := openStore(t, db)
	relay := &notes{}
	s.SetRelay(relay)
	return s, relay, time.Now().UTC().Truncate(time.Millisecond)
}

// stored reads job id's status and outbox entry ids from the database.
func stored(t *testing.T, db *mongo.Database, id string) (analysis.Status, []string) {
	t.Helper()
	var doc struct {
		Status analysis.Status      `bson:"status"`
		Outbox []events.OutboxEntry `bson:"outbox"`
	}
	if err := db.Collection(jobstore.Collection).FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(doc.Outbox))
	for i, e := range doc.Outbox {
		ids[i] = e.ID
	}
	return doc.Status, ids
}

func entry(id string) events.OutboxEntry {
	return events.OutboxEntry{ID: id, Subject: "am.evt.acme.job." + id, Data: []byte(id)}
}

// A single writer holds a lazy write back: reads see it at once, the
// database gets it with the job's next write (one write, the entries of
// both in order), or on its own after LazyDelay, or at Flush; a job with a
// write held back is not archived. With many writers it is written at
// once.
func TestUpdateLazily(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		s, relay, now := openNoted(t, db)
		single := s.SoleWriter()

		job := newJob("lazy-root", "", analysis.StatusPending, now)
		if err := s.Insert(ctx, job, entry("pending")); err != nil {
			t.Fatal(err)
		}
		claim := *job
		claim.Status = analysis.StatusRunning
		if err := s.UpdateLazily(ctx, &claim, job.Version, entry("running")); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Get(ctx, "acme", "research", job.ID); err != nil || got.Status != analysis.StatusRunning || got.Version != claim.Version {
			t.Fatalf("Get after UpdateLazily = %+v, %v; want it running at version %d", got, err, claim.Version)
		}
		status, _ := stored(t, db, job.ID)
		if want := map[bool]analysis.Status{true: analysis.StatusPending, false: analysis.StatusRunning}[single]; status != want {
			t.Fatalf("stored status right after UpdateLazily = %s, want %s", status, want)
		}
		if single {
			if done, err := archiveOne(ctx, s, relayed, &claim); done || err != nil {
				t.Fatalf("Archive of a job with a write held back = %v, %v; want it left live", done, err)
			}
		}
		result := claim
		result.Status = analysis.StatusComplete
		if err := s.Update(ctx, &result, claim.Version, entry("complete")); err != nil {
			t.Fatal(err)
		}
		status, ids := stored(t, db, job.ID)
		if status != analysis.StatusComplete || !slices.Equal(ids, []string{"pending", "running", "complete"}) {
			t.Errorf("stored after the next write: %s %v; want complete with pending, running, complete", status, ids)
		}
		if single {
			want := [][]string{{"pending"}, {"running", "complete"}} // one write for both
			if got := relay.entryWrites(); !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("writes told to the relay %v, want %v", got, want)
			}
		} else if n := relay.count(); n != 3 {
			t.Errorf("%d writes told to the relay, want 3", n)
		}

		// Alone, a held write goes after LazyDelay; Flush writes at once.
		for _, flush := range []bool{false, true} {
			j := newJob("lazy-"+map[bool]string{false: "timer", true: "flush"}[flush], "", analysis.StatusPending, now)
			if err := s.Insert(ctx, j); err != nil {
				t.Fatal(err)
			}
			next := *j
			next.Status = analysis.StatusRunning
			start := time.Now()
			if err := s.UpdateLazily(ctx, &next, j.Version, entry(j.ID+"-running")); err != nil {
				t.Fatal(err)
			}
			if flush {
				s.Flush()
			}
			testkit.Eventually(t, 5*time.Second, func() bool {
				status, ids := stored(t, db, j.ID)
				return status == analysis.StatusRunning && slices.Equal(ids, []string{j.ID + "-running"})
			}, "the held write stored")
			if took := time.Since(start); single && !flush && took < jobstore.LazyDelay {
				t.Errorf("a held write was stored after %v, before LazyDelay", took)
			}
		}
		if !single {
			return
		}
		// The relay is told right after the write is stored, which the
		// loop above saw: a held write's timer may not have told it yet.
		got := relay.entryWrites()
		for deadline := time.Now().Add(5 * time.Second); len(got) < 4 && time.Now().Before(deadline); got = relay.entryWrites() {
			time.Sleep(10 * time.Millisecond)
		}
		if len(got) != 4 {
			t.Errorf("writes told to the relay %v; want 4", got)
		}
	})
}
