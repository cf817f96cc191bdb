package mongostore

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
)

// TestPipelinePhasesOnlyAdd: each write after the ingest's adds its
// phase to the stored state and leaves what the earlier phases found as
// they wrote it; a new content version starts a new state.
func TestPipelinePhasesOnlyAdd(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testPipelinePhasesOnlyAdd)
}

func testPipelinePhasesOnlyAdd(t *testing.T, db *mongo.Database) {
	ctx := context.Background()
	s := newStore(t, db)
	sc := document.Scope{Tenant: "acme"}
	now := time.Now().UTC().Truncate(time.Millisecond)
	phase := func(name string) *indexerv1.IntakePhase {
		return &indexerv1.IntakePhase{Name: name, Duration: durationpb.New(time.Millisecond), Tokens: 7}
	}
	ingest := &indexerv1.IntakePipeline{
		CorrelationId: "xj_1", SourceUrn: "https://jira.example.com/PAY-7",
		Attachments: []*indexerv1.IntakeAttachment{{Name: "p.png", MimeType: "image/png", SizeBytes: 155, Visual: true, VisionAnalysis: "a panel"}},
		Vision:      &indexerv1.IntakeVision{GeneralSummary: "a Grafana panel", TypeSpecificDetails: "Ticket key: PAY-7"},
		ContentType: &indexerv1.IntakeContentTypeDecision{Type: indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_JIRA, Reason: "rules", DecidedBy: indexerv1.DecidedBy_DECIDED_BY_RULES, FineType: "ticket"},
		Extraction:  &indexerv1.IntakeExtraction{Result: &indexerv1.IntakeExtraction_Jira{Jira: &indexerv1.JiraExtraction{Key: "PAY-7", Status: "Open"}}},
		Indexing:    &indexerv1.IntakeIndexing{BaseNodeKey: "jira_xj_1", BaseInfo: "Jira PAY-7", ChunkCount: 3},
		Phases:      []*indexerv1.IntakePhase{phase("vision_stage1"), phase("content_type"), phase("vision_stage2"), phase("extraction")},
	}
	d := &document.Document{ID: "doc_p", Scope: sc, RawContent: "Status: Open", ContentHash: document.Hash("Status: Open"), ChunkCount: 3,
		ExtractionJobID: "xj_1", Pipeline: proto.Clone(ingest).(*indexerv1.IntakePipeline)}
	if err := s.SaveContent(ctx, d, time.Time{}, now); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.MarkIndexedPipeline(ctx, sc, d.ID, d.ContentHash, nil, PipelineProgress{Phase: phase("indexing"), Processed: 3}); !ok || err != nil {
		t.Fatalf("MarkIndexedPipeline = %v, %v", ok, err)
	}
	routing := &indexerv1.IntakeRouting{Routing: indexerv1.Routing_ROUTING_LIFT_UP, Reason: "a bug", DecidedBy: indexerv1.DecidedBy_DECIDED_BY_MODEL, LiftedJobId: "job-1"}
	if ok, err := s.CompleteExtraction(ctx, sc, d.ID, d.ContentHash, ExtractionResult{JobID: "xj_1", Routing: routing.Routing, RoutingReason: routing.Reason,
		Pipeline: PipelineProgress{Phase: phase("routing"), Routing: routing}, LiftedJobID: "job-1"}, now); !ok || err != nil {
		t.Fatalf("CompleteExtraction = %v, %v", ok, err)
	}
	got, err := s.GetDocument(ctx, sc, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := proto.Clone(ingest).(*indexerv1.IntakePipeline)
	want.Indexing.ProcessedCount = 3
	want.Phases = append(want.Phases, phase("indexing"), phase("routing"))
	want.Routing, want.Finished = routing, true
	if diff := cmp.Diff(want, got.Pipeline, protocmp.Transform()); diff != "" {
		t.Errorf("stored pipeline (-want +got):\n%s", diff)
	}
	if got.LiftedJobID != "job-1" {
		t.Errorf("lifted job %q", got.LiftedJobID)
	}

	// New content: a new state, nothing of the old routing or lift left.
	d.RawContent, d.ContentHash, d.ExtractionJobID = "Status: Closed", document.Hash("Status: Closed"), "xj_2"
	d.Pipeline = &indexerv1.IntakePipeline{CorrelationId: "xj_2", Phases: []*indexerv1.IntakePhase{phase("content_type")}}
	d.Version = got.Version
	if err := s.SaveContent(ctx, d, time.Time{}, now); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetDocument(ctx, sc, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Pipeline.GetCorrelationId() != "xj_2" || got.Pipeline.GetRouting() != nil || got.Pipeline.GetFinished() || len(got.Pipeline.GetPhases()) != 1 || got.LiftedJobID != "" {
		t.Errorf("after new content: pipeline %v, lifted job %q", got.Pipeline, got.LiftedJobID)
	}
}
