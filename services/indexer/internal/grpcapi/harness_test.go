package grpcapi_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/chunk"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	docstore "github.com/agentmesh/agentmesh/services/indexer/internal/document/mongostore"
	"github.com/agentmesh/agentmesh/services/indexer/internal/embed"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
	"github.com/agentmesh/agentmesh/services/indexer/internal/follow"
	graphstore "github.com/agentmesh/agentmesh/services/indexer/internal/graph/mongostore"
	"github.com/agentmesh/agentmesh/services/indexer/internal/grpcapi"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intake"
)

// infra is what survives a service restart: NATS, the database and the
// index directory.
type infra struct {
	nats *testkit.NATS
	// db is the database, shared by the indexers started on it; or, when
	// it is nil, uri and name say where each indexer connects on its own.
	db        *mongo.Database
	uri, name string
	dir       string
}

// newInfra returns infrastructure on which each indexer has a database
// connection of its own, as replicas of the service binary have (many
// writers).
func newInfra(t *testing.T) *infra {
	t.Helper()
	uri, name := testkit.MongoURI(t)
	return &infra{nats: testkit.NewNATS(t), uri: uri, name: name, dir: t.TempDir()}
}

// eachMode runs body in both writer modes (testkit.EachWriterMode): for
// replicas, and for the one process of agentmesh up.
func eachMode(t *testing.T, body func(t *testing.T, in *infra)) {
	t.Helper()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		body(t, &infra{nats: testkit.NewNATS(t), db: db, dir: t.TempDir()})
	})
}

// connect returns the database for one indexer.
func (in *infra) connect(t *testing.T) *mongo.Database {
	t.Helper()
	if in.db != nil {
		return in.db
	}
	client, err := mongo.Connect(options.Client().ApplyURI(in.uri))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client.Database(in.name)
}

// harness is one running indexer: the real pipeline behind the real gRPC
// servers, the extraction consumer on JetStream and the outbox relays.
type harness struct {
	*infra
	db           *mongo.Database // this indexer's connection
	bus          *events.Bus
	instanceName string
	svc          *intake.Service
	docs         indexerv1.DocumentServiceClient
	search       indexerv1.SearchServiceClient
	graph        indexerv1.GraphServiceClient
	store        *docstore.Store
	graphs       *graphstore.Store
	indexes      *hybrid.Manager
	// follower follows every replica's chunk changes into indexes: nil
	// for a single writer, which has none to follow.
	follower *follow.Follower
	// health records the follower's reports (see healthLog).
	health *healthLog
	// applies times the follower's applies.
	applies *timings
	stop    func()
}

// startOptions tune an indexer the harness starts.
type startOptions struct {
	// extractors run in extraction jobs; nil means the three rule-based ones.
	extractors []extract.Extractor
	// leaseTTL is the jobs' claim TTL; 0 means the service's default.
	leaseTTL time.Duration
	// instance names the indexer in claims.
	instance string
	// ownDir gives the indexer search indexes of its own, as a replica
	// has, rather than in.dir.
	ownDir bool
	// dir, when set, is the indexer's index directory (a replica
	// restarted on its volume).
	dir string
	// noExtraction starts no extraction consumer: the other replicas run
	// every job.
	noExtraction bool
}

// start runs an indexer on in with the given extractors (nil: the three
// rule-based ones). The returned harness is stopped in t.Cleanup, or
// earlier with stop.
func start(t *testing.T, in *infra, extractors []extract.Extractor) *harness {
	t.Helper()
	return startWith(t, in, startOptions{extractors: extractors})
}

