package intake_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	docstore "github.com/agentmesh/agentmesh/services/indexer/internal/document/mongostore"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intake"
	"github.com/agentmesh/agentmesh/services/indexer/internal/pdftest"
)

// TestReconcileLeavesIngestsUnderWay: at start, a replica finishes the
// ingests that died, but not one another replica is still doing: a
// document written less than IngestGrace ago is looked at again only once
// that much time has passed, and left alone if it was finished meanwhile.
// (A single writer has no other replica: TestSingleWriterFinishesDeadIngestsAtOnce.)
func TestReconcileLeavesIngestsUnderWay(t *testing.T) {
	t.Parallel()
	db := testkit.MongoDB(t) // many writers, the services' default
	ctx := context.Background()
	const grace = 2 * time.Second
	svc, docs := newService(t, db, intake.Config{IngestGrace: grace})
	sc := document.Scope{Tenant: "acme"}
	// Open the scope's search indexes first: the live ingest below must
	// finish within the grace, after the long dead one is redone.
	if _, err := svc.Ingest(ctx, intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, RawContent: "warm up"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	// An ingest's first write, as another replica (or a dead one) left it,
	// with no claim: it holds for IngestGrace after the write.
	begin := func(name string, at time.Time) *document.Document {
		return firstWrite(t, docs, sc, name, at, time.Time{})
	}
	dead := begin("dead", now.Add(-2*grace)) // its ingest died long ago
	deadRecently := begin("recent", now)     // its ingest died just now
	live := begin("live", now)               // its ingest is under way

	done := make(chan error, 1)
	go func() { done <- svc.Reconcile(ctx) }()
	// The live ingest finishes while the replica waits, after it
	// finished the long dead one.
	testkit.Eventually(t, 10*time.Second, func() bool {
		d, err := docs.GetDocument(ctx, sc, dead.ID)
		return err == nil && d.Indexed
	}, "the long dead ingest finished")
	if ok, err := docs.MarkIndexed(ctx, sc, live.ID, live.ContentHash, nil); !ok || err != nil {
		t.Fatalf("MarkIndexed = %v, %v", ok, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(now); waited < grace {
		t.Fatalf("reconciliation returned %v after the recent writes; it must wait %v for them", waited, grace)
	}
	for _, d := range []*document.Document{dead, deadRecently} {
		got, err := docs.GetDocument(ctx, sc, d.ID)
		if err != nil || !got.Indexed || got.ExtractionJobID == d.ExtractionJobID {
			t.Errorf("%s: indexed %v, job %s, %v; want indexed again with a new job", d.ID, got.Indexed, got.ExtractionJobID, err)
		}
	}
	got, err := docs.GetDocument(ctx, sc, live.ID)
	if err != nil || got.ExtractionJobID != live.ExtractionJobID {
		t.Fatalf("the ingest under way was redone: job %s, %v; want %s", got.ExtractionJobID, err, live.ExtractionJobID)
	}
	if cs, err := docs.DocumentChunks(ctx, sc, live.ID); err != nil || len(cs) != 0 {
		t.Fatalf("reconciliation wrote %d chunks of the live document, %v", len(cs), err)
	}
}

// TestReconcileFollowsIngestClaims: an ingest claims its document until
// it is indexed and renews the claim while it runs, so reconciliation
// finishes a dead ingest a claim's TTL after its last renewal — not
// IngestGrace after its last write, which left a document a killed mesh
// was ingesting unfinished for a minute after the restart — and leaves one
// whose claim is being renewed to its ingest, however long that takes.
func TestReconcileFollowsIngestClaims(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		const ttl = 1500 * time.Millisecond // a renewal may be late by 1 s on a loaded machine
		svc, docs := newService(t, db, intake.Config{IngestGrace: time.Minute, JobLeaseTTL: ttl})
		sc := document.Scope{Tenant: "acme"}
		if _, err := svc.Ingest(ctx, intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, RawContent: "warm up"}); err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC().Truncate(time.Millisecond)
		begin := func(name string) *document.Document { return firstWrite(t, docs, sc, name, now, now.Add(ttl)) }
		if !mongox.SingleWriter(db) {
			followOtherReplicas(t, svc, docs, begin, ttl)
		}

		// An ingest of this process held after its first write renews its
		// own claim: reconciliation meanwhile leaves it alone.
		done := make(chan error, 1)
		in := intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, RawContent: "Drain the queue before a deploy."}
		id, release, result := holdIngest(t, svc, docs, in)
		go func() { done <- svc.Reconcile(ctx) }()
		time.Sleep(3 * ttl)
		if d, err := docs.GetDocument(ctx, sc, id); err != nil || d.Indexed {
			t.Fatalf("reconciliation took over an ingest that renews its claim: indexed %v, %v", d.Indexed, err)
		}
		release()
		r, err := result()
		if err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if d, err := docs.GetDocument(ctx, sc, id); err != nil || !d.Indexed || d.ExtractionJobID != r.JobID {
			t.Fatalf("after the held ingest: indexed %v, job %s, %v; want indexed by its own job %s", d.Indexed, d.ExtractionJobID, err, r.JobID)
		}
	})
}

