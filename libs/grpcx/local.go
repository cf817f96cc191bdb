package grpcx

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Local is an in-process channel to the services registered on it: a
// grpc.ClientConnInterface, so a generated client runs on it unchanged,
// whose calls run the service's handlers in the caller's process, through
// the interceptors a Server runs (panic recovery, the default deadline, one
// log line per failed call, request validation), with no transport and no
// serialization. It is for a process that serves a second API in front of
// its own service: the hop over loopback would cost both processes' CPU
// and a wake-up each way.
//
// The calling context's outgoing metadata arrives as the handler's incoming
// metadata, as over the network. Messages are copied both ways, so neither
// side sees what the other changes later, and every error is a status.
// Unary and server-streaming methods are supported; a method that streams
// from the client is Unimplemented. Unlike a Server's, Local's calls are
// not traced or counted by the OpenTelemetry stats handler.
type Local struct {
	unary   grpc.UnaryServerInterceptor
	stream  grpc.StreamServerInterceptor
	methods map[string]localMethod
	streams map[string]localStream
}

type localMethod struct {
	impl    any
	handler grpc.MethodHandler
}

type localStream struct {
	impl    any
	handler grpc.StreamHandler
}

var _ grpc.ClientConnInterface = (*Local)(nil)
var _ grpc.ServiceRegistrar = (*Local)(nil)

// NewLocal returns a Local whose calls run through the interceptors a
// Server built with cfg and log runs. Register services on it with the
// generated Register functions, as on a Server.
func NewLocal(cfg ServerConfig, log *slog.Logger) *Local {
	cfg = cfg.WithDefaults()
	guard := sharedGuard()
	return &Local{
		unary:   chainUnary(unaryInterceptors(cfg, log, guard)),
		stream:  chainStream(streamInterceptors(log, guard)),
		methods: map[string]localMethod{},
		streams: map[string]localStream{},
	}
}

// RegisterService registers impl, the implementation of desc's service.
// It is not safe to call once calls have started.
func (l *Local) RegisterService(desc *grpc.ServiceDesc, impl any) {
	for _, m := range desc.Methods {
		l.methods["/"+desc.ServiceName+"/"+m.MethodName] = localMethod{impl: impl, handler: m.Handler}
	}
	for _, s := range desc.Streams {
		if !s.ClientStreams {
			l.streams["/"+desc.ServiceName+"/"+s.StreamName] = localStream{impl: impl, handler: s.Handler}
		}
	}
}

// Invoke runs a unary method.
func (l *Local) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	m, ok := l.methods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	in, ok1 := args.(proto.Message)
	out, ok2 := reply.(proto.Message)
	if !ok1 || !ok2 {
		return status.Errorf(codes.Internal, "%s: messages are not protocol buffers", method)
	}
	resp, err := m.handler(m.impl, incoming(ctx), func(dst any) error {
		proto.Merge(dst.(proto.Message), in)
		return nil
	}, l.unary)
	if err != nil {
		return asStatus(err)
	}
	proto.Reset(out)
	proto.Merge(out, resp.(proto.Message))
	return nil
}

// NewStream starts a server-streaming method: its handler runs in a
// goroutine of its own, as on a Server, until it returns or ctx ends.
func (l *Local) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	s, ok := l.streams[method]
	if !ok || desc.ClientStreams {
		return nil, status.Errorf(codes.Unimplemented, "unknown or client-streaming method %s", method)
	}
	ctx, cancel := context.WithCancel(ctx)
	cs := &localClientStream{ctx: ctx, cancel: cancel, req: make(chan proto.Message, 1),
		msgs: make(chan proto.Message, localStreamBuffer), done: make(chan struct{})}
	ss := &localServerStream{ctx: incoming(ctx), cs: cs}
	go func() {
		err := l.stream(s.impl, ss, &grpc.StreamServerInfo{FullMethod: method, IsServerStream: true}, s.handler)
		if err != nil {
			cs.err = asStatus(err)
		} else {
			cs.err = io.EOF
		}
		close(cs.done)
	}()
	return cs, nil
}

// localStreamBuffer is how many messages a handler may send ahead of the
// client's reads before its Send waits, as a transport's flow-control
// window would make it.
const localStreamBuffer = 16

