package grpcx_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// serveAndDial serves the services register adds on a grpcx server on
// loopback, stopped when t ends, and returns a grpcx.Dial connection to it.
func serveAndDial(t *testing.T, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	srv := grpcx.NewServer(grpcx.ServerConfig{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	register(srv.GRPC())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = srv.Serve(ctx, lis) }()
	cc, err := grpcx.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// unavailableClassifier fails every call with UNAVAILABLE, counting them.
type unavailableClassifier struct {
	classifierv1.UnimplementedClassifierServiceServer
	commands, gets atomic.Int32
}

func (c *unavailableClassifier) SendCommand(*classifierv1.SendCommandRequest, grpc.ServerStreamingServer[classifierv1.SendCommandResponse]) error {
	c.commands.Add(1)
	return status.Error(codes.Unavailable, "replica going away")
}

func (c *unavailableClassifier) GetRun(context.Context, *classifierv1.GetRunRequest) (*classifierv1.GetRunResponse, error) {
	c.gets.Add(1)
	return nil, status.Error(codes.Unavailable, "replica going away")
}

// TestOnlyReadsAreRetried: a read that fails with UNAVAILABLE is retried
// (four attempts), a write is not: a replica may have applied it before it
// failed, and a second application would, say, approve the next batch.
func TestOnlyReadsAreRetried(t *testing.T) {
	t.Parallel()
	impl := &unavailableClassifier{}
	cc := serveAndDial(t, func(s *grpc.Server) { classifierv1.RegisterClassifierServiceServer(s, impl) })
	client := classifierv1.NewClassifierServiceClient(cc)
	scope := &classifierv1.GetRunRequest{RunId: "r1"}
	if _, err := client.GetRun(context.Background(), scope); status.Code(err) != codes.Unavailable {
		t.Fatalf("GetRun: %v", err)
	}
	stream, err := client.SendCommand(context.Background(), &classifierv1.SendCommandRequest{RunId: "r1", Type: classifierv1.CommandType_COMMAND_TYPE_APPROVE_BATCH})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("SendCommand: %v", err)
	}
	if g, c := impl.gets.Load(), impl.commands.Load(); g != 4 || c != 1 {
		t.Fatalf("GetRun ran %d times (want 4: retried), SendCommand %d (want 1: not retried)", g, c)
	}
}
