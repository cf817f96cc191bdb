package intake_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intake"
)

// TestReconcileLeavesIngestsUnderWay: at start, a replica finishes the
// ingests that died, but not one another replica is still doing: a
// document written less than IngestGrace ago is looked at again only once
// that much time has passed, and left alone if it was finished meanwhile.
func TestReconcileLeavesIngestsUnderWay(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
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
		// An ingest's first write, as another replica (or a dead one) left it.
		begin := func(name string, at time.Time) *document.Document {
			t.Helper()
			text := "Restart the " + name + " when payments time out."
			d := &document.Document{ID: "doc_" + name, Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, Title: name,
				RawContent: text, ContentHash: document.Hash(text), ChunkCount: 2, ExtractionJobID: "xj_" + name}
			if err := docs.SaveContent(ctx, d, at); err != nil {
				t.Fatal(err)
			}
			return d
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
	})
}