// incoming turns ctx's outgoing metadata into the handler's incoming
// metadata, and leaves the handler no outgoing metadata of the caller's.
func incoming(ctx context.Context) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	return metadata.NewIncomingContext(metadata.NewOutgoingContext(ctx, nil), md)
}

// asStatus is err as a client would receive it over the network: a status
// error (a context's error as CANCELLED or DEADLINE_EXCEEDED).
func asStatus(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Convert(err).Err()
}

// localClientStream is the caller's side of a Local stream.
type localClientStream struct {
	ctx    context.Context
	cancel context.CancelFunc
	req    chan proto.Message // the one request, then closed by CloseSend
	sent   bool
	msgs   chan proto.Message // the handler's messages
	done   chan struct{}      // closed when the handler has returned
	err    error              // io.EOF or the handler's status; set before done closes
}

func (c *localClientStream) Header() (metadata.MD, error) { return metadata.MD{}, nil }
func (c *localClientStream) Trailer() metadata.MD         { return metadata.MD{} }
func (c *localClientStream) Context() context.Context     { return c.ctx }

func (c *localClientStream) CloseSend() error {
	if !c.sent {
		c.sent = true
		close(c.req)
	}
	return nil
}

func (c *localClientStream) SendMsg(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return status.Error(codes.Internal, "message is not a protocol buffer")
	}
	if c.sent {
		return status.Error(codes.Internal, "SendMsg after CloseSend, or a second request of a server-streaming call")
	}
	c.sent = true
	c.req <- proto.Clone(pm)
	close(c.req)
	return nil
}

// RecvMsg receives the handler's next message; at the end io.EOF or the
// handler's status, and the stream's context is released.
func (c *localClientStream) RecvMsg(m any) error {
	if err := c.ctx.Err(); err != nil {
		c.cancel()
		return status.FromContextError(err).Err()
	}
	select {
	case got := <-c.msgs:
		return c.deliver(m, got)
	case <-c.done:
		select {
		case got := <-c.msgs:
			return c.deliver(m, got)
		default:
		}
		c.cancel()
		return c.err
	case <-c.ctx.Done():
		c.cancel()
		return status.FromContextError(c.ctx.Err()).Err()
	}
}

func (c *localClientStream) deliver(m any, got proto.Message) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return status.Error(codes.Internal, "message is not a protocol buffer")
	}
	proto.Reset(pm)
	proto.Merge(pm, got)
	return nil
}

// localServerStream is the handler's side of a Local stream.
type localServerStream struct {
	ctx context.Context
	cs  *localClientStream
}

func (s *localServerStream) SetHeader(metadata.MD) error  { return nil }
func (s *localServerStream) SendHeader(metadata.MD) error { return nil }
func (s *localServerStream) SetTrailer(metadata.MD)       {}
func (s *localServerStream) Context() context.Context     { return s.ctx }

func (s *localServerStream) SendMsg(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return status.Error(codes.Internal, "message is not a protocol buffer")
	}
	select {
	case s.cs.msgs <- proto.Clone(pm):
		return nil
	case <-s.ctx.Done():
		return status.FromContextError(s.ctx.Err()).Err()
	}
}

func (s *localServerStream) RecvMsg(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return status.Error(codes.Internal, "message is not a protocol buffer")
	}
	select {
	case got, ok := <-s.cs.req:
		if !ok {
			return io.EOF
		}
		proto.Merge(pm, got)
		return nil
	case <-s.ctx.Done():
		return status.FromContextError(s.ctx.Err()).Err()
	}
}

// chainUnary makes one interceptor of ints, the first outermost, as
// grpc.ChainUnaryInterceptor does for a Server.
func chainUnary(ints []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		h := handler
		for i := len(ints) - 1; i >= 0; i-- {
			ic, next := ints[i], h
			h = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
		}
		return h(ctx, req)
	}
}

// chainStream is chainUnary for stream interceptors.
func chainStream(ints []grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		h := handler
		for i := len(ints) - 1; i >= 0; i-- {
			ic, next := ints[i], h
			h = func(srv any, ss grpc.ServerStream) error { return ic(srv, ss, info, next) }
		}
		return h(srv, ss)
	}
}
