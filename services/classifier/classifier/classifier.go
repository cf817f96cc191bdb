// Package classifier is the classifier: RESOLVED/UNRESOLVED classification runs with human approvals and checkpoints.
//
// Run starts it; the service binary and `agentmesh up` both call Run.
package classifier

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint"
	"github.com/agentmesh/agentmesh/services/classifier/internal/conversations"
	"github.com/agentmesh/agentmesh/services/classifier/internal/grpcapi"
	"github.com/agentmesh/agentmesh/services/classifier/internal/labels"
	"github.com/agentmesh/agentmesh/services/classifier/internal/modelcalls"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runner"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// Name is the service name used in logs, metrics and health.
const Name = "classifier"

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
	// Runs configures classification runs.
	Runs RunsConfig `env:"CLASSIFIER_"`
}

// RunsConfig configures classification runs: limits, sizes, models, leases
// and the sample data set.
type RunsConfig struct {
	// MaxModelCalls bounds the model calls of one run.
	MaxModelCalls int `env:"MAX_MODEL_CALLS" default:"20" help:"model calls one run may make; exceeding it stops the run"`
	// MaxPlans bounds the plans of one run.
	MaxPlans int `env:"MAX_PLANS" default:"5" help:"plans one run may make (refused and rejected ones included); exceeding it stops the run"`
	// MaxBatch bounds the conversations of one fetch.
	MaxBatch int `env:"MAX_BATCH" default:"10" help:"most conversations one fetch returns for approval"`
	// BatchSize is the conversations per classification call.
	BatchSize int `env:"BATCH_SIZE" default:"5" help:"conversations classified per model call (at most CLASSIFIER_MAX_BATCH)"`
	// ChunkSize is the size of streamed text deltas.
	ChunkSize int `env:"CHUNK_SIZE" default:"500" help:"bytes per agent.run.*.delta event of plan and summary texts"`
	// Model is the logical model for plans and classifications.
	Model string `env:"MODEL" default:"classifier" help:"logical model (model gateway) for plans and classifications"`
	// SummaryModel is the logical model for run summaries.
	SummaryModel string `env:"SUMMARY_MODEL" default:"chat" help:"logical model (model gateway) for run summaries"`
	// ModelTimeout bounds one model call.
	ModelTimeout time.Duration `env:"MODEL_TIMEOUT" default:"2m" help:"timeout of one model call; a call that times out fails the run"`
	// LeaseTTL is how long a run stays claimed by an executor that stops
	// renewing (a crashed process). Executors renew every third of it while
	// they work, whatever a step (a model call) takes; a run whose lease
	// lapsed mid-step is then taken over (Runner.KeepRecovering).
	LeaseTTL time.Duration `env:"LEASE_TTL" default:"6s" help:"lease of the executor driving a run, renewed every third of it while it works: a crashed executor's runs are free again at most this long after its last renewal, and are then driven on by a replica within a third of this (by a sole writer at its start, at once); a resume of a run another executor holds follows that executor's events"`
	// SampleData loads the embedded sample conversations at start.
	SampleData bool `env:"SAMPLE_DATA" default:"false" help:"load 40 sample conversations into the sample scope at start if it has none"`
	// SampleTenant is the tenant the sample is loaded into.
	SampleTenant string `env:"SAMPLE_TENANT" default:"default" help:"tenant that receives the sample conversations"`
	// SampleProject is the project the sample is loaded into.
	SampleProject string `env:"SAMPLE_PROJECT" default:"" help:"project that receives the sample conversations (empty: the tenant's default)"`
}

// machine validates the run limits, naming the variables.
func (c RunsConfig) machine() (statemachine.Machine, error) {
	mc := statemachine.Config{
		MaxModelCalls: c.MaxModelCalls, MaxPlans: c.MaxPlans, MaxBatch: c.MaxBatch,
		BatchSize: c.BatchSize, ChunkSize: c.ChunkSize,
	}
	switch {
	case c.MaxModelCalls < 1:
		return statemachine.Machine{}, fmt.Errorf("CLASSIFIER_MAX_MODEL_CALLS=%d: must be at least 1", c.MaxModelCalls)
	case c.MaxPlans < 1:
		return statemachine.Machine{}, fmt.Errorf("CLASSIFIER_MAX_PLANS=%d: must be at least 1", c.MaxPlans)
	case c.MaxBatch < 1:
		return statemachine.Machine{}, fmt.Errorf("CLASSIFIER_MAX_BATCH=%d: must be at least 1", c.MaxBatch)
	case c.BatchSize < 1 || c.BatchSize > c.MaxBatch:
		return statemachine.Machine{}, fmt.Errorf("CLASSIFIER_BATCH_SIZE=%d: must be between 1 and CLASSIFIER_MAX_BATCH (%d)", c.BatchSize, c.MaxBatch)
	case c.ChunkSize < 1:
		return statemachine.Machine{}, fmt.Errorf("CLASSIFIER_CHUNK_SIZE=%d: must be at least 1", c.ChunkSize)
	case c.Model == "" || c.SummaryModel == "":
		return statemachine.Machine{}, fmt.Errorf("CLASSIFIER_MODEL and CLASSIFIER_SUMMARY_MODEL must not be empty")
	case c.LeaseTTL < time.Second:
		return statemachine.Machine{}, fmt.Errorf("CLASSIFIER_LEASE_TTL=%s: must be at least 1s", c.LeaseTTL)
	}
	return statemachine.New(mc)
}

