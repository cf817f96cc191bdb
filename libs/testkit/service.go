package testkit

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// Listen returns a TCP listener on 127.0.0.1 with a random free port, closed
// in t.Cleanup. It fails the test if the port cannot be bound.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testkit.Listen: %v", err)
	}
	t.Cleanup(func() { _ = lis.Close() }) // the server may have closed it already
	return lis
}

// StartGRPC starts a gRPC server with opts on a random loopback port, lets
// register add services to it, serves in a goroutine, and returns a client
// connection to it without transport security. Like every server of the
// mesh (grpcx.NewServer) it checks each request against its contract's
// constraints before a handler runs. In t.Cleanup the connection
// is closed and then the server stopped gracefully; a Serve error fails the
// test.
func StartGRPC(t testing.TB, register func(s *grpc.Server), opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis := Listen(t)
	s := grpc.NewServer(append(grpcx.RequestChecks(), opts...)...)
	register(s)

	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.GracefulStop()
		if err := <-served; err != nil {
			t.Errorf("testkit: grpc Serve: %v", err)
		}
	})

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("testkit.StartGRPC: dial %s: %v", lis.Addr(), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
