// Package service is the shared shape of every agentmesh service process:
// configuration from the environment, JSON logs, telemetry, a metrics
// endpoint, a gRPC listener, and a context cancelled on SIGINT/SIGTERM.
//
// Each service exposes `Run(ctx, cfg, rt Runtime) error` from its own
// package, so its binary (through Main) and `agentmesh up` (in-process,
// one Runtime per service) start exactly the same code.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentmesh/agentmesh/libs/config"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/telemetry"
)

// Version is the build version, set with -ldflags "-X .../libs/service.Version=v1.2.3".
var Version = "dev"

// Common is the configuration every service binary reads. Services embed it
// with an empty env prefix, so its variables keep their plain names.
type Common struct {
	// GRPCAddr is the gRPC listen address.
	GRPCAddr string `env:"GRPC_ADDR" default:":9090" help:"gRPC listen address"`
	// MetricsAddr serves /metrics; set to empty, it disables it (unset,
	// it is the default).
	MetricsAddr string `env:"METRICS_ADDR" default:":9464" allowempty:"true" help:"Prometheus /metrics listen address; set but empty (METRICS_ADDR=) disables it. Under agentmesh up every service's metrics are on the gateway's /metrics, and on this address too only when it is set"`
	// Server tunes the gRPC server.
	Server grpcx.ServerConfig `env:""`
	// Log configures logging.
	Log telemetry.LogConfig `env:""`
	// Telemetry configures tracing and metrics export.
	Telemetry telemetry.Config `env:""`
}

// Runtime is what a service's Run receives from whoever starts it.
type Runtime struct {
	// Logger is the service's logger.
	Logger *slog.Logger
	// Listener is where the gRPC server serves. Run closes it on return.
	Listener net.Listener
	// Server configures the gRPC server.
	Server grpcx.ServerConfig
	// Ready, if set, is called once the service is serving.
	Ready func()
}

// HasCommon is implemented by service config structs that embed Common.
type HasCommon interface {
	CommonConfig() *Common
}

// CommonConfig returns c itself, so a struct embedding Common satisfies HasCommon.
func (c *Common) CommonConfig() *Common { return c }

// Main is the whole of a service binary's main function: it loads cfg from
// the environment (exiting with a message naming every missing or invalid
// variable), sets up logging and telemetry, serves /metrics, listens on
// GRPC_ADDR and calls run until SIGINT or SIGTERM. It exits the process with
// a non-zero status on failure; it is the only caller of os.Exit.
func Main[C HasCommon](name string, cfg C, run func(ctx context.Context, cfg C, rt Runtime) error) {
	if err := config.Load("", cfg, config.Env()); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}
	common := cfg.CommonConfig()
	log := telemetry.NewLogger(os.Stderr, common.Log.Format, common.Log.Level, name)
	if err := serve(name, cfg, common, log, run); err != nil {
		log.Error("service stopped with error", "error", err)
		os.Exit(1)
	}
}

func serve[C HasCommon](name string, cfg C, common *Common, log *slog.Logger, run func(context.Context, C, Runtime) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	log.Info("starting", "version", Version, "config", config.Redacted("", cfg))
	tel, err := telemetry.Setup(ctx, name, Version, common.Telemetry)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}()

	if common.MetricsAddr != "" {
		defer ServeMetrics(common.MetricsAddr, tel.MetricsHandler(), log)()
	}

	lis, err := net.Listen("tcp", common.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen on GRPC_ADDR %s: %w", common.GRPCAddr, err)
	}
	log.Info("serving gRPC", "addr", lis.Addr().String())
	return run(ctx, cfg, Runtime{Logger: log, Listener: lis, Server: common.Server})
}

// ServeMetrics serves h at /metrics on addr until the returned func is
// called. An address it cannot listen on is logged, and the process runs
// on without metrics there.
func ServeMetrics(addr string, h http.Handler, log *slog.Logger) (stop func()) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error("metrics server failed", "error", err)
		return func() {}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	ms := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Info("serving metrics", "addr", lis.Addr().String())
	go func() {
		if err := ms.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", "error", err)
		}
	}()
	return func() { _ = ms.Close() }
}
