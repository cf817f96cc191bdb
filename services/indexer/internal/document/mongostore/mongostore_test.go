package mongostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
)

func newStore(t *testing.T, db *mongo.Database) *Store {
	t.Helper()
	s := New(db)
	if err := s.EnsureIndexes(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDocumentLifecycleAndQueries(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testDocumentLifecycleAndQueries)
}

func testDocumentLifecycleAndQueries(t *testing.T, db *mongo.Database) {
	ctx := context.Background()
	s := newStore(t, db)
	acme, other := document.Scope{Tenant: "acme"}, document.Scope{Tenant: "other"}
	now := time.Now().UTC().Truncate(time.Millisecond)
	d := &document.Document{ID: "doc_1", Scope: acme, SourceType: indexerv1.SourceType_SOURCE_TYPE_REPORT, Title: "BHP",
		RawContent: "raw", ContentHash: document.Hash("raw"), ContentType: "financial_report", ExtractionJobID: "j1",
		IngestUntil: now.Add(time.Minute)}
	if err := s.SaveContent(ctx, d, time.Time{}, now); err != nil {
		t.Fatal(err)
	}
	stale := *d
	stale.Version = 0
	if err := s.SaveContent(ctx, &stale, time.Time{}, now); !errors.Is(err, document.ErrConflict) {
		t.Fatalf("second insert: %v, want ErrConflict", err)
	}
	// Another scope cannot see it.
	if _, err := s.GetDocument(ctx, other, "doc_1"); !errors.Is(err, document.ErrNotFound) {
		t.Fatalf("other scope get: %v", err)
	}
	exs := []extract.Extract{
		{Type: "financial", SchemaVersion: 1, Extractor: "financial_table", Confidence: 1, Data: map[string]any{"ticker": "BHP", "revenue": 55658e6, "report_date": "FY2024"}},
		{Type: "financial", SchemaVersion: 1, Extractor: "financial_table", Confidence: 1, Data: map[string]any{"ticker": "BHP", "revenue": 53817e6, "report_date": "FY2023"}},
	}
	ok, err := s.CompleteExtraction(ctx, acme, "doc_1", d.ContentHash, ExtractionResult{Extracts: exs, JobID: "j1",
		ExtractorVersions: map[string]int{"financial_table": 1}, Routing: indexerv1.Routing_ROUTING_DONE,
		Status: indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED}, now)
	if err != nil || !ok {
		t.Fatalf("CompleteExtraction = %v, %v", ok, err)
	}
	// A job for other content does not write.
	if ok, err := s.CompleteExtraction(ctx, acme, "doc_1", document.Hash("old"), ExtractionResult{JobID: "j1"}, now); ok || err != nil {
		t.Fatalf("stale CompleteExtraction = %v, %v", ok, err)
	}
	got, err := s.GetDocument(ctx, acme, "doc_1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(exs, got.Extracts); diff != "" {
		t.Fatalf("extracts round trip (-want +got):\n%s", diff)
	}
	find := func(sc document.Scope, fields map[string]string) []string {
		t.Helper()
		ds, err := s.FindByTerms(ctx, sc, document.FilterTerms("financial", fields), "", 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, d := range ds {
			ids = append(ids, d.ID)
		}
		return ids
	}
	if ids := find(acme, map[string]string{"ticker": "bhp", "revenue": "55658000000"}); len(ids) != 1 {
		t.Fatalf("find by ticker and revenue: %v", ids)
	}
	if ids := find(acme, map[string]string{"ticker": "RIO"}); len(ids) != 0 {
		t.Fatalf("find RIO: %v", ids)
	}
	if ids := find(other, map[string]string{"ticker": "BHP"}); len(ids) != 0 {
		t.Fatalf("other scope finds: %v", ids)
	}
	// Schema bump query.
	below, err := s.HandledBelow(ctx, "financial_table", 2, "", 10)
	if err != nil || len(below) != 1 {
		t.Fatalf("HandledBelow(2) = %v, %v", below, err)
	}
	if below, _ := s.HandledBelow(ctx, "financial_table", 1, "", 10); len(below) != 0 {
		t.Fatalf("HandledBelow(1) = %v", below)
	}
	scopes, err := s.Scopes(ctx)
	if err != nil || len(scopes) != 1 || scopes[0] != acme {
		t.Fatalf("Scopes = %v, %v", scopes, err)
	}
	un, err := s.Unfinished(ctx, 10)
	if err != nil || len(un) != 1 {
		t.Fatalf("Unfinished before MarkIndexed = %v, %v", un, err)
	}
	// An ingest whose claim holds is not dead; once it has lapsed, its
	// document's header is listed.
	if dead, err := s.DeadIngests(ctx, now.Add(time.Minute), 10); err != nil || len(dead) != 0 {
		t.Fatalf("DeadIngests while the claim holds = %v, %v", dead, err)
	}
	dead, err := s.DeadIngests(ctx, now.Add(time.Minute+time.Millisecond), 10)
	if err != nil || len(dead) != 1 {
		t.Fatalf("DeadIngests after the claim = %v, %v", dead, err)
	}
	if h := dead[0]; h.ID != "doc_1" || h.Scope != acme || !h.IngestUntil.Equal(d.IngestUntil) || h.Version != got.Version || h.RawContent != "" {
		t.Fatalf("DeadIngests = %+v, want doc_1's header only", h)
	}
	if ok, err := s.MarkIndexed(ctx, acme, "doc_1", document.Hash("old"), nil); ok || err != nil {
		t.Fatalf("MarkIndexed of other content = %v, %v", ok, err)
	}
	if ok, err := s.MarkIndexed(ctx, other, "doc_1", d.ContentHash, nil); ok || err != nil {
		t.Fatalf("MarkIndexed from another scope = %v, %v", ok, err)
	}
	if ok, err := s.MarkIndexed(ctx, acme, "doc_1", d.ContentHash, nil); !ok || err != nil {
		t.Fatalf("MarkIndexed = %v, %v", ok, err)
	}
	if un, _ := s.Unfinished(ctx, 10); len(un) != 0 {
		t.Fatalf("Unfinished after MarkIndexed = %v", un)
	}
	if dead, _ := s.DeadIngests(ctx, now.Add(time.Hour), 10); len(dead) != 0 {
		t.Fatalf("DeadIngests after MarkIndexed = %v", dead)
	}
	// Chunks: replace, vectors round-trip, scope isolation.
	c := func(seq int) document.Chunk {
		return document.Chunk{ID: document.ChunkID("doc_1", d.ContentHash, seq), Scope: acme, DocID: "doc_1", Seq: seq, Text: "t", Vector: []float32{0.5, -1.25}, Embedder: "e"}
	}
	if err := s.ReplaceChunks(ctx, []document.Chunk{c(0), c(1), c(2)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.ReplaceChunks(ctx, []document.Chunk{c(0), c(1)}, []string{c(2).ID, "never-written"}); err != nil {
		t.Fatal(err)
	}
	cs, err := s.DocumentChunks(ctx, acme, "doc_1")
	if err != nil || len(cs) != 2 || cs[1].Vector[1] != -1.25 {
		t.Fatalf("chunks = %+v, %v", cs, err)
	}
	if m, _ := s.GetChunks(ctx, other, []string{c(0).ID}); len(m) != 0 {
		t.Fatal("another scope reads chunks")
	}
	got2, err := s.GetChunks(ctx, acme, []string{c(1).ID, c(0).ID, c(2).ID, c(1).ID})
	if err != nil || len(got2) != 2 || got2[c(1).ID].Seq != 1 || got2[c(0).ID].Vector != nil {
		t.Fatalf("GetChunks = %+v, %v; want chunks 0 and 1 without vectors", got2, err)
	}
	var n int
	if err := s.EachChunk(ctx, acme, 1, func(b []document.Chunk) error { n += len(b); return nil }); err != nil || n != 2 {
		t.Fatalf("EachChunk saw %d, %v", n, err)
	}
	if _, err := s.MarkDeleting(ctx, other, "doc_1"); !errors.Is(err, document.ErrNotFound) {
		t.Fatalf("another scope marks the document deleting: %v", err)
	}
	marked, err := s.MarkDeleting(ctx, acme, "doc_1")
	if err != nil || !marked.Deleting || marked.RawContent != "" || len(marked.Extracts) != 2 {
		t.Fatalf("MarkDeleting = %+v, %v", marked, err)
	}
	if _, err := s.GetDocument(ctx, acme, "doc_1"); !errors.Is(err, document.ErrNotFound) {
		t.Fatalf("a deleting document is visible: %v", err)
	}
	if ds, _ := s.ListDocuments(ctx, acme, ListFilter{}, "", 10); len(ds) != 0 {
		t.Fatal("a deleting document is listed")
	}
	if ok, err := s.MarkIndexed(ctx, acme, "doc_1", d.ContentHash, nil); ok || err != nil {
		t.Fatalf("MarkIndexed of a deleting document = %v, %v", ok, err)
	}
	if err := s.DeleteChunks(ctx, []string{c(0).ID, c(1).ID}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteDocument(ctx, other, "doc_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadDocument(ctx, acme, "doc_1"); err != nil {
		t.Fatalf("another scope deleted the document: %v", err)
	}
	if err := s.DeleteDocument(ctx, acme, "doc_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadDocument(ctx, acme, "doc_1"); !errors.Is(err, document.ErrNotFound) {
		t.Fatalf("after DeleteDocument: %v", err)
	}
	if n, _ := s.CountChunks(ctx, acme); n != 0 {
		t.Fatalf("%d chunks left", n)
	}
}

// TestContentVersionsAndMentions: a new version records the chunk sets
// left to remove until MarkIndexed forgets them; mentions are added while
// the content and job are current, and narrowed by the extraction.
func TestContentVersionsAndMentions(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		s := newStore(t, db)
		sc := document.Scope{Tenant: "acme", Project: "p"}
		now := time.Now().UTC().Truncate(time.Millisecond)
		h1, h2 := document.Hash("one"), document.Hash("two")
		d := &document.Document{ID: "doc_1", Scope: sc, RawContent: "one", ContentHash: h1, ChunkCount: 3, ExtractionJobID: "j1"}
		if err := s.SaveContent(ctx, d, time.Time{}, now); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name, hash, job string
			want            bool
		}{{"other content", h2, "j1", false}, {"other job", h1, "j0", false}, {"current", h1, "j1", true}} {
			if ok, err := s.AddMentions(ctx, sc, "doc_1", tc.hash, tc.job, []string{"entity:ticker:bhp"}); ok != tc.want || err != nil {
				t.Errorf("AddMentions (%s) = %v, %v; want %v", tc.name, ok, err, tc.want)
			}
		}
		if ok, err := s.AddMentions(ctx, sc, "doc_1", h1, "j1", []string{"entity:ticker:bhp", "entity:person:ana"}); !ok || err != nil {
			t.Fatalf("AddMentions = %v, %v", ok, err)
		}
		got, err := s.LoadDocument(ctx, sc, "doc_1")
		if err != nil || !slices.Equal(got.GraphMentions, []string{"entity:ticker:bhp", "entity:person:ana"}) {
			t.Fatalf("mentions = %v, %v", got.GraphMentions, err)
		}
		ok, err := s.CompleteExtraction(ctx, sc, "doc_1", h1, ExtractionResult{JobID: "j1", Mentions: []string{"entity:ticker:bhp"},
			Status: indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED}, now)
		if !ok || err != nil {
			t.Fatalf("CompleteExtraction = %v, %v", ok, err)
		}
		// A new version: the old chunk set is left to remove, the mentions
		// stay until the new content's extraction narrows them.
		v2 := &document.Document{ID: "doc_1", Scope: sc, RawContent: "two", ContentHash: h2, ChunkCount: 2, ExtractionJobID: "j2",
			StaleChunks: []document.ChunkSet{{Hash: h1, Count: 3}}, Version: got.Version + 1}
		if err := s.SaveContent(ctx, v2, time.Time{}, now); err != nil {
			t.Fatal(err)
		}
		got, err = s.LoadDocument(ctx, sc, "doc_1")
		if err != nil || got.Indexed || got.ContentHash != h2 || len(got.StaleChunks) != 1 || got.StaleChunks[0] != (document.ChunkSet{Hash: h1, Count: 3}) ||
			!slices.Equal(got.GraphMentions, []string{"entity:ticker:bhp"}) || len(got.Extracts) != 0 {
			t.Fatalf("after the new version: %+v, %v", got, err)
		}
		stale := *v2
		stale.Version = 1
		if err := s.SaveContent(ctx, &stale, time.Time{}, now); !errors.Is(err, document.ErrConflict) {
			t.Fatalf("SaveContent from a stale read: %v, want ErrConflict", err)
		}
		if ok, err := s.MarkIndexed(ctx, sc, "doc_1", h2, got.StaleChunks); !ok || err != nil {
			t.Fatalf("MarkIndexed = %v, %v", ok, err)
		}
		got, err = s.LoadDocument(ctx, sc, "doc_1")
		if err != nil || !got.Indexed || len(got.StaleChunks) != 0 {
			t.Fatalf("after MarkIndexed: indexed %v, stale %v, %v", got.Indexed, got.StaleChunks, err)
		}
	})
}

// TestIngestClaimTakeover: an ingest that finishes another's after its
// claim lapsed writes over the claim it read; should the first ingest
// renew it meanwhile (slow, not dead), the takeover is a conflict, though
// renewals do not move the version. Once taken over, the first ingest's
// renewals fail: its claim names another job now.
func TestIngestClaimTakeover(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		s := newStore(t, db)
		sc := document.Scope{Tenant: "acme"}
		now := time.Now().UTC().Truncate(time.Millisecond)
		h := document.Hash("one")
		first := &document.Document{ID: "doc_1", Scope: sc, RawContent: "one", ContentHash: h, ChunkCount: 1,
			ExtractionJobID: "j1", IngestUntil: now.Add(-time.Second)} // lapsed
		if err := s.SaveContent(ctx, first, time.Time{}, now.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
		read, err := s.LoadDocument(ctx, sc, "doc_1")
		if err != nil || !read.IngestUntil.Equal(first.IngestUntil) {
			t.Fatalf("LoadDocument: claim %v, %v; want %v", read.IngestUntil, err, first.IngestUntil)
		}
		// The first ingest renews after the finisher read the lapsed claim.
		if ok, err := s.RenewIngest(ctx, sc, "doc_1", h, "j1", now.Add(time.Minute)); !ok || err != nil {
			t.Fatalf("RenewIngest = %v, %v", ok, err)
		}
		takeover := func() *document.Document {
			return &document.Document{ID: "doc_1", Scope: sc, RawContent: "one", ContentHash: h, ChunkCount: 1,
				ExtractionJobID: "j2", IngestUntil: now.Add(time.Minute), Version: read.Version}
		}
		if err := s.SaveContent(ctx, takeover(), read.IngestUntil, now); !errors.Is(err, document.ErrConflict) {
			t.Fatalf("takeover over a renewed claim: %v; want ErrConflict", err)
		}
		if got, err := s.LoadDocument(ctx, sc, "doc_1"); err != nil || got.ExtractionJobID != "j1" {
			t.Fatalf("after the refused takeover: job %s, %v; want j1", got.ExtractionJobID, err)
		}
		// Read again, the claim lapses for good: the takeover writes.
		if ok, err := s.RenewIngest(ctx, sc, "doc_1", h, "j1", now.Add(-time.Millisecond)); !ok || err != nil {
			t.Fatalf("RenewIngest = %v, %v", ok, err)
		}
		if read, err = s.LoadDocument(ctx, sc, "doc_1"); err != nil {
			t.Fatal(err)
		}
		if err := s.SaveContent(ctx, takeover(), read.IngestUntil, now); err != nil {
			t.Fatalf("takeover over a lapsed claim: %v", err)
		}
		if ok, err := s.RenewIngest(ctx, sc, "doc_1", h, "j1", now.Add(time.Minute)); ok || err != nil {
			t.Errorf("the displaced ingest's RenewIngest = %v, %v; want false", ok, err)
		}
		if ok, err := s.RenewIngest(ctx, sc, "doc_1", h, "j2", now.Add(time.Minute)); !ok || err != nil {
			t.Errorf("the new ingest's RenewIngest = %v, %v; want true", ok, err)
		}
	})
}

// TestClaims: one holder at a time; a lapsed or released claim is taken
// over by inserting the next generation; the old holder learns it lost
// it; a dropped claim can be taken again from the start.
func TestClaims(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		s := newStore(t, db)
		now := time.Now()
		const ttl = time.Second
		a, err := s.TakeClaim(ctx, "job/j1", "a", now, ttl)
		if err != nil || a.Gen != 1 {
			t.Fatalf("first claim = %+v, %v", a, err)
		}
		var busy *document.BusyError
		if _, err := s.TakeClaim(ctx, "job/j1", "b", now.Add(ttl/2), ttl); !errors.As(err, &busy) || busy.Holder != "a" {
			t.Fatalf("claim while held = %v, want busy by a", err)
		}
		if err := s.RenewClaim(ctx, a, now.Add(ttl/2), ttl); err != nil {
			t.Fatal(err)
		}
		// Held past the first expiry thanks to the renewal.
		if _, err := s.TakeClaim(ctx, "job/j1", "b", now.Add(ttl+ttl/4), ttl); !errors.As(err, &busy) {
			t.Fatalf("claim after a renewal = %v, want busy", err)
		}
		// Lapsed: b takes it over, and a learns it lost it.
		late := now.Add(3 * ttl)
		b, err := s.TakeClaim(ctx, "job/j1", "b", late, ttl)
		if err != nil || b.Gen != 2 {
			t.Fatalf("takeover = %+v, %v", b, err)
		}
		if err := s.RenewClaim(ctx, a, late, ttl); !errors.Is(err, document.ErrClaimLost) {
			t.Fatalf("renewal by the old holder = %v, want ErrClaimLost", err)
		}
		// Released: taken at once.
		if err := s.ReleaseClaim(ctx, b); err != nil {
			t.Fatal(err)
		}
		if err := s.RenewClaim(ctx, b, late, ttl); !errors.Is(err, document.ErrClaimLost) {
			t.Fatalf("renewal of a released claim = %v, want ErrClaimLost", err)
		}
		c, err := s.TakeClaim(ctx, "job/j1", "c", late, ttl)
		if err != nil || c.Gen != 3 {
			t.Fatalf("claim after a release = %+v, %v", c, err)
		}
		if err := s.DropClaim(ctx, c); err != nil {
			t.Fatal(err)
		}
		if n, err := db.Collection(ClaimsCollection).CountDocuments(ctx, bson.M{}); err != nil || n != 0 {
			t.Fatalf("%d claim records after the drop, %v", n, err)
		}
		if d, err := s.TakeClaim(ctx, "job/j1", "d", late, ttl); err != nil || d.Gen != 1 {
			t.Fatalf("claim after the drop = %+v, %v", d, err)
		}
	})
}

