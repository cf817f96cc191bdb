// Package up runs the whole mesh in one process: embedded NATS JetStream and
// FerretDB (unless NATS_URL / MONGO_URI point elsewhere), every service on a
// loopback port, and the gateway on :8080. Data lives under one directory,
// so a restart finds the same streams and documents.
package up

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	"github.com/agentmesh/agentmesh/libs/config"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/telemetry"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/classifier"
	"github.com/agentmesh/agentmesh/services/indexer/indexer"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgateway"
	"github.com/agentmesh/agentmesh/services/orchestrator/orchestrator"
	"github.com/agentmesh/agentmesh/services/sqlagent/sqlagent"
	"github.com/agentmesh/agentmesh/services/vision/vision"
)

// Config is what `agentmesh up` reads from the environment; each service
// reads its own variables too (see README), with the addresses below
// filled in by up.
type Config struct {
	// DataDir holds the embedded databases.
	DataDir string `env:"AGENTMESH_DATA_DIR" default:".agentmesh" help:"directory for embedded NATS and FerretDB data (agentmesh up)"`
	// SyncEveryCommit makes the embedded database flush every commit to disk.
	SyncEveryCommit bool `env:"AGENTMESH_SYNC_EVERY_COMMIT" default:"false" help:"flush every commit of the embedded FerretDB to disk (SQLite synchronous=FULL); by default commits survive a killed process and only an OS crash or power loss can lose the last ones, at twice the write rate (agentmesh up)"`
	// Host is the interface services listen on.
	Host string `env:"AGENTMESH_HOST" default:"127.0.0.1" help:"interface the in-process services listen on (agentmesh up)"`
	// GRPCBasePort is the first of six consecutive gRPC ports.
	GRPCBasePort int `env:"AGENTMESH_GRPC_BASE_PORT" default:"9091" help:"first of six consecutive service gRPC ports: modelgateway, orchestrator, vision, indexer, classifier, sqlagent; 0 = random ports (agentmesh up)"`
	// HTTPAddr is the gateway address: loopback unless set, like the
	// services' (AGENTMESH_HOST), since without GATEWAY_API_KEYS the gateway
	// runs open and would serve anyone on the network.
	HTTPAddr string `env:"HTTP_ADDR" default:"127.0.0.1:8080" help:"gateway HTTP listen address (agentmesh up: loopback only by default; :8080 serves other machines too, set GATEWAY_API_KEYS then)"`
	// MongoURI points at an external MongoDB; empty starts embedded FerretDB.
	MongoURI string `env:"MONGO_URI" secret:"true" help:"MongoDB connection string; empty = embedded FerretDB under AGENTMESH_DATA_DIR (agentmesh up)"`
	// NATSURL points at an external NATS; empty starts embedded NATS.
	NATSURL string `env:"NATS_URL" help:"NATS URL; empty = embedded NATS JetStream under AGENTMESH_DATA_DIR (agentmesh up)"`
	// Log configures logging.
	Log telemetry.LogConfig `env:""`
	// Telemetry configures tracing and metrics export.
	Telemetry telemetry.Config `env:""`
}

// component is one in-process service: its name and how to start it.
type component struct {
	name string
	port int
	run  func(ctx context.Context, rt service.Runtime) error
}

// prepare loads cfg from lookup and returns a func that runs the service
// with its own gRPC server settings, so every configuration error is
// reported before anything starts.
func prepare[C service.HasCommon](cfg C, lookup config.Lookup, run func(context.Context, C, service.Runtime) error) (func(context.Context, service.Runtime) error, error) {
	if err := config.Load("", cfg, lookup); err != nil {
		return nil, err
	}
	return func(ctx context.Context, rt service.Runtime) error {
		rt.Server = cfg.CommonConfig().Server
		return run(ctx, cfg, rt)
	}, nil
}

// The collector settings of the process that hosts the whole mesh (see
// service.TuneGC), unless GOGC is set: every service's per-request garbage
// shares one heap, whose live part (FerretDB, NATS, the indexes, the
// stores' caches) is tens of MB, so at Go's default the collector ran
// every few hundred milliseconds under load, a tenth of the process's CPU
// in the growth bench. With a 256 MiB floor its analyses and
// classification runs went 12–30% faster, on less CPU, for ~190 MB more
// peak RSS (166 → 357 MB); 128 MiB gained less and not in every run,
// 512 MiB no more. GOMEMLIMIT, when set, still wins.
const (
	heapFloor    = 256 << 20
	minGCPercent = 100
)

// procsPerCPU is how many Go processors the mesh's process runs per CPU.
const procsPerCPU = 2

