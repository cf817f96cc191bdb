package indexer_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentmesh/agentmesh/libs/config"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/indexer"
)

func load(t *testing.T, env map[string]string) *indexer.Config {
	t.Helper()
	var cfg indexer.Config
	if err := config.Load("", &cfg, config.Map(env)); err != nil {
		t.Fatal(err)
	}
	return &cfg
}

// TestRunServesThePipeline starts the service as the binary and
// `agentmesh up` do, and drives it over gRPC: ingest, extraction job,
// search, graph; then a restart finds the index on disk.
func TestRunServesThePipeline(t *testing.T) {
	t.Parallel()
	uri, db := testkit.MongoURI(t)
	nats := testkit.NewNATS(t)
	env := map[string]string{
		"MONGO_URI": uri, "MONGO_DATABASE": db, "NATS_URL": nats.URL(), "INDEXER_DATA_DIR": t.TempDir(),
		"INDEXER_LLM_EXTRACTION": "false", "MODELGATEWAY_ADDR": "127.0.0.1:1", "VISION_ADDR": "127.0.0.1:1",
	}
	run := func() (indexerv1.DocumentServiceClient, indexerv1.SearchServiceClient, func()) {
		cfg := load(t, env)
		svc := testkit.StartService(t, "indexer", func(ctx context.Context, rt service.Runtime) error {
			return indexer.Run(ctx, cfg, rt)
		})
		conn, err := grpc.NewClient(svc.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		return indexerv1.NewDocumentServiceClient(conn), indexerv1.NewSearchServiceClient(conn), func() {
			_ = conn.Close()
			svc.Stop()
		}
	}
	docs, search, stop := run()
	ctx := context.Background()
	sc := &commonv1.Scope{TenantId: "acme"}
	res, err := docs.IngestDocument(ctx, &indexerv1.IngestDocumentRequest{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_TICKET,
		SourceUrl: "https://jira.example.com/PAY-7", Title: "PAY-7 Ledger timeout",
		RawContent: "Status: Open\nPriority: High\nIssue type: Bug\n\nThe ledger times out for card payments since the 2.4 deploy."})
	if err != nil {
		t.Fatal(err)
	}
	var doc *indexerv1.Document
	testkit.Eventually(t, 20*time.Second, func() bool {
		r, err := docs.GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: sc, DocumentId: res.GetDocument().GetId()})
		doc = r.GetDocument()
		return err == nil && doc.GetExtractionStatus() == indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED
	}, "extraction job")
	if doc.GetContentType() != "ticket" || doc.GetRouting() != indexerv1.Routing_ROUTING_LIFT_UP {
		t.Fatalf("content type %q routing %v (%s)", doc.GetContentType(), doc.GetRouting(), doc.GetRoutingReason())
	}
	hits, err := search.Search(ctx, &indexerv1.SearchRequest{Scope: sc, Query: "ledger timeout card payments"})
	if err != nil || len(hits.GetHits()) == 0 || hits.GetHits()[0].GetDocumentId() != doc.GetId() {
		t.Fatalf("search: %v, %v", hits, err)
	}
	stop()

	// Restarted on the same directory, the index is there at once.
	_, search, stop = run()
	defer stop()
	hits, err = search.Search(ctx, &indexerv1.SearchRequest{Scope: sc, Query: "ledger timeout card payments", Mode: indexerv1.SearchMode_SEARCH_MODE_VECTOR})
	if err != nil || len(hits.GetHits()) == 0 {
		t.Fatalf("search after restart: %v, %v", hits, err)
	}
}

// TestRunRejectsBadConfig names the offending variable.
func TestRunRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for name, env := range map[string]map[string]string{
		"INDEXER_EMBEDDER":      {"INDEXER_EMBEDDER": "bert"},
		"INDEXER_CHUNK_OVERLAP": {"INDEXER_CHUNK_SIZE": "100", "INDEXER_CHUNK_OVERLAP": "90"},
	} {
		env["MONGO_URI"], env["NATS_URL"] = "mongodb://127.0.0.1:1", "nats://127.0.0.1:1"
		err := indexer.Run(context.Background(), load(t, env), service.Runtime{Listener: testkit.Listen(t)})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Run = %v", name, err)
		}
	}
}

// TestDeployVariablesExist: every variable deploy/k8s sets for the
// indexer is one Config reads.
func TestDeployVariablesExist(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../../deploy/k8s/base/indexer.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The Go runtime reads these itself (the manifests size them to the
	// container); Config need not.
	known := map[string]bool{"GOGC": true, "GOMEMLIMIT": true, "GOMAXPROCS": true}
	for _, v := range config.Vars("", &indexer.Config{}) {
		known[v.Name] = true
	}
	for _, m := range regexp.MustCompile(`(?m)-\s+name:\s+([A-Z][A-Z0-9_]+)`).FindAllStringSubmatch(string(b), -1) {
		if !known[m[1]] {
			t.Errorf("deploy/k8s sets %s, which indexer.Config does not read", m[1])
		}
	}
}