// Run serves the service on rt.Listener until ctx is done, then shuts down
// gracefully.
func Run(ctx context.Context, cfg *Config, rt service.Runtime) error {
	return run(ctx, cfg, rt, nil)
}

// run is Run with a hook called after every checkpoint (tests crash the
// process there).
func run(ctx context.Context, cfg *Config, rt service.Runtime, afterCommit runner.Hook) error {
	log := rt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	machine, err := cfg.Runs.machine()
	if err != nil {
		return err
	}
	srv := grpcx.NewServer(rt.Server, log)
	db, closeMongo, err := service.ConnectMongo(ctx, cfg.Mongo, srv.Health())
	if err != nil {
		return err
	}
	defer closeMongo()
	bus, err := service.ConnectNATS(ctx, cfg.NATSURL, Name, cfg.NATSStreamReplicas, log, srv.Health())
	if err != nil {
		return err
	}
	defer bus.Close()
	modelGateway, err := service.DialPeer(cfg.ModelGatewayAddr)
	if err != nil {
		return err
	}
	defer modelGateway.Close()

	convs := conversations.NewStore(db)
	checkpoints := checkpoint.NewStore(db)
	saved := labels.NewStore(db)
	for _, ensure := range []func(context.Context) error{convs.Prepare, checkpoints.EnsureIndexes, saved.EnsureIndexes} {
		if err := ensure(ctx); err != nil {
			return err
		}
	}
	if cfg.Runs.SampleData {
		scope := &commonv1.Scope{TenantId: cfg.Runs.SampleTenant, ProjectId: cfg.Runs.SampleProject}
		n, err := convs.LoadSample(ctx, scope)
		if err != nil {
			return fmt.Errorf("classifier: load sample conversations: %w", err)
		}
		if n > 0 {
			log.Info("loaded sample conversations", "count", n, "tenant", scope.GetTenantId(), "project", scope.GetProjectId())
		}
	}

	// The relay publishes run events from the checkpoints' outboxes and
	// archives finished runs; it starts by publishing whatever a previous
	// process left behind.
	relay := checkpoints.NewRelay(bus, log)
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		_ = relay.Run(ctx)
	}()
	archiverDone := make(chan struct{})
	go func() {
		defer close(archiverDone)
		checkpoints.KeepArchiving(ctx, log)
	}()

	runs := runner.New(ctx, runner.Deps{
		Machine:       machine,
		Checkpoints:   checkpoints,
		Conversations: convs,
		Labels:        saved,
		Model:         modelcalls.New(modelv1.NewModelServiceClient(modelGateway), cfg.Runs.Model, cfg.Runs.SummaryModel, cfg.Runs.ModelTimeout),
		Logger:        log,
	}, runner.Config{LeaseTTL: cfg.Runs.LeaseTTL, AfterCommit: afterCommit, SoleWriter: mongox.SingleWriter(db)})

	// Runs left mid-step by a process that died or stopped are driven
	// again without waiting for a client: at once at start by a sole
	// writer, and by any replica once their leases lapse.
	recoverDone := make(chan struct{})
	go func() {
		defer close(recoverDone)
		runs.KeepRecovering(ctx)
	}()

	classifierv1.RegisterClassifierServiceServer(srv.GRPC(), grpcapi.New(grpcapi.Deps{
		Runner: runs, Checkpoints: checkpoints, Conversations: convs, Bus: bus, Logger: log,
	}))
	if rt.Ready != nil {
		rt.Ready()
	}
	serveErr := srv.Serve(ctx, rt.Listener)

	// Executors stop with ctx and release their leases; then the events of
	// their last writes are published before the bus drains.
	<-recoverDone
	runs.Wait()
	<-relayDone
	<-archiverDone
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := relay.Sweep(sctx); err != nil {
		log.Warn("final outbox sweep incomplete; the next start publishes the rest", "error", err)
	}
	return serveErr
}
