package indexer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/indexer/indexer"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	docstore "github.com/agentmesh/agentmesh/services/indexer/internal/document/mongostore"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgatewaytest"
)

// resumeChildEnv holds, as JSON, the environment of the indexer that
// TestExtractionResumeChild runs.
const resumeChildEnv = "AM_INDEXER_RESUME_CHILD_ENV"

// TestExtractionResumeChild is the indexer process that
// TestKilledExtractionResumesWithinSeconds kills: it runs the indexer as
// the binary does, with the environment its parent gives, and prints
// "ADDR <address>".
func TestExtractionResumeChild(t *testing.T) {
	raw := os.Getenv(resumeChildEnv)
	if raw == "" {
		t.Skip("runs only as the child process of TestKilledExtractionResumesWithinSeconds")
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(raw), &env); err != nil {
		t.Fatal(err)
	}
	cfg := load(t, env)
	svc := testkit.StartService(t, "indexer", func(ctx context.Context, rt service.Runtime) error {
		return indexer.Run(ctx, cfg, rt)
	})
	fmt.Printf("ADDR %s\n", svc.Addr)
	select {} // until killed
}

// An indexer replica killed with SIGKILL in the middle of an extraction job
// — its LLM extractor waiting on a model that never answers, under the
// default two-minute INDEXER_EXTRACTOR_TIMEOUT — leaves the job claimed
// and its work item unacknowledged; the other replica runs the job within
// seconds (the claim TTL and the ack wait are INDEXER_JOB_LEASE_TTL, 6 s by
// default), not after the extractor timeout, and the document is indexed.
func TestKilledExtractionResumesWithinSeconds(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Options{})
	hung := sim.When(providersim.Match{JSON: true}).Named("hung extraction").Hang().Times(1)
	routing := fmt.Sprintf("providers:\n  up: {type: openai, base_url: %q}\nmodels:\n  chat:\n    - {provider: up, model: sim-chat}\n", sim.URL)
	gwAddr := modelgatewaytest.Start(t, routing, map[string]string{"MODELGATEWAY_PROBE_INTERVAL": "1h", "OPENAI_API_KEY": "test-key"})
	uri, db := testkit.MongoURI(t)
	nats := testkit.NewNATS(t)
	env := testEnv(t, uri, db, nats.URL())
	env["INDEXER_LLM_EXTRACTION"], env["MODELGATEWAY_ADDR"] = "true", gwAddr
	ttl := load(t, env).JobLeaseTTL

	raw, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	c := testkit.StartChild(t, "TestExtractionResumeChild", resumeChildEnv+"="+string(raw))
	conn, err := grpc.NewClient(c.Next("ADDR "), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := context.Background()
	sc := &commonv1.Scope{TenantId: "acme"}
	res, err := indexerv1.NewDocumentServiceClient(conn).IngestDocument(ctx, &indexerv1.IngestDocumentRequest{Scope: sc,
		SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, SourceUrl: "https://wiki.example.com/ledger", Title: "Ledger runbook",
		RawContent: "Restart the ledger workers when card payments time out. Ana Novak owns the ledger service and " +
			"answers pages about it during the day; at night the payments on-call engineer restarts the workers " +
			"and opens a ticket for her team to look at in the morning."})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return hung.Hits() == 1 }, "the child's extraction to call the model")
	// The child renews its claim (and its work item) while it waits: the
	// kill comes right after a renewal, the worst moment.
	jobID := res.GetDocument().GetExtractionJobId()
	claims := observer(t, uri).Database(db).Collection(docstore.ClaimsCollection)
	claimUntil := func() time.Time {
		var rec struct {
			Until time.Time `bson:"until"`
		}
		if err := claims.FindOne(ctx, bson.D{{Key: "_id", Value: "job/" + jobID + "/000001"}}).Decode(&rec); err != nil {
			t.Fatalf("read the child's claim: %v", err)
		}
		return rec.Until
	}
	first := claimUntil()
	testkit.Eventually(t, 2*ttl, func() bool { return claimUntil().After(first) }, "the child to renew its claim")

	renv := testEnv(t, uri, db, nats.URL()) // a data directory of its own
	renv["INDEXER_LLM_EXTRACTION"], renv["MODELGATEWAY_ADDR"] = "true", gwAddr
	replica, _ := startRun(t, renv) // up before the crash
	c.Kill()
	killed := time.Now()
	testkit.Eventually(t, 2*ttl+10*time.Second, func() bool { return sim.Count() >= 2 }, "the replica to run the job")
	resumed := time.Since(killed)
	t.Logf("extraction job resumed %s after the kill (job lease TTL %s, extractor timeout %s)",
		resumed.Round(10*time.Millisecond), ttl, load(t, env).ExtractorTimeout)
	if bound := 2*ttl + time.Second; resumed > bound {
		t.Errorf("resumed %s after the kill, want at most %s", resumed, bound)
	}
	docs := indexerv1.NewDocumentServiceClient(replica)
	testkit.Eventually(t, 20*time.Second, func() bool {
		r, err := docs.GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: sc, DocumentId: res.GetDocument().GetId()})
		return err == nil && r.GetDocument().GetExtractionStatus() == indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED
	}, "the document to be indexed")
}

