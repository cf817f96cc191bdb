package indexer_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/config"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/indexer"
)

// load reads the indexer's configuration from env, amended by each of
// more in turn.
func load(t testing.TB, env map[string]string, more ...map[string]string) *indexer.Config {
	t.Helper()
	all := maps.Clone(env)
	for _, m := range more {
		maps.Copy(all, m)
	}
	var cfg indexer.Config
	if err := config.Load("", &cfg, config.Map(all)); err != nil {
		t.Fatal(err)
	}
	return &cfg
}

// testEnv is the environment of an indexer on uri/db and natsURL, with a
// data directory of its own and no model or vision server.
func testEnv(t *testing.T, uri, db, natsURL string) map[string]string {
	return map[string]string{
		"MONGO_URI": uri, "MONGO_DATABASE": db, "NATS_URL": natsURL, "INDEXER_DATA_DIR": t.TempDir(),
		"INDEXER_LLM_EXTRACTION": "false", "INDEXER_QUALIFIER_MODEL_CALLS": "false", "MODELGATEWAY_ADDR": "127.0.0.1:1", "VISION_ADDR": "127.0.0.1:1",
	}
}

// startRun runs the indexer as the binary does, configured by env, and
// returns a connection to it and what stops it (also in t.Cleanup).
func startRun(t *testing.T, env map[string]string) (*grpc.ClientConn, func()) {
	t.Helper()
	cfg := load(t, env)
	svc := testkit.StartService(t, "indexer", func(ctx context.Context, rt service.Runtime) error {
		return indexer.Run(ctx, cfg, rt)
	})
	conn, err := grpc.NewClient(svc.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, func() {
		_ = conn.Close()
		svc.Stop()
	}
}

// TestRunServesThePipeline starts the service as the binary and
// `agentmesh up` do, and drives it over gRPC: ingest, extraction job,
// search, graph; then a restart finds the index on disk.
func TestRunServesThePipeline(t *testing.T) {
	t.Parallel()
	uri, db := testkit.MongoURI(t)
	nats := testkit.NewNATS(t)
	env := testEnv(t, uri, db, nats.URL())
	run := func() (indexerv1.DocumentServiceClient, indexerv1.SearchServiceClient, func()) {
		conn, stop := startRun(t, env)
		return indexerv1.NewDocumentServiceClient(conn), indexerv1.NewSearchServiceClient(conn), stop
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

// TestRunReplicasSearchEachOthersDocuments starts two replicas as the
// service binary does (one database, one NATS, a data directory each):
// each is ready (its search_index dependency SERVING) once it has caught
// up; a document ingested on A is found on B, and once A deletes it, B no
// longer finds it. A single writer (agentmesh up) follows nothing and has
// no such dependency.
func TestRunReplicasSearchEachOthersDocuments(t *testing.T) {
	t.Parallel()
	uri, db := testkit.MongoURI(t)
	nats := testkit.NewNATS(t)
	ctx := context.Background()
	type replica struct {
		docs   indexerv1.DocumentServiceClient
		search indexerv1.SearchServiceClient
		health healthpb.HealthClient
	}
	run := func(more map[string]string) replica {
		env := testEnv(t, uri, db, nats.URL())
		maps.Copy(env, more)
		conn, _ := startRun(t, env)
		return replica{indexerv1.NewDocumentServiceClient(conn), indexerv1.NewSearchServiceClient(conn), healthpb.NewHealthClient(conn)}
	}
	serving := func(r replica, service string) healthpb.HealthCheckResponse_ServingStatus {
		resp, err := r.health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			return healthpb.HealthCheckResponse_UNKNOWN
		}
		return resp.GetStatus()
	}
	a, b := run(nil), run(nil)
	for _, r := range []replica{a, b} {
		testkit.Eventually(t, 20*time.Second, func() bool {
			return serving(r, grpcx.DependencyPrefix+indexer.SearchIndexDependency) == healthpb.HealthCheckResponse_SERVING &&
				serving(r, "") == healthpb.HealthCheckResponse_SERVING
		}, "replica caught up and ready")
	}
	sc := &commonv1.Scope{TenantId: "acme"}
	res, err := a.docs.IngestDocument(ctx, &indexerv1.IngestDocumentRequest{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI,
		SourceUrl: "https://wiki.example.com/ledger", Title: "Ledger runbook", RawContent: "Restart the ledger workers when card payments time out."})
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetDocument().GetId()
	finds := func(r replica) bool {
		hits, err := r.search.Search(ctx, &indexerv1.SearchRequest{Scope: sc, Query: "ledger workers card payments"})
		return err == nil && len(hits.GetHits()) > 0 && hits.GetHits()[0].GetDocumentId() == id
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return finds(b) }, "B finds A's document")
	if _, err := a.docs.DeleteDocument(ctx, &indexerv1.DeleteDocumentRequest{Scope: sc, DocumentId: id}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		hits, err := b.search.Search(ctx, &indexerv1.SearchRequest{Scope: sc, Query: "ledger workers card payments"})
		return err == nil && len(hits.GetHits()) == 0
	}, "B stops finding A's deleted document")

	// A single writer, on a database of its own: ready at once, with no
	// search_index dependency.
	uri2, db2 := testkit.MongoURI(t)
	single := run(map[string]string{"MONGO_URI": uri2, "MONGO_DATABASE": db2, "MONGO_SINGLE_WRITER": "true"})
	testkit.Eventually(t, 10*time.Second, func() bool { return serving(single, "") == healthpb.HealthCheckResponse_SERVING }, "single writer ready")
	if _, err := single.health.Check(ctx, &healthpb.HealthCheckRequest{Service: grpcx.DependencyPrefix + indexer.SearchIndexDependency}); status.Code(err) != codes.NotFound {
		t.Errorf("a single writer's search_index dependency: %v, want NotFound", err)
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
