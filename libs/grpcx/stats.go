package grpcx

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc/stats"

	"github.com/agentmesh/agentmesh/libs/telemetry"
)

// serviceStats marks every RPC's context with the service that serves it
// before OpenTelemetry's handler starts the server span, so that under
// `agentmesh up` (one process, every service) the span, and every span the
// handler starts from its context, carries its own service's name. The
// name is the one on the context given to Serve; a process that is one
// service has none and needs none.
type serviceStats struct {
	stats.Handler
	service atomic.Pointer[string]
}

// TagRPC marks ctx with the service, then lets the wrapped handler tag it.
func (s *serviceStats) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if svc := s.service.Load(); svc != nil {
		ctx = telemetry.WithService(ctx, *svc)
	}
	return s.Handler.TagRPC(ctx, info)
}
