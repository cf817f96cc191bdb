package intake_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	"github.com/agentmesh/agentmesh/services/indexer/internal/embed"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intake"
)

// TestFailedIngestsAreFinished: an ingest that fails after its first write
// (the document saved, unindexed; the caller got the error) is finished
// while the process runs, as reconciliation finishes one a crash cut:
// before, such a document stayed unsearchable and unextracted until the
// next start. A single writer finishes it within seconds; with many
// writers, once its claim has lapsed (another replica may be ingesting it).
// A document deleted after its ingest failed stays deleted.
func TestFailedIngestsAreFinished(t *testing.T) {
	t.Parallel()
	for _, single := range []bool{true, false} {
		name := map[bool]string{true: "single writer", false: "many writers"}[single]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := testkit.MongoDB(t)
			if single {
				mongox.MarkSingleWriter(db.Client())
			}
			const ttl = 2 * time.Second
			svc, docs := newService(t, db, intake.Config{JobLeaseTTL: ttl})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var (
				mu     sync.Mutex
				failed []string
				fail   = true
			)
			intake.SetAfterSave(svc, func(id string) error {
				mu.Lock()
				defer mu.Unlock()
				if !fail {
					return nil
				}
				failed = append(failed, id)
				return errors.New("the stream is down")
			})
			sc := document.Scope{Tenant: "acme"}
			ingest := func(text string) error {
				_, err := svc.Ingest(ctx, intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, Title: text, RawContent: text})
				return err
			}
			for _, text := range []string{report, "Rotate the payments keys every quarter."} {
				if err := ingest(text); err == nil {
					t.Fatal("an ingest whose first write was followed by an error succeeded")
				}
			}
			mu.Lock()
			fail = false
			kept, deleted := failed[0], failed[1]
			mu.Unlock()
			if err := svc.Delete(ctx, sc, deleted); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			background(t, svc.FinishFailedIngests)
			testkit.Eventually(t, 15*time.Second, func() bool {
				d, err := docs.GetDocument(ctx, sc, kept)
				return err == nil && d.Indexed && d.ExtractionJobID != ""
			}, "the failed ingest is finished")
			took := time.Since(start)
			t.Logf("finished %v after the retries began", took.Round(time.Millisecond))
			if single && took > 5*time.Second {
				t.Errorf("a single writer finished the failed ingest after %v; want within seconds", took)
			}
			if !single && took < ttl/2 {
				t.Errorf("many writers finished the failed ingest after %v, before its claim could lapse", took)
			}
			if _, err := docs.GetDocument(ctx, sc, deleted); !errors.Is(err, document.ErrNotFound) {
				t.Errorf("the deleted document after the retries: %v; want it still gone", err)
			}
		})
	}
}

// TestFailedDeletesAreFinished: a delete that fails after it hid the
// document (the event stream away, say) is an error to its caller, and is
// finished while the process runs, as a failed ingest is: before, the
// document's record, chunks and search entries stayed until the next
// start's reconciliation or a second delete.
func TestFailedDeletesAreFinished(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		svc, docs := newService(t, db, intake.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sc := document.Scope{Tenant: "acme"}
		res, err := svc.Ingest(ctx, intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, RawContent: report})
		if err != nil {
			t.Fatal(err)
		}
		id := res.Document.ID
		var fails atomic.Int32
		fails.Store(2)
		intake.SetBeforeRemove(svc, func(string) error {
			if fails.Add(-1) >= 0 {
				return errors.New("the stream is down")
			}
			return nil
		})
		if err := svc.Delete(ctx, sc, id); err == nil {
			t.Fatal("a delete that failed half way reported success")
		}
		if _, err := docs.GetDocument(ctx, sc, id); !errors.Is(err, document.ErrNotFound) {
			t.Fatalf("the document after the failed delete: %v; want it hidden", err)
		}
		if d, err := docs.LoadDocument(ctx, sc, id); err != nil || !d.Deleting {
			t.Fatalf("the record after the failed delete: %v; want it kept, marked deleting", err)
		}
		background(t, svc.FinishFailedIngests)
		testkit.Eventually(t, 15*time.Second, func() bool {
			_, err := docs.LoadDocument(ctx, sc, id)
			return errors.Is(err, document.ErrNotFound)
		}, "the failed delete finished: the record gone")
		if fails.Load() >= 0 {
			t.Errorf("the delete was tried %d times in all; want it tried again after a second failure", 2-fails.Load())
		}
		if cs, err := docs.DocumentChunks(ctx, sc, id); err != nil || len(cs) != 0 {
			t.Errorf("chunks of the deleted document: %d, %v", len(cs), err)
		}
		hits, err := svc.Search(ctx, intake.SearchQuery{Scope: sc, Text: "BHP revenue", Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			if h.Chunk.DocID == id {
				t.Errorf("a search still finds the deleted document: %+v", h)
			}
		}
	})
}