// TestSingleWriterFinishesDeadIngestsAtOnce: a single writer (agentmesh
// up) restarted after a kill finishes the ingests the kill cut at once,
// though their claims hold for a minute more: no other process can be
// ingesting them (they waited for the claim to lapse, JobLeaseTTL after
// the kill). An extraction job of such a document stops waiting for its
// ingest at once too. The single writer's own ingests under way are left
// to them (TestReconcileFollowsIngestClaims).
func TestSingleWriterFinishesDeadIngestsAtOnce(t *testing.T) {
	t.Parallel()
	db := testkit.MongoDB(t)
	mongox.MarkSingleWriter(db.Client())
	ctx := context.Background()
	const ttl = time.Minute
	svc, docs := newService(t, db, intake.Config{IngestGrace: time.Hour, JobLeaseTTL: ttl})
	sc := document.Scope{Tenant: "acme"}
	if _, err := svc.Ingest(ctx, intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, RawContent: "warm up"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	var cut []*document.Document
	for _, name := range []string{"payments", "ledger", "billing"} {
		cut = append(cut, firstWrite(t, docs, sc, name, now, now.Add(ttl))) // its claim fresh
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := intake.AwaitIngest(actx, svc, cut[0]); !errors.Is(err, intake.ErrIngestUnfinished) {
		t.Errorf("an extraction waiting for a cut ingest: %v; want ErrIngestUnfinished at once", err)
	}
	start := time.Now()
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	defer rcancel()
	if err := svc.Reconcile(rctx); err != nil {
		t.Fatalf("Reconcile: %v (after %v)", err, time.Since(start))
	}
	t.Logf("reconciliation finished %d cut ingests in %v", len(cut), time.Since(start))
	for _, d := range cut {
		got, err := docs.GetDocument(ctx, sc, d.ID)
		if err != nil || !got.Indexed || got.ExtractionJobID == d.ExtractionJobID {
			t.Errorf("%s: indexed %v, job %s, %v; want indexed again with a new job", d.ID, got.Indexed, got.ExtractionJobID, err)
		}
	}
}

// firstWrite stores what an ingest's first write leaves of a document
// named name, at now, its claim until until (zero: none, as before
// claims, so IngestGrace after now): as a killed ingest, or another
// replica's under way, left it.
func firstWrite(t *testing.T, docs *docstore.Store, sc document.Scope, name string, now, until time.Time) *document.Document {
	t.Helper()
	text := "Rotate the " + name + " keys every quarter."
	d := &document.Document{ID: "doc_" + name, Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, Title: name,
		RawContent: text, ContentHash: document.Hash(text), ChunkCount: 2, ExtractionJobID: "xj_" + name, IngestUntil: until}
	if err := docs.SaveContent(context.Background(), d, time.Time{}, now); err != nil {
		t.Fatal(err)
	}
	return d
}

// followOtherReplicas is TestReconcileFollowsIngestClaims with many
// writers: a dead ingest is finished once its claim lapsed, one another
// replica renews is left to it.
func followOtherReplicas(t *testing.T, svc *intake.Service, docs *docstore.Store, begin func(string) *document.Document, ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	sc := document.Scope{Tenant: "acme"}
	dead := begin("dead") // its process was killed: no renewal comes
	live := begin("live") // another replica renews its claim, then ends it
	stopRenewing := renewIngest(t, docs, live, ttl)

	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- svc.Reconcile(ctx) }()
	testkit.Eventually(t, 10*time.Second, func() bool {
		d, err := docs.GetDocument(ctx, sc, dead.ID)
		return err == nil && d.Indexed
	}, "the dead ingest finished")
	if took := time.Since(start); took > ttl+3*time.Second {
		t.Errorf("the dead ingest was finished %v after reconciliation began; its claim lapsed %v after its write", took, ttl)
	}
	// The live ingest outlives its first claim several times over.
	time.Sleep(3 * ttl)
	if d, err := docs.GetDocument(ctx, sc, live.ID); err != nil || d.Indexed || d.ExtractionJobID != live.ExtractionJobID {
		t.Fatalf("the ingest under way was taken over while it renewed its claim: indexed %v, job %s, %v", d.Indexed, d.ExtractionJobID, err)
	}
	stopRenewing()
	if ok, err := docs.MarkIndexed(ctx, sc, live.ID, live.ContentHash, nil); !ok || err != nil {
		t.Fatalf("MarkIndexed = %v, %v", ok, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Minute/2 {
		t.Errorf("reconciliation took %v: it waited for IngestGrace, not for the claims", took)
	}
	got, err := docs.GetDocument(ctx, sc, live.ID)
	if err != nil || got.ExtractionJobID != live.ExtractionJobID {
		t.Fatalf("the ingest under way was redone: job %s, %v; want %s", got.ExtractionJobID, err, live.ExtractionJobID)
	}
	if ok, err := docs.RenewIngest(ctx, sc, live.ID, live.ContentHash, live.ExtractionJobID, time.Now().Add(ttl)); ok || err != nil {
		t.Errorf("RenewIngest of an indexed document = %v, %v; want false: nothing left to claim", ok, err)
	}
}

// renewIngest renews the claim of d's ingest every third of ttl, as
// another replica's ingest under way does, until the returned function is
// called; it returns after the last renewal.
func renewIngest(t *testing.T, docs *docstore.Store, d *document.Document, ttl time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		for ctx.Err() == nil {
			if ok, err := docs.RenewIngest(ctx, d.Scope, d.ID, d.ContentHash, d.ExtractionJobID, time.Now().Add(ttl)); (!ok || err != nil) && ctx.Err() == nil {
				t.Errorf("RenewIngest = %v, %v", ok, err)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(ttl / 3):
			}
		}
	}()
	return func() {
		cancel()
		<-renewed
	}
}

// TestReconcileKeepsAttachments: an ingest killed after its first write
// (the document saved, nothing indexed) is finished by reconciliation
// with what its attachments gave: the PDF's text layer is chunked, and
// the attachments stay listed with what was read of them.
func TestReconcileKeepsAttachments(t *testing.T) {
	t.Parallel()
	pdftest.RequireTools(t)
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		svc, docs := newService(t, db, intake.Config{IngestGrace: time.Minute, JobLeaseTTL: time.Second})
		sc := document.Scope{Tenant: "acme"}
		killed := errors.New("killed after the first write")
		intake.SetAfterSave(svc, func(string) error { return killed })
		in := intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_REPORT, Title: "Q3 review",
			RawContent: "Q3 review: the figures are in the attached PDF.",
			Attachments: []intake.Attachment{{Name: "q3.pdf", MimeType: "application/pdf",
				Data: pdftest.PDF("Ledger balances by region.", "The zanzibar reconciliation closed at 4,200 euros.")}}}
		if _, err := svc.Ingest(ctx, in); !errors.Is(err, killed) {
			t.Fatalf("ingest: %v, want it killed", err)
		}
		intake.SetAfterSave(svc, nil)
		id := document.ID(sc, "", document.Hash(in.RawContent))
		before, err := docs.GetDocument(ctx, sc, id)
		if err != nil || before.Indexed {
			t.Fatalf("after the kill: indexed %v, %v; want saved, not indexed", before.Indexed, err)
		}

		if err := svc.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		after, err := docs.GetDocument(ctx, sc, id)
		if err != nil || !after.Indexed || after.ExtractionJobID == before.ExtractionJobID {
			t.Fatalf("after reconciliation: indexed %v, job %s (was %s), %v; want indexed by a new ingest", after.Indexed, after.ExtractionJobID, before.ExtractionJobID, err)
		}
		if c := after.Pipeline.GetCorrelationId(); c == "" || c != before.Pipeline.GetCorrelationId() {
			t.Errorf("correlation id %q after reconciliation, %q before: want the interrupted intake's", c, before.Pipeline.GetCorrelationId())
		}
		atts := after.Pipeline.GetAttachments()
		if len(atts) != 1 || atts[0].GetName() != "q3.pdf" || atts[0].GetMimeType() != "application/pdf" || !atts[0].GetVisual() {
			t.Errorf("attachments %v: want the PDF listed as the killed ingest read it", atts)
		}
		chunks, err := docs.DocumentChunks(ctx, sc, id)
		if err != nil {
			t.Fatal(err)
		}
		var pdfChunk bool
		for _, c := range chunks {
			pdfChunk = pdfChunk || strings.Contains(c.Text, "zanzibar reconciliation closed")
		}
		if !pdfChunk {
			t.Errorf("no chunk of the %d holds the PDF's page 2: its text layer was lost", len(chunks))
		}
	})
}

