// Package grpcx bootstraps the gRPC servers and clients of every service:
// health (grpc.health.v1 with per-dependency status), reflection,
// OpenTelemetry stats, panic recovery into codes.Internal, default deadlines,
// one log line per failed RPC, and graceful shutdown that drains in-flight
// RPCs.
package grpcx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/agentmesh/agentmesh/libs/telemetry"
)

// ServerConfig configures a Server. Services embed it in their config struct.
type ServerConfig struct {
	// DefaultTimeout is applied to unary RPCs that arrive without a deadline.
	DefaultTimeout time.Duration `env:"RPC_DEFAULT_TIMEOUT" default:"60s" help:"deadline given to unary RPCs that arrive without one"`
	// ShutdownTimeout bounds how long graceful shutdown waits for in-flight RPCs.
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" default:"20s" help:"how long shutdown waits for in-flight RPCs to finish"`
	// MaxRecvBytes is the largest request accepted.
	MaxRecvBytes int `env:"GRPC_MAX_RECV_BYTES" default:"33554432" help:"largest gRPC request accepted, in bytes"`
}

// Server is a gRPC server with the mesh's standard interceptors and services.
// Register service implementations on GRPC() before calling Serve.
type Server struct {
	cfg    ServerConfig
	log    *slog.Logger
	grpc   *grpc.Server
	health *Health
	stats  *serviceStats
}

// WithDefaults is c with its zero fields set to the tags' defaults.
func (c ServerConfig) WithDefaults() ServerConfig {
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = 60 * time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 20 * time.Second
	}
	if c.MaxRecvBytes <= 0 {
		c.MaxRecvBytes = 32 << 20
	}
	return c
}

// NewServer builds a Server. Extra options are appended to the standard ones.
func NewServer(cfg ServerConfig, log *slog.Logger, opts ...grpc.ServerOption) *Server {
	cfg = cfg.WithDefaults()
	guard := sharedGuard()
	st := &serviceStats{Handler: otelgrpc.NewServerHandler()}
	base := []grpc.ServerOption{
		grpc.StatsHandler(st),
		grpc.ChainUnaryInterceptor(unaryInterceptors(cfg, log, guard)...),
		grpc.ChainStreamInterceptor(streamInterceptors(log, guard)...),
		grpc.MaxRecvMsgSize(cfg.MaxRecvBytes),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	s := &Server{
		cfg:   cfg,
		log:   log,
		grpc:  grpc.NewServer(append(base, opts...)...),
		stats: st,
	}
	hs := health.NewServer()
	s.health = newHealth(hs)
	healthpb.RegisterHealthServer(s.grpc, hs)
	reflection.Register(s.grpc)
	return s
}

// unaryInterceptors are the interceptors of every unary RPC a service
// serves, outermost first: over the network (Server) or in process (Local).
func unaryInterceptors(cfg ServerConfig, log *slog.Logger, guard *requestGuard) []grpc.UnaryServerInterceptor {
	return []grpc.UnaryServerInterceptor{
		unaryInteractive,
		unaryRecover(log),
		unaryDeadline(cfg.DefaultTimeout),
		unaryLog(log),
		unaryValidate(guard),
	}
}

// streamInterceptors are unaryInterceptors' counterparts for streams.
func streamInterceptors(log *slog.Logger, guard *requestGuard) []grpc.StreamServerInterceptor {
	return []grpc.StreamServerInterceptor{
		streamInteractive,
		streamRecover(log),
		streamLog(log),
		streamValidate(guard),
	}
}

// GRPC returns the underlying server for service registration.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Health returns the server's health reporter.
func (s *Server) Health() *Health { return s.health }

// Serve serves on lis until ctx is done, then shuts down gracefully: health
// turns NOT_SERVING, new RPCs are refused, and in-flight RPCs get up to
// ShutdownTimeout to finish before they are cancelled. It returns nil after
// a clean shutdown. The service ctx works for (telemetry.WithService), if
// any, names the spans of the RPCs it serves.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	if svc := telemetry.ServiceFrom(ctx); svc != "" {
		s.stats.service.Store(&svc)
	}
	for name := range s.grpc.GetServiceInfo() {
		s.health.registerService(name)
	}
	s.health.refresh()
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(lis) }()
	select {
	case err := <-errc:
		if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("grpcx: serve: %w", err)
		}
		return nil
	case <-ctx.Done():
	}
	s.health.shutdown()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.ShutdownTimeout):
		s.log.Warn("graceful shutdown timed out; cancelling in-flight RPCs", "timeout", s.cfg.ShutdownTimeout)
		s.grpc.Stop()
		<-done
	}
	<-errc
	return nil
}

// Flow-control windows, fixed. Left unset, grpc-go estimates the link's
// bandwidth-delay product by answering every burst of received data with a
// window update and a ping, which on a busy connection of small calls is one
// extra frame each way per call: measurable CPU and system calls for a link
// (pod to pod) whose delay is well under a millisecond. 1 MiB per stream and
// 4 MiB per connection keep a 32 MiB message moving at gigabytes per second
// at such delays.
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)
