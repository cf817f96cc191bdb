package mongostore

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/events"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
)

// TestEveryQueryIsIndexed: with many writers (MongoDB), an index the store
// creates at start serves every query it makes (testkit.AssertIndexed):
// the document lifecycle (reads and conditional writes by _id, chunks,
// FindByTerms, HandledBelow, Unfinished, DeadIngests, ListDocuments), the
// listings with a source type and a cursor, jobs and PendingJobs, claims,
// and the relay sweeps of both collections that have an outbox.
func TestEveryQueryIsIndexed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, rt := testkit.MongoDBCounted(t)
	s := newStore(t, db)
	// Before any write, so no outbox is pending: the sweeps publish
	// nothing and need no bus.
	for _, coll := range []string{DocumentsCollection, JobsCollection} {
		if _, err := events.NewRelay(nil, db.Collection(coll), slog.New(slog.DiscardHandler)).Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}

	testDocumentLifecycleAndQueries(t, db)

	acme := document.Scope{Tenant: "acme", Project: "p"}
	now := time.Now().UTC().Truncate(time.Millisecond)
	d := &document.Document{ID: "doc_2", Scope: acme, SourceType: indexerv1.SourceType_SOURCE_TYPE_REPORT, Title: "t",
		RawContent: "raw", ContentHash: document.Hash("raw"), ExtractionJobID: "j2"}
	if err := s.SaveContent(ctx, d, time.Time{}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IndexState(ctx, acme, "doc_2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadChunks(ctx, acme, []string{"c1"}); err != nil {
		t.Fatal(err)
	}
	for _, after := range []string{"", "doc_0"} {
		for _, st := range []indexerv1.SourceType{indexerv1.SourceType_SOURCE_TYPE_UNSPECIFIED, indexerv1.SourceType_SOURCE_TYPE_REPORT} {
			if _, err := s.ListDocuments(ctx, acme, ListFilter{SourceType: st}, after, 10); err != nil {
				t.Fatal(err)
			}
			if _, err := s.ListDocuments(ctx, acme, ListFilter{SourceType: st, CreatedFrom: time.Unix(1000, 0), CreatedTo: time.Now()}, after, 10); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.FindByTerms(ctx, acme, []string{"financial.ticker=bhp"}, after, 10); err != nil {
			t.Fatal(err)
		}
		if _, err := s.HandledBelow(ctx, "financial_table", 2, after, 10); err != nil {
			t.Fatal(err)
		}
	}

	queued, running := indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_QUEUED, indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_RUNNING
	j := &document.Job{ID: "j2", Scope: acme, DocumentID: "doc_2", Status: queued, CreateTime: now}
	if err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetJob(ctx, acme, "j2"); err != nil {
		t.Fatal(err)
	}
	j.Status = running
	if ok, err := s.UpdateJob(ctx, j, queued); !ok || err != nil {
		t.Fatalf("UpdateJob = %v, %v", ok, err)
	}
	if _, err := s.RequeueJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PendingJobs(ctx, now.Add(time.Hour), 10); err != nil {
		t.Fatal(err)
	}

	c, err := s.TakeClaim(ctx, "doc_2", "me", now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RenewClaim(ctx, c, now, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseClaim(ctx, c); err != nil {
		t.Fatal(err)
	}
	if c, err = s.TakeClaim(ctx, "doc_2", "me", now, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.DropClaim(ctx, c); err != nil {
		t.Fatal(err)
	}
	testkit.AssertIndexed(t, db, rt,
		testkit.Scan{
			Shape: "find indexer_documents {deleting: eq, extractor_versions.financial_table: range} sort {_id: 1} limit",
			Why:   "HandledBelow, after an extractor's schema changed, pages through every document: its range is on a field per extractor",
		},
		testkit.Scan{
			Shape: "find indexer_documents {deleting: eq, _id: range, extractor_versions.financial_table: range} sort {_id: 1} limit",
			Why:   "HandledBelow's next pages",
		},
		testkit.Scan{
			Shape: "aggregate indexer_documents {}",
			Why:   "Scopes, once at start: a $group over every document",
		},
	)
}