// TestDeadIngestsAreFinishedByAnotherReplica: with many writers, an ingest
// whose replica died mid-way (its document saved, its claim no longer
// renewed) is finished by any other replica within a third of JobLeaseTTL
// of the claim lapsing, while that replica runs; before, it waited for a
// replica's next start. An ingest another replica still renews is left to
// it however long it takes, and a document being deleted to its delete. A
// single writer has no other replica: its sweep returns at once.
func TestDeadIngestsAreFinishedByAnotherReplica(t *testing.T) {
	t.Parallel()
	db := testkit.MongoDB(t) // many writers
	// Renewals every 0.5 s: one may be late by a second on a loaded machine.
	const ttl = 1500 * time.Millisecond
	svc, docs := newService(t, db, intake.Config{JobLeaseTTL: ttl, IngestGrace: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sc := document.Scope{Tenant: "acme"}
	now := time.Now().UTC().Truncate(time.Millisecond)
	begin := func(name string) *document.Document { return firstWrite(t, docs, sc, name, now, now.Add(ttl)) }
	dead, live, deleting := begin("dead"), begin("live"), begin("deleting")
	stopRenewing := renewIngest(t, docs, live, ttl)
	defer stopRenewing()
	if _, err := docs.MarkDeleting(ctx, sc, deleting.ID); err != nil {
		t.Fatal(err)
	}
	sweeping := make(chan struct{})
	go func() {
		defer close(sweeping)
		svc.FinishDeadIngests(ctx)
	}()

	testkit.Eventually(t, 10*time.Second, func() bool {
		d, err := docs.GetDocument(ctx, sc, dead.ID)
		return err == nil && d.Indexed
	}, "the dead ingest to be finished")
	if late := time.Since(now.Add(ttl)); late > ttl/3+time.Second {
		t.Errorf("the dead ingest was finished %v after its claim lapsed; the sweep looks every %v", late, ttl/3)
	}
	time.Sleep(3 * ttl) // the live ingest outlives its first claim several times over
	if d, err := docs.GetDocument(ctx, sc, live.ID); err != nil || d.Indexed || d.ExtractionJobID != live.ExtractionJobID {
		t.Fatalf("an ingest that renews its claim was taken over: indexed %v, job %s, %v", d.Indexed, d.ExtractionJobID, err)
	}
	if d, err := docs.LoadDocument(ctx, sc, deleting.ID); err != nil || !d.Deleting || d.Indexed || d.ExtractionJobID != deleting.ExtractionJobID {
		t.Fatalf("a document being deleted was ingested again: deleting %v, indexed %v, job %s, %v", d.Deleting, d.Indexed, d.ExtractionJobID, err)
	}
	// Its replica dies in turn: the sweep finishes it too.
	stopRenewing()
	testkit.Eventually(t, 10*time.Second, func() bool {
		d, err := docs.GetDocument(ctx, sc, live.ID)
		return err == nil && d.Indexed
	}, "the ingest whose renewals stopped to be finished")
	cancel()
	<-sweeping

	mongox.MarkSingleWriter(db.Client())
	single, _ := newService(t, db, intake.Config{JobLeaseTTL: ttl})
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		single.FinishDeadIngests(context.Background())
	}()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("a single writer's sweep did not return")
	}
}

// TestDeadIngestRetriesBackOff: a dead ingest whose finish fails (here the
// embedding model is down) is tried again a second later, then each time
// twice as late, not at every sweep (a third of JobLeaseTTL): the sweep
// would otherwise call a failing model several times a second for each
// such document. It is finished once the model is back.
func TestDeadIngestRetriesBackOff(t *testing.T) {
	t.Parallel()
	db := testkit.MongoDB(t) // many writers

	const ttl = 300 * time.Millisecond // a sweep every 100 ms
	emb := &flakyEmbedder{}
	emb.down.Store(true)
	svc, docs := newServiceEmbedding(t, db, intake.Config{JobLeaseTTL: ttl, IngestGrace: time.Minute}, emb)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sc := document.Scope{Tenant: "acme"}
	now := time.Now().UTC().Truncate(time.Millisecond)
	dead := firstWrite(t, docs, sc, "dead", now.Add(-time.Minute), now.Add(-time.Second)) // its claim lapsed
	background(t, svc.FinishDeadIngests)

	time.Sleep(3500 * time.Millisecond)
	// Tries at about 0.1 s, then 1.1 s and 3.1 s.
	if n := emb.calls.Load(); n < 2 || n > 4 {
		t.Errorf("the finish was tried %d times in 3.5 s with the model down, want 2 to 4 (backing off from a second)", n)
	}
	emb.down.Store(false)
	testkit.Eventually(t, 10*time.Second, func() bool {
		d, err := docs.GetDocument(ctx, sc, dead.ID)
		return err == nil && d.Indexed
	}, "the dead ingest to be finished once the model is back")
}

// flakyEmbedder is the local embedder, failing while down; it counts the
// calls.
type flakyEmbedder struct {
	embed.LocalHash
	down  atomic.Bool
	calls atomic.Int32
	delay atomic.Int64 // a time.Duration each call takes
}

func (f *flakyEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return nil, errors.New("embedding model unavailable")
	}
	time.Sleep(time.Duration(f.delay.Load()))
	return f.LocalHash.Embed(ctx, texts)
}