// TestClaimRace: workers racing for one claim: exactly one gets it.
func TestClaimRace(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		s := newStore(t, db)
		now := time.Now()
		// A lapsed first generation, so that the racers take it over.
		if _, err := s.TakeClaim(ctx, "job/j", "dead", now.Add(-time.Minute), time.Second); err != nil {
			t.Fatal(err)
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				_, err := s.TakeClaim(ctx, "job/j", fmt.Sprint(i), now, time.Minute)
				var busy *document.BusyError
				switch {
				case err == nil:
					wins.Add(1)
				case !errors.As(err, &busy):
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d workers hold the claim, want 1", wins.Load())
		}
	})
}

func TestJobsNeverLeaveTerminalState(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testJobsNeverLeaveTerminalState)
}

func testJobsNeverLeaveTerminalState(t *testing.T, db *mongo.Database) {
	ctx := context.Background()
	s := newStore(t, db)
	sc := document.Scope{Tenant: "acme", Project: "p"}
	queued := indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_QUEUED
	j := &document.Job{ID: "j1", Scope: sc, DocumentID: "d", Status: queued, CreateTime: time.Now().Add(-time.Hour)}
	if err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if p, err := s.PendingJobs(ctx, time.Now(), 10); err != nil || len(p) != 1 {
		t.Fatalf("PendingJobs = %v, %v", p, err)
	}
	j.Status = indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED
	j.Runs = []document.Run{{Extractor: "x", Status: indexerv1.ExtractorRunStatus_EXTRACTOR_RUN_STATUS_FAILED, Error: "boom", Duration: 1500 * time.Millisecond}}
	if ok, err := s.UpdateJob(ctx, j, queued); !ok || err != nil {
		t.Fatalf("UpdateJob = %v, %v", ok, err)
	}
	j.Status = indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_RUNNING
	if ok, err := s.UpdateJob(ctx, j, queued); ok || err != nil {
		t.Fatalf("UpdateJob after the end = %v, %v", ok, err)
	}
	if ok, err := s.RequeueJob(ctx, j); ok || err != nil {
		t.Fatalf("RequeueJob of an ended job = %v, %v", ok, err)
	}
	got, err := s.GetJob(ctx, sc, "j1")
	if err != nil || got.Status != indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED || got.Runs[0].Error != "boom" || got.Runs[0].Duration != 1500*time.Millisecond {
		t.Fatalf("job = %+v, %v", got, err)
	}
	if _, err := s.GetJob(ctx, document.Scope{Tenant: "acme"}, "j1"); !errors.Is(err, document.ErrNotFound) {
		t.Fatalf("job visible in another project: %v", err)
	}
}

