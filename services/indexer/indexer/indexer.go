// Package indexer is the indexer: document intake, ingestion-time extracts, hybrid search and the knowledge graph.
//
// Run starts it; the service binary and `agentmesh up` both call Run.
package indexer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/libs/events"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	visionv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/vision/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/services/indexer/internal/chunk"
	docstore "github.com/agentmesh/agentmesh/services/indexer/internal/document/mongostore"
	"github.com/agentmesh/agentmesh/services/indexer/internal/embed"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
	"github.com/agentmesh/agentmesh/services/indexer/internal/follow"
	graphstore "github.com/agentmesh/agentmesh/services/indexer/internal/graph/mongostore"
	"github.com/agentmesh/agentmesh/services/indexer/internal/grpcapi"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intake"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intakequeue"
	"github.com/agentmesh/agentmesh/services/indexer/internal/pipeline"
	"github.com/agentmesh/agentmesh/services/indexer/internal/vector"
)

// Name is the service name used in logs, metrics and health.
const Name = "indexer"

// Embedder choices for INDEXER_EMBEDDER.
const (
	// EmbedderLocal is the built-in local-hash-384 embedder (no model).
	EmbedderLocal = "local"
	// EmbedderModelGateway embeds through ModelService.Embed.
	EmbedderModelGateway = "modelgateway"
)

