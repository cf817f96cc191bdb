package intake_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/chunk"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	docstore "github.com/agentmesh/agentmesh/services/indexer/internal/document/mongostore"
	"github.com/agentmesh/agentmesh/services/indexer/internal/embed"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
	graphstore "github.com/agentmesh/agentmesh/services/indexer/internal/graph/mongostore"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intake"
)

// newService returns the pipeline on db, with the given extractors (none:
// the rule-based ones), and no relay or consumer: tests call its methods
// directly.
func newService(t *testing.T, db *mongo.Database, cfg intake.Config, extractors ...extract.Extractor) (*intake.Service, *docstore.Store) {
	t.Helper()
	return newServiceEmbedding(t, db, cfg, embed.LocalHash{}, extractors...)
}

// newServiceEmbedding is newService with emb as its embedder.
func newServiceEmbedding(t *testing.T, db *mongo.Database, cfg intake.Config, emb embed.Embedder, extractors ...extract.Extractor) (*intake.Service, *docstore.Store) {
	t.Helper()
	docs, graphs := docstore.New(db), graphstore.New(db)
	indexes, err := hybrid.NewManager(hybrid.ManagerOptions{Dir: t.TempDir(), Embedder: emb.Name(), Dimensions: emb.Dimensions()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = indexes.Close() })
	if cfg.Chunk.Size == 0 {
		cfg.Chunk = chunk.Options{Size: 400, Overlap: 80}
	}
	if extractors == nil {
		extractors = []extract.Extractor{extract.Financial{}, extract.MeetingNotes{}, extract.APIDoc{}}
	}
	svc, err := intake.New(cfg, intake.Deps{Docs: docs, Graph: graphs, Indexes: indexes, Embedder: emb, Extractors: extractors})
	if err != nil {
		t.Fatal(err)
	}
	return svc, docs
}

