// Package intake is the indexer's pipeline — the qualifier: a document comes
// in, package pipeline's phases run (vision stage 1, content type, vision
// stage 2, type-specific extraction, the indexing plan), the chunks they
// plan are embedded and indexed (BM25, vectors, graph: every chunk PART_OF
// the document's base node); an extraction job on the JetStream work
// queue then runs the extractors, links the entities they and the
// qualifier's extraction name in the graph, and routes (DONE or LIFT_UP:
// rules, then the route_task tool). The pipeline state is written with
// the document, each phase's part in the write that ends it (qualify.go).
// It also deletes documents from every index, searches, rebuilds indexes
// from the document store, and reconciles after a crash.
//
// # Several replicas
//
// Every step works with other indexer processes on the same database:
//   - an extraction job runs under a claim (see claim.go): a redelivered
//     or requeued job waits while another worker holds it, and takes over
//     within a lease TTL of that worker's death;
//   - a job's work item rides in the job record's outbox, written with the
//     job, so a crash cannot leave a queued job with nothing to run it;
//   - an ingest claims its document from its first write until it is
//     indexed, renewing the claim every JobLeaseTTL/3 (its writes are also
//     bounded by IngestGrace), and reconciliation leaves a document whose
//     claim holds to the ingest under way (in this process or another),
//     finishing it once the claim has lapsed; while they run, every
//     replica looks for such lapsed claims every JobLeaseTTL/3 and
//     finishes their documents (FinishDeadIngests), so a replica killed or
//     scaled away mid-ingest leaves nothing unindexed for long;
//   - an ingest, or an extraction, that finds its document changed or
//     deleted when it comes to record its work removes what it wrote, which
//     the newer version or the delete may have missed.
//
// # Search indexes with several replicas
//
// Each replica has search shards of its own (hybrid.Manager, on its
// volume), and every replica's must answer from every replica's ingests.
// So with many writers a shard holds what the document records say, and
// follows them (converge.go):
//
//   - every write that changes what the shards must hold of a document —
//     MarkIndexed (new content), CompleteExtraction (a new base chunk),
//     MarkDeleting — carries a chunk change (EventChunksChanged) in the
//     document's outbox, in the same single-document write, so a crash
//     between the write and its publication loses nothing: a relay of any
//     replica publishes it to AM_EVENTS (Nats-Msg-Id = the entry's id);
//     a record is removed only once its outbox is published
//     (mongostore.FlushDocument);
//   - applying a change (HandleChunkChange, converge) does not replay the
//     event's content: under the document's lock it reads the record's
//     state by _id (content hash, chunk count, flags, and the extraction
//     whose digest the base chunk carries: document.IndexState) and makes
//     the shard hold that — the chunk set, read by _id from the store;
//     nothing once the record is gone or being deleted; what it held
//     while an ingest is under way (its end carries a change). So a change
//     delivered twice, or replayed, or an earlier change arriving after a
//     later one, leaves the shard as the record says now: never an older
//     version. The shard records the state it holds (a token), so a
//     change it already holds costs one read of the record; a new base
//     chunk, one chunk read;
//   - the replica that makes a change applies it at once, from the chunks
//     it holds (no chunk read), holding the document's lock from before
//     the write until its shard has it, so its ingest's reply is followed
//     by its own searches; its follower then finds the change applied
//     (measured: one read of about 1 ms, against about 20 ms to apply
//     another replica's change). The base chunk of an extraction is
//     written just before the write that records it (writeBaseAhead), so
//     a client that sees the job ended finds the digest on that replica;
//     should the write not happen, the shard converges to the record;
//   - package follow runs each replica's reading of the changes, from the
//     position kept beside its shards, with a rebuild from the store when
//     the stream no longer holds that position (AM_EVENTS keeps seven
//     days), and the replica's "search_index" health until caught up.
//
// Other replicas' shards lag by the time it takes to relay and apply a
// change (on loopback, tens of milliseconds; see the replicas test).
//
// For a single writer (mongox.SingleWriter: agentmesh up) there is no
// other replica: the pipeline writes its shards as it goes, before the
// write that records the change, and undoes that when superseded; no
// change is written to outboxes and nothing is followed, so that mode
// costs nothing more than before. Nor can an ingest claim it did not make
// belong to a live ingest: reconciliation finishes those documents at once
// (ingestLive).
package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"google.golang.org/grpc"

	"github.com/agentmesh/agentmesh/libs/events"
	visionv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/vision/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/chunk"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	docstore "github.com/agentmesh/agentmesh/services/indexer/internal/document/mongostore"
	"github.com/agentmesh/agentmesh/services/indexer/internal/embed"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
	graphstore "github.com/agentmesh/agentmesh/services/indexer/internal/graph/mongostore"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
	"github.com/agentmesh/agentmesh/services/indexer/internal/pipeline"
)

// Source is the event source name.
const Source = "indexer"

// ExtractionQueue is the work queue of extraction jobs (am.work.<queue>).
const ExtractionQueue = "indexer.extraction"

// VisionClient is the part of the vision service intake uses;
// visionv1.VisionServiceClient implements it.
type VisionClient interface {
	AnalyzeImages(ctx context.Context, in *visionv1.AnalyzeImagesRequest, opts ...grpc.CallOption) (*visionv1.AnalyzeImagesResponse, error)
}