// Config is the service's configuration, read from the environment.
type Config struct {
	service.Common `env:""`
	// Mongo is the document store.
	Mongo mongox.Config `env:""`
	// NATSURL is the NATS server with JetStream.
	NATSURL string `env:"NATS_URL" required:"true" help:"NATS server URL (JetStream enabled)"`
	// NATSStreamReplicas is how many copies of each JetStream stream the
	// service asks for (never fewer than the stream has).
	NATSStreamReplicas int `env:"NATS_STREAM_REPLICAS" default:"1" help:"copies of each JetStream stream (3 on a three-node NATS cluster); a stream is never scaled down"`
	// ModelGatewayAddr is the model gateway gRPC address.
	ModelGatewayAddr string `env:"MODELGATEWAY_ADDR" default:"localhost:9091" help:"model gateway gRPC address"`
	// VisionAddr is the vision gRPC address.
	VisionAddr string `env:"VISION_ADDR" default:"localhost:9093" help:"vision gRPC address"`

	// DataDir holds the on-disk search indexes (rebuildable from Mongo).
	DataDir string `env:"INDEXER_DATA_DIR" default:".agentmesh/indexer" help:"directory of the indexer's BM25 and vector indexes (rebuildable from MongoDB)"`
	// ChunkSize is the most characters per chunk.
	ChunkSize int `env:"INDEXER_CHUNK_SIZE" default:"1000" help:"most characters per chunk (cut at paragraph, then sentence boundaries)"`
	// ChunkOverlap is the most characters a chunk repeats from the previous one.
	ChunkOverlap int `env:"INDEXER_CHUNK_OVERLAP" default:"150" help:"most characters a chunk repeats from the previous one, in whole sentences"`
	// Embedder chooses the embedder.
	Embedder string `env:"INDEXER_EMBEDDER" default:"local" help:"embedder: 'local' (built-in local-hash-384: hashed words and character n-grams, no model) or 'modelgateway' (ModelService.Embed)"`
	// EmbedModel is the logical embedding model for the model gateway embedder.
	EmbedModel string `env:"INDEXER_EMBED_MODEL" default:"embed" help:"logical model name for INDEXER_EMBEDDER=modelgateway"`
	// EmbedDimensions is the vector length asked of the model gateway.
	EmbedDimensions int `env:"INDEXER_EMBED_DIMENSIONS" default:"384" help:"vector dimensions for INDEXER_EMBEDDER=modelgateway (changing it rebuilds the indexes)"`
	// EmbedBatch is how many texts go in one Embed call.
	EmbedBatch int `env:"INDEXER_EMBED_BATCH" default:"64" help:"texts per ModelService.Embed call"`
	// LLMExtraction turns the LLM prose extractor on.
	LLMExtraction bool `env:"INDEXER_LLM_EXTRACTION" default:"true" help:"run the LLM prose extractor (ModelService.Chat with a JSON schema) at ingestion"`
	// ExtractModel is the logical chat model of the LLM extractor.
	ExtractModel string `env:"INDEXER_EXTRACT_MODEL" default:"chat" help:"logical model name of the LLM prose extractor"`
	// ExtractMaxChars caps the text sent to the LLM extractor.
	ExtractMaxChars int `env:"INDEXER_EXTRACT_MAX_CHARS" default:"12000" help:"most characters of a document sent to the LLM extractor"`
	// QualifierModelCalls lets the qualifier ask the model gateway.
	QualifierModelCalls bool `env:"INDEXER_QUALIFIER_MODEL_CALLS" default:"true" help:"let the intake qualifier ask the model gateway: content type when the rules are unsure, a log's summary, DONE/LIFT_UP routing (the route_task tool); off, rules decide"`
	// QualifierModel is the logical chat model of the qualifier.
	QualifierModel string `env:"INDEXER_QUALIFIER_MODEL" default:"chat" help:"logical model name of the intake qualifier's calls"`
	// QualifierTimeout bounds one model call of the qualifier.
	QualifierTimeout time.Duration `env:"INDEXER_QUALIFIER_TIMEOUT" default:"30s" help:"time limit of one qualifier model call; past it the phase records the error and falls back (GENERIC, the rules' log summary, DONE)"`
	// PDFPages is how many first pages of a PDF attachment go to vision.
	PDFPages int `env:"INDEXER_PDF_PAGES" default:"3" help:"first pages of a PDF attachment rendered to PNG (poppler-utils pdftoppm) and sent through vision; its whole text layer (pdftotext) joins the document's text"`
	// PDFTimeout bounds one poppler-utils run on one PDF.
	PDFTimeout time.Duration `env:"INDEXER_PDF_TIMEOUT" default:"30s" help:"time limit of one pdftotext or pdftoppm run on one PDF attachment; past it the PDF is kept and listed with the error recorded. The PDFs of an intake also share two thirds of the time its call has left (the gRPC deadline, 60s by default), so a few PDFs that each take this long cannot fail the intake: those past it are kept and listed, unread"`
	// ExtractorTimeout bounds one extractor on one document.
	ExtractorTimeout time.Duration `env:"INDEXER_EXTRACTOR_TIMEOUT" default:"2m" help:"time limit of one extractor on one document"`
	// ExtractionWorkers is how many extraction jobs run at once.
	ExtractionWorkers int `env:"INDEXER_EXTRACTION_WORKERS" default:"2" help:"extraction jobs run concurrently by this instance"`
	// IntakeQueueWorkers is how many intakes from the work queue run at once.
	IntakeQueueWorkers int `env:"INDEXER_INTAKE_QUEUE_WORKERS" default:"2" help:"intakes from other systems (work queue am.work.indexer.intake, see the README) ingested concurrently by this instance"`
	// JobLeaseTTL is how long an extraction job's claim outlives the last
	// renewal of the worker running it.
	JobLeaseTTL time.Duration `env:"INDEXER_JOB_LEASE_TTL" default:"6s" help:"claim of the worker running an extraction job, and of an ingest on its document until it is indexed, renewed every third of it, and the extraction queue's ack wait: a job whose worker died is delivered again and taken over about this long after its last renewal, and a second delivery never runs it meanwhile; an ingest that died is finished once its claim has lapsed: with replicas by any of them (each looks every third of it), alone by the next start; one that failed by its own process"`
	// HNSWM, HNSWEfConstruction and HNSWEfSearch tune the vector index.
	HNSWM              int `env:"INDEXER_HNSW_M" default:"16" help:"HNSW links per node (level 0 keeps twice as many)"`
	HNSWEfConstruction int `env:"INDEXER_HNSW_EF_CONSTRUCTION" default:"160" help:"HNSW candidate list size while inserting"`
	HNSWEfSearch       int `env:"INDEXER_HNSW_EF_SEARCH" default:"400" help:"HNSW candidate list size while searching"`
	// RRFVectorWeight weighs the vector ranking in hybrid fusion.
	RRFVectorWeight float64 `env:"INDEXER_RRF_VECTOR_WEIGHT" default:"1" help:"weight of the vector ranking in reciprocal rank fusion (BM25's is 1); lower it for a weak embedder"`
	// MaxContentBytes caps an ingested document.
	MaxContentBytes int `env:"INDEXER_MAX_CONTENT_BYTES" default:"8388608" help:"largest raw_content accepted, in bytes"`
	// ReconcileOnStart repairs interrupted work and stale indexes at start.
	ReconcileOnStart bool `env:"INDEXER_RECONCILE_ON_START" default:"true" help:"at start, finish interrupted ingests and deletes, re-queue lost jobs, re-extract after extractor schema upgrades, rebuild indexes that disagree with MongoDB"`
}