// TestConcurrentWritesLoseNothing: job updates racing each other and the
// outbox relay (FerretDB v1 loses racing updates of one document unless
// the store serialises them) keep every event and the last state.
func TestConcurrentWritesLoseNothing(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testConcurrentWritesLoseNothing)
}

func testConcurrentWritesLoseNothing(t *testing.T, db *mongo.Database) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newStore(t, db)
	published := relaying(ctx, t, s)

	sc := document.Scope{Tenant: "acme"}
	running := indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_RUNNING
	if err := s.CreateJob(ctx, &document.Job{ID: "j", Scope: sc, Status: running}); err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				e := testEntry(sc, fmt.Sprintf("e-%d-%d", w, i))
				j := &document.Job{ID: "j", Scope: sc, Status: running, Attempts: w*each + i}
				if _, err := s.UpdateJob(ctx, j, running, e); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	testkit.Eventually(t, 20*time.Second, func() bool { return published() == writers*each }, "all %d events relayed", writers*each)
}

// TestOutboxRelaysWithoutScanning: after the sweeps at start, the relays
// publish what each write names, reading nothing but by _id (a single
// writer's entries not even that), however many writes there are.
func TestOutboxRelaysWithoutScanning(t *testing.T) {
	t.Parallel()
	for _, single := range []bool{false, true} {
		t.Run(map[bool]string{false: "many writers", true: "single writer"}[single], func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			db, rt := testkit.MongoDBCounted(t)
			if single {
				mongox.MarkSingleWriter(db.Client())
			}
			s := New(db)
			published := relaying(ctx, t, s)
			testkit.Eventually(t, 10*time.Second, func() bool { return len(rt.Unkeyed()) == 2 }, "the sweeps at start")
			rt.Reset()

			sc := document.Scope{Tenant: "acme"}
			entry := func(id string) events.OutboxEntry { return testEntry(sc, id) }
			queued, running := indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_QUEUED, indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_RUNNING
			const writes = 10
			for i := range writes {
				id := fmt.Sprintf("j%d", i)
				if err := s.CreateJob(ctx, &document.Job{ID: id, Scope: sc, Status: queued}, entry(id+":queued")); err != nil {
					t.Fatal(err)
				}
				if ok, err := s.UpdateJob(ctx, &document.Job{ID: id, Scope: sc, Status: running}, queued, entry(id+":started")); !ok || err != nil {
					t.Fatalf("UpdateJob = %v, %v", ok, err)
				}
			}
			testkit.Eventually(t, 10*time.Second, func() bool { return published() == 2*writes }, "every event published")
			testkit.Eventually(t, 10*time.Second, func() bool {
				for i := range writes {
					var j struct {
						Outbox []bson.Raw `bson:"outbox"`
					}
					if err := db.Collection(JobsCollection).FindOne(ctx, byID(fmt.Sprintf("j%d", i))).Decode(&j); err != nil || len(j.Outbox) > 0 {
						return false
					}
				}
				return true
			}, "every published entry removed")
			bad := rt.Unkeyed()
			if single {
				bad = rt.NotExact()
			}
			if len(bad) > 0 {
				t.Fatalf("the write path scanned:\n%s", strings.Join(bad, "\n"))
			}
		})
	}
}

// relaying runs the store's relays until ctx ends, on a NATS server of the
// test's own, and returns how many distinct events they have published on
// acme's subjects so far.
func relaying(ctx context.Context, t *testing.T, s *Store) (published func() int) {
	t.Helper()
	bus, err := events.Connect(ctx, testkit.NewNATS(t).URL(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	if err := bus.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	if _, err := bus.Conn().Subscribe("am.evt.acme.>", func(m *nats.Msg) {
		var ev commonv1.Event
		if proto.Unmarshal(m.Data, &ev) == nil {
			mu.Lock()
			seen[ev.GetId()] = true
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	go s.RunOutbox(ctx, bus, nil)
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
}

// testEntry is an outbox entry of a job event with id.
func testEntry(sc document.Scope, id string) events.OutboxEntry {
	ev, _ := events.NewEvent("extraction_job.test", "indexer", sc.Proto(), "", nil)
	ev.Id = id
	e, _ := events.OutboxEntryFor(events.EventSubject(sc.Tenant, "extraction_job", "j", "test"), ev)
	return e
}
