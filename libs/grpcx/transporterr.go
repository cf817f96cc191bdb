package grpcx

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// maskTransport replaces the message of an error the connection itself
// raised with one that names only the service called. gRPC's own messages
// name addresses and sockets ("connection error: desc = \"transport: Error
// while dialing: dial tcp 10.0.3.7:9091: connect: connection refused\""),
// and the services pass their callees' failures on to their own callers, up
// to the gateway's users. A status of the mesh's servers always carries an
// ErrorInfo (Errorf, outage); the connection's never does. So Unavailable,
// Internal and Unknown without one are taken for the connection's, and
// become a status of the mesh (ReasonUnreachable, ReasonFailed). The code
// stays, and the retries inside this interceptor see gRPC's own error; the
// original is on the call's client span (the stats handler records it).
//
// A status gRPC's retry policy gave up on comes wrapped in "max retries
// exhausted: failed after 4 attempts: rpc error: …"; the server's own
// status is returned instead.
func maskTransport(method string, err error) error {
	if err == nil {
		return nil
	}
	var gs interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &gs) {
		return err
	}
	st := gs.GRPCStatus()
	if Reason(st.Err()) != "" {
		return st.Err()
	}
	svc := calledService(method)
	switch st.Code() {
	case codes.Unavailable:
		return serviceStatus(codes.Unavailable, ReasonUnreachable, svc, svc+" is unreachable; retry later")
	case codes.Internal, codes.Unknown:
		return serviceStatus(st.Code(), ReasonFailed, svc, svc+" failed: internal error")
	}
	return st.Err()
}

// Reasons of the statuses maskTransport makes. They carry the service
// called in the ErrorInfo's metadata ("service"), and, being statuses of
// the mesh, pass unchanged through the services that relay them: the
// caller learns which service could not be reached, not the one in front.
const (
	ReasonUnreachable = "SERVICE_UNREACHABLE"
	ReasonFailed      = "SERVICE_FAILED"
)

// serviceStatus is a status of the mesh (see Errorf) naming svc.
func serviceStatus(code codes.Code, reason, svc, msg string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "agentmesh", Metadata: map[string]string{"service": svc}}); err == nil {
		st = d
	}
	return st.Err()
}

// calledService is the service part of a full method name,
// "/agentmesh.model.v1.ModelService/Chat" → "ModelService".
func calledService(method string) string {
	svc, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if i := strings.LastIndexByte(svc, '.'); i >= 0 {
		svc = svc[i+1:]
	}
	if svc == "" {
		return "the service"
	}
	return svc
}

// maskTransportUnary is the unary client interceptor of maskTransport.
func maskTransportUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return maskTransport(method, invoker(ctx, method, req, reply, cc, opts...))
}

// maskTransportStream is the stream client interceptor of maskTransport.
func maskTransportStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, maskTransport(method, err)
	}
	return &maskedStream{ClientStream: cs, method: method}, nil
}

// maskedStream masks the errors of a client stream's calls; io.EOF, which
// is no status, passes unchanged.
type maskedStream struct {
	grpc.ClientStream
	method string
}

func (s *maskedStream) RecvMsg(m any) error {
	return maskTransport(s.method, s.ClientStream.RecvMsg(m))
}

func (s *maskedStream) SendMsg(m any) error {
	return maskTransport(s.method, s.ClientStream.SendMsg(m))
}

func (s *maskedStream) CloseSend() error {
	return maskTransport(s.method, s.ClientStream.CloseSend())
}

func (s *maskedStream) Header() (metadata.MD, error) {
	md, err := s.ClientStream.Header()
	return md, maskTransport(s.method, err)
}