// startWith runs an indexer on in, with its own database connection.
func startWith(t *testing.T, in *infra, o startOptions) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	bus, err := events.Connect(ctx, in.nats.URL(), t.Name(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	db := in.connect(t)
	store := docstore.New(db)
	graphs := graphstore.New(db)
	if err := store.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	if err := graphs.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	emb := embed.LocalHash{}
	dir := in.dir
	switch {
	case o.dir != "":
		dir = o.dir
	case o.ownDir:
		dir = t.TempDir()
	}
	indexes, err := hybrid.NewManager(hybrid.ManagerOptions{Dir: dir, Embedder: emb.Name(), Dimensions: emb.Dimensions()})
	if err != nil {
		t.Fatal(err)
	}
	extractors := o.extractors
	if extractors == nil {
		extractors = []extract.Extractor{extract.Financial{}, extract.MeetingNotes{}, extract.APIDoc{}}
	}
	var wg sync.WaitGroup
	wg.Go(func() { store.RunOutbox(ctx, bus, nil) })
	svc, err := intake.New(intake.Config{Chunk: chunk.Options{Size: 400, Overlap: 80}, ExtractorTimeout: 10 * time.Second, MaxDeliver: 3, JobLeaseTTL: o.leaseTTL},
		intake.Deps{Docs: store, Graph: graphs, Indexes: indexes, Embedder: emb, Extractors: extractors, Instance: o.instance})
	if err != nil {
		t.Fatal(err)
	}
	var consumer *events.Consumer
	if !o.noExtraction {
		consumer, err = bus.Consume(ctx, events.ConsumerSpec{
			Stream: events.StreamWork, Durable: "indexer-extraction", FilterSubject: events.WorkSubject(intake.ExtractionQueue),
			Concurrency: 2, MaxDeliver: 3, Backoff: []time.Duration{50 * time.Millisecond},
		}, svc.HandleJob)
		if err != nil {
			t.Fatal(err)
		}
	}
	health, applies := &healthLog{}, &timings{}
	var follower *follow.Follower
	if !store.SingleWriter() {
		// As indexer.Run does.
		follower, err = follow.New(bus, follow.Config{
			Stream: events.StreamEvents, Subject: intake.ChunksChangedFilter, Position: filepath.Join(dir, "follow-position.json"),
			Name: o.instance, Health: health.set, SaveInterval: 50 * time.Millisecond,
			Apply: func(ctx context.Context, ev *commonv1.Event) error {
				began := time.Now()
				defer applies.add(began)
				return svc.HandleChunkChange(ctx, ev)
			},
			Rebuild: func(ctx context.Context) error {
				_, err := svc.Rebuild(ctx, nil)
				return err
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = follower.Run(ctx) })
	}
	conn := testkit.StartGRPC(t, func(s *grpc.Server) {
		indexerv1.RegisterDocumentServiceServer(s, grpcapi.NewDocuments(svc, grpcapi.Limits{MaxContentBytes: 1 << 20, MaxAttachments: 2}))
		indexerv1.RegisterSearchServiceServer(s, grpcapi.NewSearch(svc))
		indexerv1.RegisterGraphServiceServer(s, grpcapi.NewGraph(graphs))
	})
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if consumer != nil {
				consumer.Stop()
			}
			cancel()
			wg.Wait()
			if err := indexes.Close(); err != nil {
				t.Errorf("close indexes: %v", err)
			}
			bus.Close()
		})
	}
	t.Cleanup(stop)
	return &harness{infra: in, db: db, bus: bus, instanceName: o.instance, svc: svc, docs: indexerv1.NewDocumentServiceClient(conn), search: indexerv1.NewSearchServiceClient(conn),
		graph: indexerv1.NewGraphServiceClient(conn), store: store, graphs: graphs, indexes: indexes, follower: follower, health: health, applies: applies, stop: stop}
}

// caughtUp waits until the indexer's follower, if it has one, has caught
// up with the chunk changes the stream held when it started.
func (h *harness) caughtUp(t *testing.T) {
	t.Helper()
	if h.follower == nil {
		return
	}
	select {
	case <-h.follower.CaughtUp():
	case <-time.After(20 * time.Second):
		t.Fatal("the follower did not catch up")
	}
}

// timings records how long calls took.
type timings struct {
	mu sync.Mutex
	ds []time.Duration
}

func (tm *timings) add(began time.Time) {
	d := time.Since(began)
	tm.mu.Lock()
	defer tm.mu.Unlock()
	tm.ds = append(tm.ds, d)
}

// reset forgets the calls so far.
func (tm *timings) reset() {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	tm.ds = nil
}

// mean returns the calls' mean duration and their number.
func (tm *timings) mean() (time.Duration, int) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if len(tm.ds) == 0 {
		return 0, 0
	}
	var sum time.Duration
	for _, d := range tm.ds {
		sum += d
	}
	return sum / time.Duration(len(tm.ds)), len(tm.ds)
}

// healthLog records what a follower reports to its health function.
type healthLog struct {
	mu      sync.Mutex
	reports []error
}

func (l *healthLog) set(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reports = append(l.reports, err)
}