// observer is a client of the test's own on uri, which only reads.
func observer(t *testing.T, uri string) *mongo.Client {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client
}

// An indexer replica killed in the middle of an ingest leaves its document
// saved, unindexed, under a claim nobody renews any more (written here as
// the killed replica's last write, its claim renewed just before the
// kill). Another replica, up all along, finishes the ingest within a third
// of INDEXER_JOB_LEASE_TTL of the claim lapsing — not at the killed
// replica's next start, which a replica scaled away never has — and the
// document is then searchable.
func TestKilledIngestIsFinishedByAnotherReplica(t *testing.T) {
	t.Parallel()
	uri, db := testkit.MongoURI(t)
	nats := testkit.NewNATS(t)
	env := testEnv(t, uri, db, nats.URL())
	ttl := load(t, env).JobLeaseTTL
	replica, _ := startRun(t, env)
	ctx := context.Background()
	sc := &commonv1.Scope{TenantId: "acme"}
	search := indexerv1.NewSearchServiceClient(replica)
	// The replica is up and serves the scope.
	if _, err := search.Search(ctx, &indexerv1.SearchRequest{Scope: sc, Query: "warm up"}); err != nil {
		t.Fatal(err)
	}

	client := observer(t, uri)
	text := "Restart the ledger workers when card payments time out."
	now := time.Now().UTC().Truncate(time.Millisecond)
	claimEnd := now.Add(ttl)
	d := &document.Document{ID: "doc_killed", Scope: document.Scope{Tenant: "acme"}, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI,
		Title: "Ledger runbook", RawContent: text, ContentHash: document.Hash(text), ExtractionJobID: "xj_killed", IngestUntil: claimEnd}
	if err := docstore.New(client.Database(db)).SaveContent(ctx, d, time.Time{}, now); err != nil {
		t.Fatal(err)
	}
	coll := client.Database(db).Collection(docstore.DocumentsCollection)
	indexed := func() bool {
		var rec struct {
			Indexed bool `bson:"indexed"`
		}
		err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: d.ID}}).Decode(&rec)
		return err == nil && rec.Indexed
	}
	testkit.Eventually(t, 2*ttl+20*time.Second, indexed, "the other replica to finish the ingest")
	finished := time.Since(claimEnd)
	t.Logf("ingest finished by the other replica %s after its claim lapsed (INDEXER_JOB_LEASE_TTL %s)", finished.Round(10*time.Millisecond), ttl)
	if finished < 0 {
		t.Errorf("finished %s before its claim lapsed", -finished)
	}
	if bound := ttl/3 + 2*time.Second; finished > bound {
		t.Errorf("finished %s after its claim lapsed, want at most %s", finished, bound)
	}
	// The replica's shard has it once its write is applied (the record
	// shows it indexed a moment before).
	testkit.Eventually(t, 5*time.Second, func() bool {
		res, err := search.Search(ctx, &indexerv1.SearchRequest{Scope: sc, Query: "ledger workers card payments"})
		return err == nil && len(res.GetHits()) > 0 && res.GetHits()[0].GetDocumentId() == d.ID
	}, "a search to find the finished document")
}