// validate checks what the tags cannot.
func (c *Config) validate() error {
	var errs []error
	if err := (chunk.Options{Size: c.ChunkSize, Overlap: c.ChunkOverlap}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("INDEXER_CHUNK_SIZE/INDEXER_CHUNK_OVERLAP: %w", err))
	}
	if c.Embedder != EmbedderLocal && c.Embedder != EmbedderModelGateway {
		errs = append(errs, fmt.Errorf("INDEXER_EMBEDDER=%q: want %q or %q", c.Embedder, EmbedderLocal, EmbedderModelGateway))
	}
	if c.Embedder == EmbedderModelGateway && c.EmbedDimensions <= 0 {
		errs = append(errs, errors.New("INDEXER_EMBED_DIMENSIONS must be positive"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("INDEXER_DATA_DIR must not be empty"))
	}
	if c.RRFVectorWeight <= 0 {
		errs = append(errs, errors.New("INDEXER_RRF_VECTOR_WEIGHT must be positive"))
	}
	if c.ExtractionWorkers <= 0 {
		errs = append(errs, errors.New("INDEXER_EXTRACTION_WORKERS must be positive"))
	}
	if c.IntakeQueueWorkers <= 0 {
		errs = append(errs, errors.New("INDEXER_INTAKE_QUEUE_WORKERS must be positive"))
	}
	if c.QualifierModelCalls && (c.QualifierModel == "" || c.QualifierTimeout <= 0) {
		errs = append(errs, errors.New("INDEXER_QUALIFIER_MODEL must be set and INDEXER_QUALIFIER_TIMEOUT positive when INDEXER_QUALIFIER_MODEL_CALLS is on"))
	}
	if c.PDFPages <= 0 || c.PDFTimeout <= 0 {
		errs = append(errs, errors.New("INDEXER_PDF_PAGES and INDEXER_PDF_TIMEOUT must be positive"))
	}
	if c.JobLeaseTTL < time.Second {
		errs = append(errs, fmt.Errorf("INDEXER_JOB_LEASE_TTL=%s: must be at least 1s", c.JobLeaseTTL))
	}
	return errors.Join(errs...)
}

