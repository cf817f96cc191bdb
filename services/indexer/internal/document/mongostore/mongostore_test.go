package mongostore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
)

func newStore(t *testing.T) *Store {
	t.Helper()
	s := New(testkit.MongoDB(t))
	if err := s.EnsureIndexes(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDocumentLifecycleAndQueries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	acme, other := document.Scope{Tenant: "acme"}, document.Scope{Tenant: "other"}
	now := time.Now().UTC().Truncate(time.Millisecond)
	d := &document.Document{ID: "doc_1", Scope: acme, SourceType: indexerv1.SourceType_SOURCE_TYPE_REPORT, Title: "BHP",
		RawContent: "raw", ContentHash: document.Hash("raw"), ContentType: "financial_report", ExtractionJobID: "j1"}
	if err := s.SaveContent(ctx, d, now); err != nil {
		t.Fatal(err)
	}
	stale := *d
	stale.Version = 0
	if err := s.SaveContent(ctx, &stale, now); !errors.Is(err, document.ErrConflict) {
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
	if err := s.MarkIndexed(ctx, acme, "doc_1", d.ContentHash); err != nil {
		t.Fatal(err)
	}
	if un, _ := s.Unfinished(ctx, 10); len(un) != 0 {
		t.Fatalf("Unfinished after MarkIndexed = %v", un)
	}
	// Chunks: replace, vectors round-trip, scope isolation.
	c := func(seq int) document.Chunk {
		return document.Chunk{ID: document.ChunkID("doc_1", d.ContentHash, seq), Scope: acme, DocID: "doc_1", Seq: seq, Text: "t", Vector: []float32{0.5, -1.25}, Embedder: "e"}
	}
	if err := s.ReplaceChunks(ctx, acme, "doc_1", []document.Chunk{c(0), c(1), c(2)}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReplaceChunks(ctx, acme, "doc_1", []document.Chunk{c(0), c(1)}); err != nil {
		t.Fatal(err)
	}
	cs, err := s.DocumentChunks(ctx, acme, "doc_1")
	if err != nil || len(cs) != 2 || cs[1].Vector[1] != -1.25 {
		t.Fatalf("chunks = %+v, %v", cs, err)
	}
	if m, _ := s.GetChunks(ctx, other, []string{c(0).ID}); len(m) != 0 {
		t.Fatal("another scope reads chunks")
	}
	var n int
	if err := s.EachChunk(ctx, acme, 1, func(b []document.Chunk) error { n += len(b); return nil }); err != nil || n != 2 {
		t.Fatalf("EachChunk saw %d, %v", n, err)
	}
	if err := s.MarkDeleting(ctx, acme, "doc_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetDocument(ctx, acme, "doc_1"); !errors.Is(err, document.ErrNotFound) {
		t.Fatalf("a deleting document is visible: %v", err)
	}
	if ds, _ := s.ListDocuments(ctx, acme, 0, "", 10); len(ds) != 0 {
		t.Fatal("a deleting document is listed")
	}
}

func TestJobsNeverLeaveTerminalState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	sc := document.Scope{Tenant: "acme", Project: "p"}
	j := &document.Job{ID: "j1", Scope: sc, DocumentID: "d", Status: indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_QUEUED, CreateTime: time.Now().Add(-time.Hour)}
	if err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if p, err := s.PendingJobs(ctx, time.Now(), 10); err != nil || len(p) != 1 {
		t.Fatalf("PendingJobs = %v, %v", p, err)
	}
	j.Status = indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED
	j.Runs = []document.Run{{Extractor: "x", Status: indexerv1.ExtractorRunStatus_EXTRACTOR_RUN_STATUS_FAILED, Error: "boom", Duration: 1500 * time.Millisecond}}
	if ok, err := s.UpdateJob(ctx, j); !ok || err != nil {
		t.Fatalf("UpdateJob = %v, %v", ok, err)
	}
	j.Status = indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_RUNNING
	if ok, err := s.UpdateJob(ctx, j); ok || err != nil {
		t.Fatalf("UpdateJob after the end = %v, %v", ok, err)
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newStore(t)
	n := testkit.NewNATS(t)
	bus, err := events.Connect(ctx, n.URL(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	if err := bus.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	nc := bus.Conn()
	var mu sync.Mutex
	seen := map[string]bool{}
	sub, err := nc.Subscribe("am.evt.acme.>", func(m *nats.Msg) {
		var ev commonv1.Event
		if proto.Unmarshal(m.Data, &ev) == nil {
			mu.Lock()
			seen[ev.GetId()] = true
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	go s.RunOutbox(ctx, bus, nil)

	sc := document.Scope{Tenant: "acme"}
	if err := s.CreateJob(ctx, &document.Job{ID: "j", Scope: sc, Status: indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_RUNNING}); err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				ev, _ := events.NewEvent("extraction_job.test", "indexer", sc.Proto(), "", nil)
				ev.Id = fmt.Sprintf("e-%d-%d", w, i)
				e, _ := events.OutboxEntryFor(events.EventSubject("acme", "extraction_job", "j", "test"), ev)
				j := &document.Job{ID: "j", Scope: sc, Status: indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_RUNNING, Attempts: w*each + i}
				if _, err := s.UpdateJob(ctx, j, e); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	testkit.Eventually(t, 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == writers*each
	}, "all %d events relayed", writers*each)
}
