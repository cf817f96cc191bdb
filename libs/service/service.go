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
	// MetricsAddr serves /metrics; empty disables it.
	MetricsAddr string `env:"METRICS_ADDR" default:":9464" help:"Prometheus /metrics listen address; empty disables"`
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
		mux := http.NewServeMux()
		mux.Handle("/metrics", tel.MetricsHandler())
		ms := &http.Server{Addr: common.MetricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := ms.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server failed", "error", err)
			}
		}()
		defer ms.Close()
	}

	lis, err := net.Listen("tcp", common.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen on GRPC_ADDR %s: %w", common.GRPCAddr, err)
	}
	log.Info("serving gRPC", "addr", lis.Addr().String())
	return run(ctx, cfg, Runtime{Logger: log, Listener: lis, Server: common.Server})
}