// A work item delivered again after a crash in the middle of its ingest
// (the intake queue's redelivery) finishes that intake: the same
// correlation id, so its watchers see one intake and the graph one base
// node, and the vision results the first run got are reused, not asked for
// again.
func TestRedeliveredIntakeFinishesTheInterruptedOne(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		svc, docs := newService(t, db, intake.Config{})
		sc := document.Scope{Tenant: "acme"}
		killed := errors.New("killed after the first write")
		intake.SetAfterSave(svc, func(string) error { return killed })
		in := intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_TICKET, Title: "OPS-7",
			RawContent: "OPS-7: the nightly export to the data lake fails with a timeout since Monday."}
		if _, err := svc.Ingest(ctx, in); !errors.Is(err, killed) {
			t.Fatalf("ingest: %v, want it killed", err)
		}
		intake.SetAfterSave(svc, nil)
		id := document.ID(sc, "", document.Hash(in.RawContent))
		before, err := docs.GetDocument(ctx, sc, id)
		if err != nil || before.Indexed || before.Pipeline.GetCorrelationId() == "" {
			t.Fatalf("after the kill: indexed %v, correlation %q, %v; want saved with a pipeline, not indexed",
				before.Indexed, before.Pipeline.GetCorrelationId(), err)
		}

		res, err := svc.Ingest(ctx, in) // the same work item again
		if err != nil {
			t.Fatal(err)
		}
		after, err := docs.GetDocument(ctx, sc, id)
		if err != nil || !after.Indexed {
			t.Fatalf("after the redelivery: indexed %v, %v", after.Indexed, err)
		}
		if got, want := after.Pipeline.GetCorrelationId(), before.Pipeline.GetCorrelationId(); got != want {
			t.Errorf("correlation id %q, want the interrupted intake's %q", got, want)
		}
		if got, want := after.Pipeline.GetIndexing().GetBaseNodeKey(), before.Pipeline.GetIndexing().GetBaseNodeKey(); got != want || got == "" {
			t.Errorf("base node %q, want the interrupted intake's %q", got, want)
		}
		if res.JobID == "" || res.JobID == before.ExtractionJobID {
			t.Errorf("extraction job %q (the killed run's %q): want a job of its own", res.JobID, before.ExtractionJobID)
		}

		// Its extraction job ends the intake (routing, finished) under the
		// same correlation id: every intake event of the document, the
		// killed run's and the rest, is one intake's.
		var job struct {
			Outbox []events.OutboxEntry `bson:"outbox"`
		}
		if err := db.Collection(docstore.JobsCollection).FindOne(ctx, bson.D{{Key: "_id", Value: res.JobID}}).Decode(&job); err != nil {
			t.Fatal(err)
		}
		var work commonv1.Event
		if err := proto.Unmarshal(job.Outbox[len(job.Outbox)-1].Data, &work); err != nil {
			t.Fatal(err)
		}
		if err := svc.HandleJob(ctx, &events.Delivery{Event: &work, Subject: job.Outbox[len(job.Outbox)-1].Subject, NumDelivered: 1}); err != nil {
			t.Fatal(err)
		}
		var stored struct {
			Outbox []events.OutboxEntry `bson:"outbox"`
		}
		if err := db.Collection(docstore.DocumentsCollection).FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&stored); err != nil {
			t.Fatal(err)
		}
		var phases []string
		for _, e := range stored.Outbox {
			if !strings.HasPrefix(e.Subject, events.EventSubjectPrefix+"acme.intake.") {
				continue
			}
			var ev commonv1.Event
			if err := proto.Unmarshal(e.Data, &ev); err != nil {
				t.Fatal(err)
			}
			phases = append(phases, e.Subject[strings.LastIndex(e.Subject, ".")+1:])
			if ev.GetCorrelationId() != before.Pipeline.GetCorrelationId() {
				t.Errorf("intake event %s under correlation %q, want %q", e.Subject, ev.GetCorrelationId(), before.Pipeline.GetCorrelationId())
			}
		}
		if len(phases) == 0 || phases[len(phases)-1] != intake.EventIntakeFinished {
			t.Errorf("intake events %v: want them to end with %q", phases, intake.EventIntakeFinished)
		}
	})
}