// Run starts the mesh and blocks until ctx is done, then shuts everything
// down in reverse order: gateway, services, NATS, FerretDB. out receives the
// banner with the URLs.
func Run(ctx context.Context, env config.Lookup, out io.Writer) error {
	var cfg Config
	if err := config.Load("", &cfg, env); err != nil {
		return err
	}
	// On a terminal, text logs read better; LOG_FORMAT=json still wins.
	format := "text"
	if v, ok := env("LOG_FORMAT"); ok && v != "" {
		format = cfg.Log.Format // checked by Load
	}
	log := telemetry.NewLogger(os.Stderr, format, cfg.Log.Level, "")
	service.TuneGC(heapFloor, minGCPercent)
	// Requests wait less behind the mesh's background work (see
	// service.OversubscribeProcs); GOMAXPROCS, when set, wins.
	service.OversubscribeProcs(procsPerCPU)
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("data dir %s: %w", cfg.DataDir, err)
	}

	// Infrastructure.
	infraCtx, stopInfra := context.WithCancel(context.Background())
	defer stopInfra()
	mongoURI, natsURL := cfg.MongoURI, cfg.NATSURL
	singleWriter := "false"
	if mongoURI == "" {
		// This process is the embedded database's only client: its
		// services may take the single-writer paths (see mongox).
		singleWriter = "true"
		m, err := testkit.StartMongo(infraCtx, testkit.MongoOptions{
			Dir:             filepath.Join(cfg.DataDir, "mongo"),
			SyncEveryCommit: cfg.SyncEveryCommit,
			// FerretDB warns about every command it lacks (endSessions on each
			// disconnect): only its errors are worth a user's attention.
			Logger: telemetry.NewLogger(os.Stderr, format, "error", "ferretdb"),
		})
		if err != nil {
			return fmt.Errorf("embedded FerretDB: %w", err)
		}
		defer m.Stop()
		mongoURI = m.URI()
		// The services' stores delete and replace by _id and insert
		// straight on its SQLite file (mongox.DeleteIDs, ReplaceByID,
		// InsertEach), in the write turns of their clients.
		defer mongox.RegisterDirect(mongoURI, m)()
	}
	if natsURL == "" {
		n, err := testkit.StartNATS(testkit.NATSOptions{StoreDir: filepath.Join(cfg.DataDir, "nats"), ServerName: "agentmesh"})
		if err != nil {
			return fmt.Errorf("embedded NATS: %w", err)
		}
		defer n.Shutdown()
		natsURL = n.URL()
	}

	// One process, several services: each service's spans carry its own
	// service.name (its context says which), and the embedded database's
	// own spans none at all.
	tel, err := telemetry.SetupMesh(ctx, service.Version, cfg.Telemetry)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}()
	// Every service's metrics are on the gateway's /metrics; METRICS_ADDR,
	// when set, serves them on a port of their own as well.
	if v, ok := env("METRICS_ADDR"); ok && v != "" {
		defer service.ServeMetrics(v, tel.MetricsHandler(), log)()
	}

	// Listen first, so the addresses handed to peers are real even when the
	// ports are chosen by the kernel (AGENTMESH_GRPC_BASE_PORT=0, in tests).
	names := []string{"modelgateway", "orchestrator", "vision", "indexer", "classifier", "sqlagent"}
	addr := map[string]string{}
	listeners := map[string]net.Listener{}
	closeListeners := func() {
		for _, l := range listeners {
			l.Close()
		}
	}
	for i, n := range names {
		port := 0
		if cfg.GRPCBasePort > 0 {
			port = cfg.GRPCBasePort + i
		}
		lis, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(port)))
		if err != nil {
			closeListeners()
			return fmt.Errorf("%s: listen (set AGENTMESH_GRPC_BASE_PORT to move the service ports): %w", n, err)
		}
		listeners[n] = lis
		addr[n] = lis.Addr().String()
	}
	gwLis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		closeListeners()
		return fmt.Errorf("gateway: listen on %s (set HTTP_ADDR to move it): %w", cfg.HTTPAddr, err)
	}
	listeners["gateway"] = gwLis

	computed := config.Map(map[string]string{
		"MONGO_URI":           mongoURI,
		"MONGO_SINGLE_WRITER": singleWriter,
		"NATS_URL":            natsURL,
		"MODELGATEWAY_ADDR":   addr["modelgateway"],
		"ORCHESTRATOR_ADDR":   addr["orchestrator"],
		"VISION_ADDR":         addr["vision"],
		"INDEXER_ADDR":        addr["indexer"],
		"CLASSIFIER_ADDR":     addr["classifier"],
		"SQLAGENT_ADDR":       addr["sqlagent"],
		"HTTP_ADDR":           gwLis.Addr().String(),
	})
	// Defaults that suit one laptop, each overridable from the environment.
	laptop := config.Map(map[string]string{
		"CLASSIFIER_SAMPLE_DATA": "true",
		"INDEXER_DATA_DIR":       filepath.Join(cfg.DataDir, "indexer"),
		"SQLAGENT_SAMPLE_DB":     filepath.Join(cfg.DataDir, "sqlagent", "sample.db"),
	})
	lookup := config.Overlay(computed, env, laptop)

	var comps []component
	var errs []error
	add := func(name string, run func(context.Context, service.Runtime) error, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			return
		}
		comps = append(comps, component{name: name, run: run})
	}
	r, err := prepare(&modelgateway.Config{}, lookup, modelgateway.Run)
	add("modelgateway", r, err)
	r, err = prepare(&orchestrator.Config{}, lookup, orchestrator.Run)
	add("orchestrator", r, err)
	r, err = prepare(&vision.Config{}, lookup, vision.Run)
	add("vision", r, err)
	r, err = prepare(&indexer.Config{}, lookup, indexer.Run)
	add("indexer", r, err)
	r, err = prepare(&classifier.Config{}, lookup, classifier.Run)
	add("classifier", r, err)
	r, err = prepare(&sqlagent.Config{}, lookup, sqlagent.Run)
	add("sqlagent", r, err)
	var gwCfg httpgateway.Config
	if err := config.Load("", &gwCfg, lookup); err != nil {
		errs = append(errs, fmt.Errorf("gateway: %w", err))
	}
	if len(errs) > 0 {
		closeListeners()
		return errors.Join(errs...)
	}

	// Services, each on its own loopback port, and the gateway. The banner
	// waits until every one of them has said it serves.
	ready := make(chan string, len(comps)+1)
	svcCtx, stopServices := context.WithCancel(context.Background())
	defer stopServices()
	failed := make(chan error, len(comps)+1)
	var svcWG sync.WaitGroup
	for _, c := range comps {
		svcWG.Add(1)
		go func(c component, lis net.Listener) {
			defer svcWG.Done()
			rt := service.Runtime{Logger: log.With("service", c.name), Listener: lis, Ready: func() { ready <- c.name }}
			if err := c.run(telemetry.WithService(svcCtx, c.name), rt); err != nil {
				failed <- fmt.Errorf("%s: %w", c.name, err)
			}
		}(c, listeners[c.name])
	}

	gwCtx, stopGateway := context.WithCancel(context.Background())
	defer stopGateway()
	gwDone := make(chan struct{})
	go func() {
		defer close(gwDone)
		rt := httpgateway.Runtime{Logger: log.With("service", httpgateway.Name), Listener: gwLis, Metrics: tel.MetricsHandler(),
			Ready: func() { ready <- httpgateway.Name }}
		if err := httpgateway.Run(telemetry.WithService(gwCtx, httpgateway.Name), &gwCfg, rt); err != nil {
			failed <- fmt.Errorf("%s: %w", httpgateway.Name, err)
		}
	}()

	var runErr error
	allUp := false
	for waiting := len(comps) + 1; waiting > 0 && runErr == nil && ctx.Err() == nil; {
		select {
		case <-ready:
			waiting--
			allUp = waiting == 0
		case runErr = <-failed:
		case <-ctx.Done():
		}
	}
	if allUp {
		printBanner(out, gwLis.Addr(), addr, names, mongoURI, cfg.MongoURI == "", natsURL, cfg.NATSURL == "", cfg.DataDir, cfg.Telemetry)
		select {
		case <-ctx.Done():
		case runErr = <-failed:
		}
	}
	if runErr != nil {
		log.Error("a component failed; shutting down", "error", runErr)
	} else {
		log.Info("shutting down")
	}
	stopGateway()
	<-gwDone
	stopServices()
	svcWG.Wait()
	stopInfra()
	return runErr
}

