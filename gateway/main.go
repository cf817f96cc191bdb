// Command gateway runs the agentmesh REST/SSE gateway as its own process,
// configured by environment variables (see httpgateway.Config).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	"github.com/agentmesh/agentmesh/libs/config"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/telemetry"
)

// The REST gateway's collector settings (see service.TuneGC): its live
// heap is 4 to 7 MB under load, so at Go's default the collector ran ten
// times a second at 2,000 OpenAI API requests per second (about 50 MB/s of
// garbage), each mark phase taking one core of two from the requests in
// flight; with a 32 MB floor it runs about twice a second. Above the floor
// it collects as Go's default does (GOGC 100), not at the model gateway's
// 400: when a backlog of requests makes the live heap large, 400 let the
// heap grow to five times it and the peak RSS past 150 MB.
const (
	heapFloor    = 32 << 20
	minGCPercent = 100
)

func main() {
	service.TuneGC(heapFloor, minGCPercent)
	cfg := &httpgateway.Config{}
	if err := config.Load("", cfg, config.Env()); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", httpgateway.Name, err)
		os.Exit(2)
	}
	log := telemetry.NewLogger(os.Stderr, cfg.Log.Format, cfg.Log.Level, httpgateway.Name)
	if err := run(cfg, log); err != nil {
		log.Error("gateway stopped with error", "error", err)
		os.Exit(1)
	}
}

// run sets up telemetry, listens on HTTP_ADDR and serves until SIGINT or
// SIGTERM.
func run(cfg *httpgateway.Config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	log.Info("starting", "version", service.Version, "config", config.Redacted("", cfg))
	tel, err := telemetry.Setup(ctx, httpgateway.Name, service.Version, cfg.Telemetry)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}()

	if cfg.MetricsAddr != "" {
		defer service.ServeMetrics(cfg.MetricsAddr, tel.MetricsHandler(), log)()
	}
	lis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	return httpgateway.Run(ctx, cfg, httpgateway.Runtime{Logger: log, Listener: lis, Metrics: tel.MetricsHandler()})
}