// TestJobOfADeadIngestWaitsForItsReconciliation: a process killed after
// queueing a document's extraction job but before marking the document
// indexed leaves both; at the restart the job is delivered at once, while
// reconciliation redoes the ingest under a new job. The old job must not
// run its extractors on the unfinished document (a crash test of
// agentmesh up saw the LLM extraction of four documents run twice): it
// waits for the ingest, fails its delivery once the claim has lapsed, and
// is superseded after reconciliation; the extractors run once.
func TestJobOfADeadIngestWaitsForItsReconciliation(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		var runs atomic.Int32
		const ttl = 600 * time.Millisecond
		ext := blocking{&runs, make(chan struct{})}
		close(ext.release) // runs return at once
		svc, docs := newService(t, db, intake.Config{JobLeaseTTL: ttl}, ext)
		sc := document.Scope{Tenant: "acme"}
		killed := errors.New("killed after the first write")
		intake.SetAfterSave(svc, func(string) error { return killed })
		in := intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, RawContent: "Page the on-call when the ledger lags."}
		if _, err := svc.Ingest(ctx, in); !errors.Is(err, killed) {
			t.Fatalf("ingest: %v, want it killed", err)
		}
		intake.SetAfterSave(svc, nil)
		id := document.ID(sc, "", document.Hash(in.RawContent))
		d, err := docs.GetDocument(ctx, sc, id)
		if err != nil {
			t.Fatal(err)
		}
		// The job the killed ingest had queued, with its work item.
		old := &document.Job{ID: d.ExtractionJobID, Scope: sc, DocumentID: id, ContentHash: d.ContentHash, Reason: document.ReasonIngest,
			Status: indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_QUEUED, CreateTime: time.Now()}
		if err := docs.CreateJob(ctx, old); err != nil {
			t.Fatal(err)
		}
		deliver := func(jobID string) error { return deliverJob(ctx, t, svc, d, jobID) }
		start := time.Now()
		if err := deliver(old.ID); err == nil {
			t.Fatal("the job of an unfinished ingest ran to its end")
		}
		if took := time.Since(start); took > ttl+2*time.Second {
			t.Errorf("the delivery waited %v; the ingest's claim lapsed %v after its write", took, ttl)
		}
		if err := svc.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		after, err := docs.GetDocument(ctx, sc, id)
		if err != nil || !after.Indexed || after.ExtractionJobID == old.ID {
			t.Fatalf("after reconciliation: indexed %v, job %s, %v", after.Indexed, after.ExtractionJobID, err)
		}
		if err := deliver(old.ID); err != nil {
			t.Fatalf("the old job delivered again: %v, want it superseded", err)
		}
		if j, err := docs.GetJob(ctx, sc, old.ID); err != nil || j.Status != indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUPERSEDED {
			t.Fatalf("the old job: %v, %v; want superseded", j, err)
		}
		if err := deliver(after.ExtractionJobID); err != nil {
			t.Fatal(err)
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("the extractors ran %d times for one content", n)
		}
	})
}

