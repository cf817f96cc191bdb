package grpcx_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// flakyHealth answers Check. Its first call waits until its client's
// connection is cut (the cutter closes it once the call arrived); with
// reasoned set, every call instead fails with an Unavailable carrying an
// ErrorInfo reason, as a service of the mesh answers.
type flakyHealth struct {
	healthpb.UnimplementedHealthServer
	calls    atomic.Int32
	arrived  chan struct{}
	reasoned bool
}

func (h *flakyHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	n := h.calls.Add(1)
	if h.reasoned {
		st, _ := status.New(codes.Unavailable, "provider down").WithDetails(&errdetails.ErrorInfo{Reason: "PROVIDER_ERROR"})
		return nil, st.Err()
	}
	if n == 1 {
		close(h.arrived)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// serveHealthBehindCutter serves h and returns the address of a cutter in
// front of it, whose Cut drops every connection through it.
func serveHealthBehindCutter(t *testing.T, h healthpb.HealthServer) (string, *testkit.Cutter) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return testkit.StartCutter(t, ln.Addr().String())
}

func healthBehindCutter(t *testing.T, h *flakyHealth) (healthpb.HealthClient, *testkit.Cutter) {
	t.Helper()
	addr, c := serveHealthBehindCutter(t, h)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn), c
}

func TestRetryConnectionLoss(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("a call cut mid-flight runs again on a new connection", func(t *testing.T) {
		h := &flakyHealth{arrived: make(chan struct{})}
		client, c := healthBehindCutter(t, h)
		go func() { <-h.arrived; c.Cut() }()
		var first error
		err := grpcx.RetryConnectionLoss(ctx, 3, func(ctx context.Context) error {
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
			if first == nil {
				first = err
			}
			return err
		})
		if err != nil {
			t.Fatalf("RetryConnectionLoss = %v, want the second attempt's success", err)
		}
		if !grpcx.ConnectionLost(first) {
			t.Errorf("the cut call failed with %v, which ConnectionLost does not recognise", first)
		}
		if n := h.calls.Load(); n != 2 {
			t.Errorf("server saw %d calls, want 2", n)
		}
	})
	t.Run("an Unavailable the service answered is not retried", func(t *testing.T) {
		h := &flakyHealth{reasoned: true}
		client, _ := healthBehindCutter(t, h)
		err := grpcx.RetryConnectionLoss(ctx, 3, func(ctx context.Context) error {
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		})
		if status.Code(err) != codes.Unavailable || grpcx.Reason(err) != "PROVIDER_ERROR" {
			t.Fatalf("err = %v, want the service's Unavailable PROVIDER_ERROR", err)
		}
		if n := h.calls.Load(); n != 1 {
			t.Errorf("server saw %d calls, want 1", n)
		}
	})
	t.Run("attempts bound the retries", func(t *testing.T) {
		calls := 0
		lost := status.Error(codes.Unavailable, "error reading from server: EOF")
		err := grpcx.RetryConnectionLoss(ctx, 3, func(context.Context) error { calls++; return lost })
		if err != lost || calls != 3 {
			t.Errorf("err %v after %d calls, want the loss after 3", err, calls)
		}
	})
}
