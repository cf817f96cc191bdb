package grpcx_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// answeringHealth fails every Check and Watch with err.
type answeringHealth struct {
	healthpb.UnimplementedHealthServer
	err error
}

func (h answeringHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return nil, h.err
}

func (h answeringHealth) Watch(*healthpb.HealthCheckRequest, grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	return h.err
}

// blockingHealth's Watch holds its stream open until the client goes.
type blockingHealth struct {
	healthpb.UnimplementedHealthServer
	arrived chan struct{}
}

func (h *blockingHealth) Watch(_ *healthpb.HealthCheckRequest, stream grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	close(h.arrived)
	<-stream.Context().Done()
	return stream.Context().Err()
}

// TestTransportErrorsNameNoAddress: what a connection itself fails with
// (nothing listening, a connection cut mid-call) reaches the caller as
// "<service> is unreachable", without gRPC's text, which names the
// address and the socket; a status the server sent — with the ErrorInfo
// every service of the mesh attaches — passes unchanged. The code stays,
// so ConnectionLost still recognises a lost connection.
func TestTransportErrorsNameNoAddress(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leaks := func(t *testing.T, err error, addr string) {
		t.Helper()
		host, port, _ := net.SplitHostPort(addr)
		for _, s := range []string{host, port, "dial", "tcp", "transport", "connection"} {
			if strings.Contains(err.Error(), s) {
				t.Fatalf("error %q names %q", err, s)
			}
		}
	}

	t.Run("nothing listening", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		conn, err := grpcx.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		client := healthpb.NewHealthClient(conn)
		_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
		if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "Health is unreachable; retry later" ||
			grpcx.Reason(err) != grpcx.ReasonUnreachable || !grpcx.ConnectionLost(err) {
			t.Fatalf("unary: %v (ConnectionLost %v)", err, grpcx.ConnectionLost(err))
		}
		leaks(t, err, addr)
		stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			if _, herr := stream.Header(); herr != nil {
				leaks(t, herr, addr)
			}
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("stream: %v", err)
		}
		leaks(t, err, addr)
	})

	t.Run("cut mid-call", func(t *testing.T) {
		h := &blockingHealth{arrived: make(chan struct{})}
		addr, cutter := serveHealthBehindCutter(t, h)
		conn, err := grpcx.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		go func() {
			<-h.arrived
			cutter.Cut()
		}()
		stream, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.Unavailable || !grpcx.ConnectionLost(err) {
			t.Fatalf("cut stream: %v", err)
		}
		leaks(t, err, addr)
	})

	t.Run("the server's own answers", func(t *testing.T) {
		for _, tc := range []struct {
			sent         error
			want, reason string
		}{
			{grpcx.Errorf(codes.Unavailable, "DEPENDENCY_UNAVAILABLE", "mongodb is unavailable; retry later"), "mongodb is unavailable; retry later", "DEPENDENCY_UNAVAILABLE"},
			{grpcx.Errorf(codes.Internal, "SCHEMA", "the model's answer did not match"), "the model's answer did not match", "SCHEMA"},
			// What a server outside the mesh might answer.
			{status.Error(codes.Internal, "panic at x.go:12"), "Health failed: internal error", grpcx.ReasonFailed},
			{status.Error(codes.NotFound, "no such thing"), "no such thing", ""},
			// A service relaying what its own connection reported: the
			// service named is the one that could not be reached.
			{grpcx.Errorf(codes.Unavailable, grpcx.ReasonUnreachable, "ModelService is unreachable; retry later"), "ModelService is unreachable; retry later", grpcx.ReasonUnreachable},
		} {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			healthpb.RegisterHealthServer(srv, answeringHealth{err: tc.sent})
			go func() { _ = srv.Serve(ln) }()
			conn, err := grpcx.Dial(ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			client := healthpb.NewHealthClient(conn)
			_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
			got := status.Convert(err)
			stream, serr := client.Watch(ctx, &healthpb.HealthCheckRequest{})
			if serr == nil {
				_, serr = stream.Recv()
			}
			_ = conn.Close()
			srv.Stop()
			if got.Code() != status.Code(tc.sent) || got.Message() != tc.want || grpcx.Reason(err) != tc.reason {
				t.Errorf("sent %v: got %v, want message %q", tc.sent, err, tc.want)
			}
			if status.Convert(serr).Message() != tc.want {
				t.Errorf("sent %v on a stream: got %v, want message %q", tc.sent, serr, tc.want)
			}
		}
	})
}