// deliverJob hands svc the work item of extraction job jobID of doc, as
// the work queue does on a first delivery.
func deliverJob(ctx context.Context, t *testing.T, svc *intake.Service, doc *document.Document, jobID string) error {
	t.Helper()
	work, err := anypb.New(&indexerv1.ExtractionJob{Id: jobID, Scope: doc.Scope.Proto(), DocumentId: doc.ID, ContentHash: doc.ContentHash})
	if err != nil {
		t.Fatal(err)
	}
	return svc.HandleJob(ctx, &events.Delivery{Event: &commonv1.Event{Payload: work}, NumDelivered: 1})
}

// blocking is an extractor that counts its runs (each would be a model
// call for the LLM extractor) and waits for release.
type blocking struct {
	runs    *atomic.Int32
	release chan struct{}
}

func (blocking) Name() string                     { return "blocking" }
func (blocking) SchemaVersion() int               { return 1 }
func (blocking) CanHandle(*extract.Document) bool { return true }
func (b blocking) Extract(ctx context.Context, _ *extract.Document) ([]extract.Extract, error) {
	b.runs.Add(1)
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return nil, nil
}

// TestSingleWriterTakesADeadProcesssClaim: the only writer (agentmesh up)
// restarted after a kill finds the claims of the extraction jobs the dead
// process was running; no other process may hold one, so it runs them at
// once instead of waiting up to a claim's TTL with its workers held (a
// crash test saw both default workers idle 4 s while fresh jobs queued).
// Several writers wait, since the holder may be alive elsewhere; and the
// single writer still waits for a claim one of its own workers holds.
func TestSingleWriterTakesADeadProcesssClaim(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		var runs atomic.Int32
		ext := blocking{&runs, make(chan struct{})}
		svc, docs := newService(t, db, intake.Config{}, ext)
		sc := document.Scope{Tenant: "acme"}
		res, err := svc.Ingest(ctx, intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, RawContent: "Rotate the ledger keys."})
		if err != nil {
			t.Fatal(err)
		}
		// The dead process's claim, 20 s left to run.
		if _, err := docs.TakeClaim(ctx, intake.ClaimKey(res.JobID), "gone/1", time.Now(), 20*time.Second); err != nil {
			t.Fatal(err)
		}
		doc, err := docs.GetDocument(ctx, sc, res.Document.ID)
		if err != nil {
			t.Fatal(err)
		}
		deliver := func(ctx context.Context) error { return deliverJob(ctx, t, svc, doc, res.JobID) }
		first := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			first <- deliver(ctx)
		}()
		single := svc.SingleWriter()
		ran := func() bool { return runs.Load() == 1 }
		if !single {
			if err := <-first; err == nil || runs.Load() != 0 {
				t.Fatalf("several writers: the delivery ended %v with %d runs; want it waiting for the live-looking claim", err, runs.Load())
			}
			return
		}
		testkit.Eventually(t, 2*time.Second, ran, "the job of the dead process's claim to run")
		// A second delivery while this process's worker holds the claim
		// waits for it.
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := deliver(wctx); err == nil || runs.Load() != 1 {
			t.Errorf("a second delivery beside this process's holder ended %v with %d runs; want it waiting", err, runs.Load())
		}
		close(ext.release)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if j, err := docs.GetJob(ctx, sc, res.JobID); err != nil || j.Status != indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED {
			t.Fatalf("the job: %v, %v; want succeeded", j, err)
		}
	})
}