func printBanner(out io.Writer, gw net.Addr, addr map[string]string, names []string, mongoURI string, mongoEmbedded bool, natsURL string, natsEmbedded bool, dataDir string, tel telemetry.Config) {
	port := gw.(*net.TCPAddr).Port
	fmt.Fprintf(out, "\nagentmesh is up\n\n")
	fmt.Fprintf(out, "  gateway       http://localhost:%d   (console: /console/, health: /healthz, API: /openapi.json, metrics of every service: /metrics)\n", port)
	for _, n := range names {
		fmt.Fprintf(out, "  %-13s grpc://%s\n", n, addr[n])
	}
	if mongoEmbedded {
		fmt.Fprintf(out, "  mongo         %s (embedded FerretDB, data in %s)\n", mongoURI, filepath.Join(dataDir, "mongo"))
	} else {
		fmt.Fprintf(out, "  mongo         external (MONGO_URI)\n")
	}
	if natsEmbedded {
		fmt.Fprintf(out, "  nats          %s (embedded JetStream, data in %s)\n", natsURL, filepath.Join(dataDir, "nats"))
	} else {
		fmt.Fprintf(out, "  nats          %s\n", natsURL)
	}
	if tel.Endpoint != "" {
		fmt.Fprintf(out, "  traces        OTLP %s to %s, service.name per service\n", tel.Protocol, tel.Endpoint)
	}
	fmt.Fprintf(out, "\n  try: curl localhost:%d/healthz\n       grpcurl -plaintext %s list\n\nCtrl-C stops the mesh.\n\n", port, addr["modelgateway"])
}