// background runs sweep (FinishFailedIngests, FinishDeadIngests) until the
// test ends: the test's cleanup stops it and waits for it to return before
// the index is closed and its directory removed (a sweep still writing the
// index made that removal fail: "directory not empty").
func background(t *testing.T, sweep func(context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sweep(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// report is a small financial report: a base chunk and one content chunk
// (C = 2), and one entity (the ticker) once extracted.
const report = "# BHP (ASX: BHP) FY2024\n\n| Metric | FY2024 |\n|---|---:|\n| Revenue (US$m) | 55,658 |\n| EPS (US cents) | 155.8 |\n"

// TestRoundTripBudgets holds the pipeline's hot paths to a budget of
// database commands, in both writer modes, and to lookups by _id: exactly
// {_id} for a single writer (what FerretDB finds by its index), an _id
// with conditions otherwise (MongoDB's point lookups). A change that adds
// a command, or a query that scans, fails here without timing anything.
// The budgets count commands: a bulk write of C chunks is one.
func TestRoundTripBudgets(t *testing.T) {
	t.Parallel()
	for _, single := range []bool{false, true} {
		name := map[bool]string{false: "many writers", true: "single writer"}[single]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRoundTripBudgets(t, single)
		})
	}
}

// budgets are the commands of each step, by writer mode: many, single.
// Where they differ, a conditional update is one command with many
// writers and a read of the condition's fields plus an update by _id for
// a single writer.
var budgets = map[string][2]string{
	// Read the record (absent); insert it; the chunks (one bulk upsert);
	// the graph (nodes, PART_OF edges); the job, with its event and work
	// item; mark it indexed (conditional), with its chunk change for the
	// other replicas. With many writers, the record's state read back for
	// this replica's shard (its chunks at hand, none read).
	"ingest": {
		"find indexer_documents=2 insert indexer_documents=1 insert indexer_extraction_jobs=1 update indexer_chunks=1 update indexer_documents=1 update indexer_graph_edges=1 update indexer_graph_nodes=1",
		"find indexer_documents=2 insert indexer_documents=1 insert indexer_extraction_jobs=1 update indexer_chunks=1 update indexer_documents=1 update indexer_graph_edges=1 update indexer_graph_nodes=1",
	},
	// Claim (one insert); read the job and the document; job running,
	// document running (conditional); the mention named on the document
	// before the graph has it (conditional); entity nodes and MENTIONS
	// edges; the base chunk; the results with their events (conditional);
	// the job's end (conditional); the claim dropped. With many writers,
	// the record's state read back for this replica's shard.
	"extraction": {
		"delete indexer_claims=1 find indexer_documents=2 find indexer_extraction_jobs=1 insert indexer_claims=1 update indexer_chunks=1 update indexer_documents=3 update indexer_extraction_jobs=2 update indexer_graph_edges=1 update indexer_graph_nodes=1",
		"delete indexer_claims=1 find indexer_documents=4 find indexer_extraction_jobs=3 insert indexer_claims=1 update indexer_chunks=1 update indexer_documents=3 update indexer_extraction_jobs=2 update indexer_graph_edges=1 update indexer_graph_nodes=1",
	},
	// One read by _id per hit (the search below has 2).
	"search": {"find indexer_chunks=2", "find indexer_chunks=2"},
	// Mark deleting and read the record as marked; the graph (entities
	// forgotten and, left with no document, deleted with the document's
	// node and chunks; edges); the chunks; the record. A single writer
	// deletes the chunks and the record on the SQLite file
	// (mongox.DeleteIDs).
	"delete": {
		"delete indexer_chunks=1 delete indexer_documents=1 delete indexer_graph_edges=1 delete indexer_graph_nodes=1 find indexer_documents=1 update indexer_documents=1 update indexer_graph_nodes=1",
		"delete indexer_chunks (sqlite)=1 delete indexer_documents (sqlite)=1 delete indexer_graph_edges=1 delete indexer_graph_nodes=1 find indexer_documents=2 find indexer_graph_nodes=1 update indexer_documents=1",
	},
}

func testRoundTripBudgets(t *testing.T, single bool) {
	ctx := context.Background()
	db, rt := testkit.MongoDBCounted(t)
	if single {
		mongox.MarkSingleWriter(db.Client())
	}
	svc, docs := newService(t, db, intake.Config{})
	sc := document.Scope{Tenant: "acme", Project: "research"}
	mode := 0
	if single {
		mode = 1
	}
	check := func(step string) {
		t.Helper()
		if got, want := rt.String(), budgets[step][mode]; got != want {
			t.Errorf("%s: %d commands\n got %s\nwant %s", step, rt.Total(), got, want)
		}
		bad := rt.Unkeyed()
		if single {
			bad = rt.NotExact()
		}
		if len(bad) > 0 {
			t.Errorf("%s: filters that scan a collection:\n%s", step, strings.Join(bad, "\n"))
		}
		rt.Reset()
	}

	rt.Reset()
	res, err := svc.Ingest(ctx, intake.IngestInput{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_REPORT,
		SourceURL: "https://x/bhp", Title: "BHP FY24", RawContent: report})
	if err != nil {
		t.Fatal(err)
	}
	if res.Document.ChunkCount != 2 {
		t.Fatalf("%d chunks; the budgets assume 2", res.Document.ChunkCount)
	}
	check("ingest")

	// The job record carries its "queued" event and its work item: the
	// relay publishes the work from there (none runs in this test).
	var job struct {
		Outbox []events.OutboxEntry `bson:"outbox"`
	}
	if err := db.Collection(docstore.JobsCollection).FindOne(ctx, bson.D{{Key: "_id", Value: res.JobID}}).Decode(&job); err != nil {
		t.Fatal(err)
	}
	subjects := make([]string, len(job.Outbox))
	for i, e := range job.Outbox {
		subjects[i] = e.Subject
	}
	wantSubjects := []string{events.EventSubject("acme", "extraction_job", res.JobID, "queued"), events.WorkSubject(intake.ExtractionQueue)}
	if !slices.Equal(subjects, wantSubjects) {
		t.Fatalf("job outbox %v, want %v", subjects, wantSubjects)
	}
	var work commonv1.Event
	if err := proto.Unmarshal(job.Outbox[1].Data, &work); err != nil {
		t.Fatal(err)
	}
	rt.Reset()

	if err := svc.HandleJob(ctx, &events.Delivery{Event: &work, Subject: job.Outbox[1].Subject, NumDelivered: 1}); err != nil {
		t.Fatal(err)
	}
	check("extraction")
	doc, err := docs.GetDocument(ctx, sc, res.Document.ID)
	if err != nil {
		t.Fatal(err)
	}
	if doc.ExtractionStatus != indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED || !slices.Equal(doc.GraphMentions, []string{"entity:ticker:bhp"}) {
		t.Fatalf("after the job: status %v, mentions %v", doc.ExtractionStatus, doc.GraphMentions)
	}
	rt.Reset()

	hits, err := svc.Search(ctx, intake.SearchQuery{Scope: sc, Text: "BHP revenue EPS", Limit: 5, Mode: hybrid.ModeKeyword})
	if err != nil || len(hits) != 2 {
		t.Fatalf("search: %d hits, %v; the budget assumes 2", len(hits), err)
	}
	check("search")

	if err := svc.Delete(ctx, sc, res.Document.ID); err != nil {
		t.Fatal(err)
	}
	check("delete")
	// Nothing is left behind: every record of the document went by _id.
	for _, coll := range []string{docstore.DocumentsCollection, docstore.ChunksCollection, graphstore.NodesCollection, graphstore.EdgesCollection, docstore.ClaimsCollection} {
		if n, err := db.Collection(coll).CountDocuments(ctx, bson.D{}); err != nil || n != 0 {
			t.Errorf("%s holds %d records after the delete, %v", coll, n, err)
		}
	}
}