// TestUploadAgainWaitsForTheIngestUnderWay: the same content sent again
// while its first ingest runs (a client that gave up waiting and retried)
// waits for that ingest and reports the document unchanged, in both writer
// modes: before, it ran the pipeline a second time beside the first (its
// model calls and embeddings included), or failed with a conflict once the
// first renewed its claim.
func TestUploadAgainWaitsForTheIngestUnderWay(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		emb := &flakyEmbedder{}
		svc, docs := newServiceEmbedding(t, db, intake.Config{JobLeaseTTL: 600 * time.Millisecond}, emb)
		sc := document.Scope{Tenant: "acme"}
		in := intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, RawContent: "Drain the queue before a deploy."}
		_, release, first := holdIngest(t, svc, docs, in)
		embedded := emb.calls.Load()
		again := make(chan error, 1)
		var res intake.IngestResult
		go func() {
			var err error
			res, err = svc.Ingest(ctx, in)
			again <- err
		}()
		time.Sleep(time.Second) // the first renews its claim meanwhile
		select {
		case err := <-again:
			t.Fatalf("the upload sent again returned while the first ingest ran: %v", err)
		default:
		}
		release()
		r, err := first()
		if err != nil {
			t.Error(err)
		}
		if err := <-again; err != nil {
			t.Fatalf("the upload sent again: %v", err)
		}
		if !res.Unchanged || res.Document == nil || !res.Document.Indexed || res.Document.ExtractionJobID != r.JobID {
			t.Fatalf("the upload sent again: %+v; want the first ingest's document, indexed by its job %s, unchanged", res, r.JobID)
		}
		if n := emb.calls.Load(); n != embedded {
			t.Errorf("the embedder was called %d times more: the content was ingested twice", n-embedded)
		}
	})
}