// Run serves the service on rt.Listener until ctx is done, then shuts down
// gracefully: stop serving, let running extraction jobs finish, flush the
// outboxes, snapshot the indexes, drain NATS, disconnect MongoDB.
func Run(ctx context.Context, cfg *Config, rt service.Runtime) error {
	serving := false
	defer func() {
		if !serving && rt.Listener != nil {
			_ = rt.Listener.Close() // Run owns the listener, even when it fails to start
		}
	}()
	if err := cfg.validate(); err != nil {
		return err
	}
	log := rt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := grpcx.NewServer(rt.Server, log)
	db, closeMongo, err := service.ConnectMongo(ctx, cfg.Mongo, srv.Health())
	if err != nil {
		return err
	}
	defer closeMongo()
	bus, err := service.ConnectNATS(ctx, cfg.NATSURL, "indexer", cfg.NATSStreamReplicas, log, srv.Health())
	if err != nil {
		return err
	}
	defer bus.Close()
	modelGateway, err := service.DialPeer(cfg.ModelGatewayAddr)
	if err != nil {
		return err
	}
	defer modelGateway.Close()
	vision, err := service.DialPeer(cfg.VisionAddr)
	if err != nil {
		return err
	}
	defer vision.Close()

	docs := docstore.New(db)
	if err := docs.EnsureIndexes(ctx); err != nil {
		return err
	}
	graphs := graphstore.New(db)
	if err := graphs.EnsureIndexes(ctx); err != nil {
		return err
	}
	models := modelv1.NewModelServiceClient(modelGateway)
	var emb embed.Embedder = embed.LocalHash{}
	if cfg.Embedder == EmbedderModelGateway {
		if emb, err = embed.NewModelGateway(models, cfg.EmbedModel, cfg.EmbedDimensions, cfg.EmbedBatch); err != nil {
			return err
		}
	}
	indexes, err := hybrid.NewManager(hybrid.ManagerOptions{
		Dir: cfg.DataDir, Embedder: emb.Name(), Dimensions: emb.Dimensions(), Logger: log,
		Vector:       vector.Params{M: cfg.HNSWM, EfConstruction: cfg.HNSWEfConstruction, EfSearch: cfg.HNSWEfSearch},
		VectorWeight: cfg.RRFVectorWeight,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := indexes.Close(); err != nil {
			log.Error("closing the search indexes", slog.Any("error", err))
		}
	}()
	extractors := []extract.Extractor{extract.Financial{}, extract.MeetingNotes{}, extract.APIDoc{}}
	if cfg.LLMExtraction {
		prose, err := extract.NewProse(models, cfg.ExtractModel, cfg.ExtractMaxChars)
		if err != nil {
			return err
		}
		extractors = append(extractors, prose)
	}

	var qualifierModels *pipeline.Models
	if cfg.QualifierModelCalls {
		qualifierModels = &pipeline.Models{Client: models, Model: cfg.QualifierModel, Timeout: cfg.QualifierTimeout, MaxChars: cfg.ExtractMaxChars}
	}

	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() {
		stopBG()
		wg.Wait()
		// Publish what the last jobs wrote before NATS is drained.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := docs.FlushOutbox(sctx, bus); err != nil {
			log.Warn("outbox not flushed at shutdown; it is published at the next start", slog.Any("error", err))
		}
	}()
	wg.Go(func() { docs.RunOutbox(bg, bus, log) })

	pdf := &pipeline.PDF{Pages: cfg.PDFPages, Timeout: cfg.PDFTimeout}
	svc, err := intake.New(intake.Config{
		Chunk:            chunk.Options{Size: cfg.ChunkSize, Overlap: cfg.ChunkOverlap},
		ExtractorTimeout: cfg.ExtractorTimeout,
		MaxDeliver:       events.DefaultMaxDeliver,
		JobLeaseTTL:      cfg.JobLeaseTTL,
	}, intake.Deps{
		Docs: docs, Graph: graphs, Indexes: indexes, Embedder: emb, Extractors: extractors,
		Vision: visionv1.NewVisionServiceClient(vision), Models: qualifierModels, Logger: log, Events: bus,
		PDF: pdf,
	})
	if err != nil {
		return err
	}
	wg.Go(func() { svc.FinishFailedIngests(bg) })
	wg.Go(func() { svc.FinishDeadIngests(bg) }) // with many writers: another replica's
	consumer, err := bus.Consume(bg, ExtractionConsumer(cfg.ExtractionWorkers, cfg.JobLeaseTTL), svc.HandleJob)
	if err != nil {
		return err
	}
	defer consumer.Stop()
	// With replicas, this replica's search shards follow every replica's
	// chunk changes; until they hold what the stream held at the start,
	// the replica is not ready. A single writer's pipeline writes its
	// shards itself, and nobody else writes: nothing to follow.
	var caughtUp <-chan struct{}
	if docs.SingleWriter() {
		done := make(chan struct{})
		close(done)
		caughtUp = done
	} else {
		follower, err := newFollower(cfg, bus, svc, srv.Health(), log)
		if err != nil {
			return err
		}
		caughtUp = follower.CaughtUp()
		wg.Go(func() { _ = follower.Run(bg) })
	}

	documents := grpcapi.NewDocuments(svc, grpcapi.Limits{MaxContentBytes: cfg.MaxContentBytes})
	intakes, err := bus.Consume(bg, intakequeue.Spec(cfg.IntakeQueueWorkers), intakequeue.New(documents, log).Handle)
	if err != nil {
		return err
	}
	defer intakes.Stop()
	indexerv1.RegisterDocumentServiceServer(srv.GRPC(), documents)
	indexerv1.RegisterSearchServiceServer(srv.GRPC(), grpcapi.NewSearch(svc))
	indexerv1.RegisterGraphServiceServer(srv.GRPC(), grpcapi.NewGraph(graphs))
	log.Info("indexer ready", slog.String("embedder", emb.Name()), slog.String("data_dir", cfg.DataDir), slog.Int("extractors", len(extractors)))
	if text, render, err := pdf.Tools(); err != nil {
		log.Warn("PDF attachments are kept and listed, unread and unrendered: install poppler-utils", slog.Any("error", err))
	} else {
		log.Info("PDF attachments: text layer and first pages read with poppler-utils", slog.String("pdftotext", text), slog.String("pdftoppm", render), slog.Int("pages", cfg.PDFPages))
	}
	if cfg.ReconcileOnStart {
		wg.Go(func() {
			// After the catch-up, whose rebuild (if any) makes the
			// shards agree with the store.
			select {
			case <-caughtUp:
			case <-bg.Done():
				return
			}
			if err := svc.Reconcile(bg); err != nil && bg.Err() == nil {
				log.Warn("start-up reconciliation incomplete", slog.Any("error", err))
			}
		})
	}
	if rt.Ready != nil {
		rt.Ready()
	}
	serving = true
	err = srv.Serve(ctx, rt.Listener)
	// Shutdown: the deferred calls run in reverse: consumer stops (running
	// jobs finish), background work stops, indexes are snapshotted, peers
	// closed, NATS drained, MongoDB disconnected.
	return err
}

