package orchestrator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat/chattest"
)

// TestLiftUpHandsTheDocumentToAnAnalysis: the real indexer and
// orchestrator on one NATS: a log with errors is routed LIFT_UP, the
// document names an analysis job, the orchestrator starts exactly that
// job from the lifted_up event, and the job's input names the document.
func TestLiftUpHandsTheDocumentToAnAnalysis(t *testing.T) {
	t.Parallel()
	natsURL := testkit.NewNATS(t).URL()
	down := chattest.UnreachableAddr(t)
	idxURI, idxDB := testkit.MongoURI(t)
	idxAddr := startIndexer(t, map[string]string{
		"MONGO_URI": idxURI, "MONGO_DATABASE": idxDB, "NATS_URL": natsURL, "INDEXER_DATA_DIR": t.TempDir(),
		"INDEXER_LLM_EXTRACTION": "false", "INDEXER_QUALIFIER_MODEL_CALLS": "false", "MODELGATEWAY_ADDR": down, "VISION_ADDR": down,
	})
	orchURI, orchDB := testkit.MongoURI(t)
	orch, err := runOrchestrator(t, map[string]string{
		"MONGO_URI": orchURI, "MONGO_DATABASE": orchDB, "NATS_URL": natsURL, "MODELGATEWAY_ADDR": down, "INDEXER_ADDR": idxAddr,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	idxConn, err := grpc.NewClient(idxAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idxConn.Close() })
	docs, jobs := indexerv1.NewDocumentServiceClient(idxConn), orchestratorv1.NewJobServiceClient(orch)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sc := &commonv1.Scope{TenantId: "acme", ProjectId: "ops"}
	var log strings.Builder
	for i := range 40 {
		level := "INFO request ok"
		if i%10 == 9 {
			level = "ERROR ledger write failed code=LEDGER_TIMEOUT"
		}
		fmt.Fprintf(&log, "2024-03-12T08:14:%02dZ %s\n", i, level)
	}
	res, err := docs.IngestDocument(ctx, &indexerv1.IngestDocumentRequest{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_LOG,
		SourceUrl: "file:///var/log/ledger.log", Title: "ledger.log", RawContent: log.String()})
	if err != nil {
		t.Fatal(err)
	}
	var doc *indexerv1.Document
	testkit.Eventually(t, 30*time.Second, func() bool {
		r, err := docs.GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: sc, DocumentId: res.GetDocument().GetId()})
		doc = r.GetDocument()
		return err == nil && doc.GetPipeline().GetFinished()
	}, "the intake pipeline finished")
	if doc.GetRouting() != indexerv1.Routing_ROUTING_LIFT_UP || doc.GetLiftedJobId() == "" || doc.GetPipeline().GetRouting().GetLiftedJobId() != doc.GetLiftedJobId() {
		t.Fatalf("routing %v, lifted job %q (pipeline %v): want LIFT_UP naming a job", doc.GetRouting(), doc.GetLiftedJobId(), doc.GetPipeline().GetRouting())
	}
	var job *orchestratorv1.Job
	testkit.Eventually(t, 30*time.Second, func() bool {
		r, err := jobs.GetJob(ctx, &orchestratorv1.GetJobRequest{Scope: sc, JobId: doc.GetLiftedJobId()})
		job = r.GetJob()
		return err == nil
	}, "the analysis the document names")
	if got := job.GetInput().GetFields()["document_id"].GetStringValue(); got != doc.GetId() || job.GetType() != orchestratorv1.JobType_JOB_TYPE_ANALYSIS_REQUEST {
		t.Errorf("job %s of type %v names document %q, want %s", job.GetId(), job.GetType(), got, doc.GetId())
	}
	list, err := jobs.ListJobs(ctx, &orchestratorv1.ListJobsRequest{Scope: sc, Type: orchestratorv1.JobType_JOB_TYPE_ANALYSIS_REQUEST, PageSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetJobs()); n != 1 {
		t.Errorf("%d analyses, want exactly one", n)
	}
}