// TestNewVersionSupersedesTheIngestUnderWay: new content for a document
// (same source URL) while the ingest of its old content runs and renews
// its claim is written over it, as before claims were checked: the old
// ingest is superseded, the new content indexed. (A takeover of the same
// content checks the claim: TestIngestClaimTakeover.)
func TestNewVersionSupersedesTheIngestUnderWay(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		emb := &flakyEmbedder{}
		const ttl = 600 * time.Millisecond
		svc, docs := newServiceEmbedding(t, db, intake.Config{JobLeaseTTL: ttl}, emb)
		sc := document.Scope{Tenant: "acme"}
		in := func(text string) intake.IngestInput {
			return intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, SourceURL: "urn:wiki:deploys", RawContent: text}
		}
		id, release, old := holdIngest(t, svc, docs, in("Drain the queue before a deploy."))
		emb.delay.Store(int64(ttl)) // the old ingest renews its claim while the new content is embedded
		res, err := svc.Ingest(ctx, in("Drain the queue and page the on-call before a deploy."))
		if err != nil {
			t.Fatalf("the new version: %v", err)
		}
		emb.delay.Store(0)
		release()
		if _, err := old(); err == nil {
			t.Error("the old content's ingest succeeded after the new version replaced it")
		}
		d, err := docs.GetDocument(ctx, sc, id)
		if err != nil || !d.Indexed || d.ContentHash != document.Hash("Drain the queue and page the on-call before a deploy.") || d.ExtractionJobID != res.JobID {
			t.Fatalf("the document: %+v, %v; want the new content indexed by its job %s", d, err, res.JobID)
		}
	})
}

// TestDisplacedIngestStops: an ingest another took over after its claim
// lapsed (it stalled; the other's first write names another job) stops at
// its next renewal, as an analysis job's execution does when its claim is
// taken: it neither marks the document indexed nor queues a job of its
// own, and reports a conflict (the upload is retried, not the ingest).
// Before, it went on beside the other to its end.
func TestDisplacedIngestStops(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		const ttl = 600 * time.Millisecond
		svc, docs := newService(t, db, intake.Config{JobLeaseTTL: ttl})
		sc := document.Scope{Tenant: "acme"}
		in := intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, RawContent: "Drain the queue before a deploy."}
		id, release, result := holdIngest(t, svc, docs, in)
		// Another ingest's first write, as after a lapse of this one's claim.
		if _, err := db.Collection(docstore.DocumentsCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "extraction_job_id", Value: "xj_takeover"}}}, {Key: "$inc", Value: bson.D{{Key: "version", Value: int64(1)}}}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * ttl) // a renewal or two fail meanwhile
		release()
		res, err := result()
		if !errors.Is(err, document.ErrConflict) {
			t.Fatalf("the displaced ingest: %+v, %v; want a conflict", res, err)
		}
		d, err := docs.LoadDocument(ctx, sc, id)
		if err != nil || d.Indexed || d.ExtractionJobID != "xj_takeover" {
			t.Fatalf("the document after the displaced ingest stopped: indexed %v, job %s, %v; want it left to the other ingest", d.Indexed, d.ExtractionJobID, err)
		}
	})
}

// holdIngest starts svc ingesting in and holds that ingest after its
// first write (its document saved, its claim renewed meanwhile) until
// release is called; it returns once the document is saved, with its id.
// result waits for the ingest's end. Later ingests of svc are not held.
func holdIngest(t *testing.T, svc *intake.Service, docs *docstore.Store, in intake.IngestInput) (id string, release func(), result func() (intake.IngestResult, error)) {
	t.Helper()
	hold := make(chan struct{})
	var held atomic.Bool
	intake.SetAfterSave(svc, func(string) error {
		if held.CompareAndSwap(false, true) {
			<-hold
		}
		return nil
	})
	type outcome struct {
		res intake.IngestResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := svc.Ingest(context.Background(), in)
		done <- outcome{r, err}
	}()
	id = document.ID(in.Scope, in.SourceURL, document.Hash(in.RawContent))
	testkit.Eventually(t, 10*time.Second, func() bool { _, err := docs.LoadDocument(context.Background(), in.Scope, id); return err == nil },
		"the held ingest saved its document")
	return id, sync.OnceFunc(func() { close(hold) }), func() (intake.IngestResult, error) { o := <-done; return o.res, o.err }
}