// SearchIndexDependency is the health dependency a replica's search
// shards are: NOT_SERVING until they have caught up with every replica's
// chunk changes (and while they are rebuilt), SERVING after.
const SearchIndexDependency = "search_index"

// FollowPositionFile is the file, in INDEXER_DATA_DIR, that records how far
// the search shards have followed the chunk changes.
const FollowPositionFile = "follow-position.json"

// newFollower returns the follower of every replica's chunk changes for
// this replica's search shards (see package follow and intake's package
// doc). It is named after the host, which is the pod's name on
// Kubernetes.
func newFollower(cfg *Config, bus *events.Bus, svc *intake.Service, health *grpcx.Health, log *slog.Logger) (*follow.Follower, error) {
	host, _ := os.Hostname()
	return follow.New(bus, follow.Config{
		Stream: events.StreamEvents, Subject: intake.ChunksChangedFilter,
		Position: filepath.Join(cfg.DataDir, FollowPositionFile), Name: host,
		Apply: svc.HandleChunkChange,
		Rebuild: func(ctx context.Context) error {
			_, err := svc.Rebuild(ctx, nil)
			return err
		},
		Health: func(err error) { health.Set(SearchIndexDependency, err) },
		Logger: log,
	})
}

// ExtractionConsumer is the durable consumer of the extraction work queue.
// Its ack wait is the job claim's TTL, however long the extractors may
// take: the consumer extends it while a job runs, and a worker takes a
// message only when it is free to run it, so the ack wait only says how
// soon the job of a worker that died is delivered again. That delivery
// then waits for the dead worker's claim to lapse (one TTL after its last
// renewal at most) and runs the job: a job interrupted by a crash resumes
// within seconds, not after an extractor timeout.
func ExtractionConsumer(workers int, jobLeaseTTL time.Duration) events.ConsumerSpec {
	return events.ConsumerSpec{
		Stream:        events.StreamWork,
		Durable:       "indexer-extraction",
		FilterSubject: events.WorkSubject(intake.ExtractionQueue),
		Concurrency:   workers,
		AckWait:       jobLeaseTTL,
		MaxDeliver:    events.DefaultMaxDeliver,
	}
}
