package intake_test

import (
	"context"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	docstore "github.com/agentmesh/agentmesh/services/indexer/internal/document/mongostore"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intake"
)

// meddling is an extractor that, while it runs, does something to the
// document it extracts (another request of the same or another replica).
type meddling struct{ meddle func(ctx context.Context) }

func (meddling) Name() string                     { return "meddling" }
func (meddling) SchemaVersion() int               { return 1 }
func (meddling) CanHandle(*extract.Document) bool { return true }
func (m meddling) Extract(ctx context.Context, _ *extract.Document) ([]extract.Extract, error) {
	m.meddle(ctx)
	return nil, nil
}

// TestExtractionOfAChangedDocumentLeavesNothing: a document deleted, or
// given new content, while its extractors run: the job's late writes (the
// base chunk of the old content) are removed, whatever the delete or the
// new version cleaned up before them, and the job is superseded.
func TestExtractionOfAChangedDocumentLeavesNothing(t *testing.T) {
	t.Parallel()
	sc := document.Scope{Tenant: "acme"}
	in := intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, SourceURL: "https://x/runbook",
		Title: "Runbook", RawContent: "Restart the ledger when payments time out."}
	tests := []struct {
		name   string
		meddle func(ctx context.Context, svc *intake.Service) error
		chunks int // left in the store at the end
	}{
		{"deleted", func(ctx context.Context, svc *intake.Service) error {
			return svc.Delete(ctx, sc, document.ID(sc, in.SourceURL, ""))
		}, 0},
		{"new content", func(ctx context.Context, svc *intake.Service) error {
			v2 := in
			v2.RawContent = "Page the payments on-call when the ledger times out."
			_, err := svc.Ingest(ctx, v2)
			return err
		}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
				ctx := context.Background()
				var svc *intake.Service
				meddled := 0
				svc, docs := newService(t, db, intake.Config{}, meddling{func(ctx context.Context) {
					if meddled++; meddled == 1 {
						if err := tc.meddle(ctx, svc); err != nil {
							t.Error(err)
						}
					}
				}})
				res, err := svc.Ingest(ctx, in)
				if err != nil {
					t.Fatal(err)
				}
				var job struct {
					Outbox []events.OutboxEntry `bson:"outbox"`
				}
				if err := db.Collection(docstore.JobsCollection).FindOne(ctx, bson.D{{Key: "_id", Value: res.JobID}}).Decode(&job); err != nil {
					t.Fatal(err)
				}
				var work commonv1.Event
				if err := proto.Unmarshal(job.Outbox[1].Data, &work); err != nil {
					t.Fatal(err)
				}
				if err := svc.HandleJob(ctx, &events.Delivery{Event: &work, NumDelivered: 1}); err != nil {
					t.Fatal(err)
				}
				j, err := svc.GetJob(ctx, sc, res.JobID)
				if err != nil || j.Status != indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUPERSEDED {
					t.Fatalf("job = %+v, %v; want superseded", j, err)
				}
				cs, err := docs.DocumentChunks(ctx, sc, res.Document.ID)
				if err != nil || len(cs) != tc.chunks {
					t.Fatalf("%d chunks left, %v; want %d", len(cs), err, tc.chunks)
				}
				for _, c := range cs {
					if c.ContentHash == res.Document.ContentHash {
						t.Fatalf("chunk %s of the old content left", c.ID)
					}
				}
				old := document.ChunkID(res.Document.ID, res.Document.ContentHash, 0)[:len(res.Document.ID)+13]
				err = svc.Indexes.Read(hybrid.Scope{Tenant: "acme"}, func(sh *hybrid.Shard) error {
					kw, vec, err := sh.DocKeys(ctx, res.Document.ID)
					for _, k := range append(kw, vec...) {
						if strings.HasPrefix(k, old) {
							t.Errorf("the search indexes keep %s of the old content", k)
						}
					}
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