// Config tunes the pipeline.
type Config struct {
	// Chunk sizes the chunks.
	Chunk chunk.Options
	// ExtractorTimeout bounds one extractor on one document.
	ExtractorTimeout time.Duration
	// MaxDeliver is how often an extraction job message is delivered
	// before the job is marked failed; it must match the consumer's.
	MaxDeliver int
	// JobLeaseTTL is how long a job's claim outlives its worker's last
	// renewal (every JobLeaseTTL/3 while it runs); 0 means
	// DefaultJobLeaseTTL.
	JobLeaseTTL time.Duration
	// IngestGrace bounds an ingest's writes after its first, and is how
	// long reconciliation leaves a document of an earlier version, which
	// carries no ingest claim, to an ingest that may be under way; 0 means
	// DefaultIngestGrace.
	IngestGrace time.Duration
}

// Defaults of Config.
const (
	// DefaultJobLeaseTTL keeps a dead worker's job at most a few seconds.
	DefaultJobLeaseTTL = 6 * time.Second
	// DefaultIngestGrace leaves an ingest ample time for a few writes by
	// _id and the local indexes.
	DefaultIngestGrace = time.Minute
)

// Deps are the pipeline's collaborators.
type Deps struct {
	// Docs is the document store.
	Docs *docstore.Store
	// Graph is the graph store.
	Graph *graphstore.Store
	// Indexes holds the search shards.
	Indexes *hybrid.Manager
	// Embedder embeds chunks and queries.
	Embedder embed.Embedder
	// Extractors run in extraction jobs, in order.
	Extractors []extract.Extractor
	// Vision analyses image attachments; nil skips vision. (Events and
	// work items go through the outboxes of documents and jobs, which
	// Docs.RunOutbox publishes.)
	Vision VisionClient
	// Models makes the qualifier's model calls (content type when the
	// rules are unsure, log summaries, routing); nil makes none, and
	// rules decide.
	Models *pipeline.Models
	// Events reads intake events back for Watch; nil makes Watch fail
	// with ErrNoEventBus.
	Events *events.Bus
	// PDF reads PDF attachments (text layer, first pages for vision); nil
	// reads them with pipeline.PDF's defaults.
	PDF *pipeline.PDF
	// Instance names this process in job claims (for logs and errors);
	// empty means host name and process id.
	Instance string
	// Logger receives the pipeline's logs.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Service runs the pipeline. It is safe for concurrent use.
type Service struct {
	cfg Config
	Deps
	// local is true for a single writer: the pipeline writes the search
	// shards as it goes (see the package doc).
	local bool
	locks docLocks
	stats convergeStats
	// claimers counts this process's workers after each job's claim.
	claimers claimers
	// ingests counts this process's ingests under way, per document id,
	// from before an ingest's first write until its last (ingestLive).
	ingests claimers
	// failed holds the documents whose ingest failed after its first
	// write, or whose delete failed after the marking, for
	// FinishFailedIngests.
	failed *failedIngests
	// counters count ingests and their finishes (metrics.go).
	counters counters
	// qualifier runs the ingest's qualifier phases.
	qualifier *pipeline.Qualifier
	// afterSave, when set, runs after an ingest's first write; its error
	// ends the ingest there (tests stand for a kill with it).
	afterSave func(docID string) error
	// beforeRemove, when set, runs in a delete before the record goes;
	// its error ends the delete there (tests stand for an outage with it).
	beforeRemove func(docID string) error
}

// New checks the configuration and returns the service.
func New(cfg Config, d Deps) (*Service, error) {
	if err := cfg.Chunk.Validate(); err != nil {
		return nil, err
	}
	if d.Docs == nil || d.Graph == nil || d.Indexes == nil || d.Embedder == nil {
		return nil, errors.New("intake: missing dependency")
	}
	if d.Embedder.Dimensions() != d.Indexes.Dimensions() {
		return nil, fmt.Errorf("intake: embedder %s has %d dimensions, indexes %d", d.Embedder.Name(), d.Embedder.Dimensions(), d.Indexes.Dimensions())
	}
	seen := map[string]bool{}
	for _, e := range d.Extractors {
		if seen[e.Name()] {
			return nil, fmt.Errorf("intake: two extractors named %q", e.Name())
		}
		seen[e.Name()] = true
	}
	if cfg.ExtractorTimeout <= 0 {
		cfg.ExtractorTimeout = 2 * time.Minute
	}
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = events.DefaultMaxDeliver
	}
	if cfg.JobLeaseTTL <= 0 {
		cfg.JobLeaseTTL = DefaultJobLeaseTTL
	}
	if cfg.IngestGrace <= 0 {
		cfg.IngestGrace = DefaultIngestGrace
	}
	if d.Instance == "" {
		host, _ := os.Hostname()
		d.Instance = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	q := &pipeline.Qualifier{Models: d.Models, PDF: d.PDF, Now: d.Now}
	if d.Vision != nil {
		q.Vision = d.Vision
	}
	return &Service{cfg: cfg, Deps: d, local: d.Docs.SingleWriter(), qualifier: q, failed: newFailedIngests(), counters: newCounters()}, nil
}

// ExtractorTimeout returns the per-extractor bound.
func (s *Service) ExtractorTimeout() time.Duration { return s.cfg.ExtractorTimeout }

func (s *Service) now() time.Time { return s.Now().UTC().Truncate(time.Millisecond) }

func hscope(sc document.Scope) hybrid.Scope {
	return hybrid.Scope{Tenant: sc.Tenant, Project: sc.Project}
}
