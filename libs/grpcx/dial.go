package grpcx

import (
	"fmt"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// retryServiceConfig retries idempotent failures (UNAVAILABLE) with
// exponential backoff for every method, and asks for round-robin balancing
// over the resolved addresses (Kubernetes headless services).
const retryServiceConfig = `{
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [{
    "name": [{}],
    "waitForReady": false,
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.1s",
      "maxBackoff": "2s",
      "backoffMultiplier": 2.0,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`

// Dial creates a client connection to target ("host:port" or any gRPC target
// such as "dns:///svc:9090") with OpenTelemetry stats, the mesh's retry
// service config and plaintext transport (the mesh runs behind the cluster
// network or a service mesh that adds mTLS). Extra options are appended.
// The connection is lazy: it connects on first use.
func Dial(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithDefaultServiceConfig(retryServiceConfig),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(32 << 20)),
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
	}
	cc, err := grpc.NewClient(target, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("grpcx: dial %s: %w", target, err)
	}
	return cc, nil
}