// last returns the last report and how many there were.
func (l *healthLog) last() (error, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.reports) == 0 {
		return nil, 0
	}
	return l.reports[len(l.reports)-1], len(l.reports)
}

func scope(tenant, project string) *commonv1.Scope {
	return &commonv1.Scope{TenantId: tenant, ProjectId: project}
}

// ingest ingests a document and fails the test on error.
func (h *harness) ingest(t *testing.T, sc *commonv1.Scope, st indexerv1.SourceType, url, title, content string) *indexerv1.IngestDocumentResponse {
	t.Helper()
	resp, err := h.docs.IngestDocument(context.Background(), &indexerv1.IngestDocumentRequest{Scope: sc, SourceType: st, SourceUrl: url, Title: title, RawContent: content})
	if err != nil {
		t.Fatalf("ingest %s: %v", url, err)
	}
	return resp
}

// settled waits until the document's extraction job has ended and returns
// the document.
func (h *harness) settled(t *testing.T, sc *commonv1.Scope, id string) *indexerv1.Document {
	t.Helper()
	var doc *indexerv1.Document
	testkit.Eventually(t, 20*time.Second, func() bool {
		resp, err := h.docs.GetDocument(context.Background(), &indexerv1.GetDocumentRequest{Scope: sc, DocumentId: id})
		if err != nil {
			return false
		}
		doc = resp.GetDocument()
		return document.Terminal(doc.GetExtractionStatus())
	}, "extraction of %s", id)
	return doc
}

// job waits until an extraction job has ended (its record is written just
// after the document's) and returns it.
func (h *harness) job(t *testing.T, sc *commonv1.Scope, id string) *indexerv1.ExtractionJob {
	t.Helper()
	var j *indexerv1.ExtractionJob
	testkit.Eventually(t, 20*time.Second, func() bool {
		resp, err := h.docs.GetExtractionJob(context.Background(), &indexerv1.GetExtractionJobRequest{Scope: sc, JobId: id})
		if err != nil {
			return false
		}
		j = resp.GetJob()
		return document.Terminal(j.GetStatus())
	}, "job %s", id)
	return j
}

// hits searches and fails the test on error.
func (h *harness) hits(t *testing.T, sc *commonv1.Scope, q string, mode indexerv1.SearchMode, limit int32) []*indexerv1.SearchHit {
	t.Helper()
	resp, err := h.search.Search(context.Background(), &indexerv1.SearchRequest{Scope: sc, Query: q, Mode: mode, Limit: limit})
	if err != nil {
		t.Fatalf("search %q: %v", q, err)
	}
	return resp.GetHits()
}

// query searches and returns the hits' chunk ids.
func (h *harness) query(t *testing.T, sc *commonv1.Scope, q string, mode indexerv1.SearchMode, limit int32) []string {
	t.Helper()
	var ids []string
	for _, hit := range h.hits(t, sc, q, mode, limit) {
		ids = append(ids, hit.GetChunkId())
	}
	return ids
}

// eventLog records the events published under a subject filter, once per
// event id: delivery is at least once (an outbox relay may publish an
// entry again), and consumers deduplicate by id, as this log does.
type eventLog struct {
	mu   sync.Mutex
	evs  []*commonv1.Event
	seen map[string]bool
}

func watchEvents(t *testing.T, in *infra, subject string) *eventLog {
	t.Helper()
	nc, err := nats.Connect(in.nats.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	l := &eventLog{seen: map[string]bool{}}
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) {
		var ev commonv1.Event
		if proto.Unmarshal(m.Data, &ev) == nil {
			l.mu.Lock()
			if !l.seen[ev.GetId()] {
				l.seen[ev.GetId()] = true
				l.evs = append(l.evs, &ev)
			}
			l.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return l
}

// subjects returns the subjects seen so far containing part.
func (l *eventLog) subjects(part string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.evs {
		if strings.Contains(e.GetSubject(), part) {
			out = append(out, e.GetSubject())
		}
	}
	return out
}

// last returns the last event whose subject ends with suffix.
func (l *eventLog) last(suffix string) *commonv1.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.evs) - 1; i >= 0; i-- {
		if strings.HasSuffix(l.evs[i].GetSubject(), suffix) {
			return l.evs[i]
		}
	}
	return nil
}

func contains(ids []string, id string) bool { return slices.Contains(ids, id) }
