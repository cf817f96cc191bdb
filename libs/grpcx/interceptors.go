package grpcx

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/outage"
	"github.com/agentmesh/agentmesh/libs/priority"
)

// unaryRecover turns a panic in a handler into codes.Internal, logging the
// stack once; the client never sees the panic value.
// unaryInteractive marks the request's context as one a caller waits on
// (priority.Interactive): the store's write gate serves its writes before
// background work's.
func unaryInteractive(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(priority.Interactive(ctx), req)
}

// streamInteractive is unaryInteractive for streams.
func streamInteractive(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &interactiveStream{ServerStream: ss, ctx: priority.Interactive(ss.Context())})
}

type interactiveStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *interactiveStream) Context() context.Context { return s.ctx }

func unaryRecover(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.ErrorContext(ctx, "panic in RPC", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
				err = Errorf(codes.Internal, "INTERNAL", "internal error")
			}
		}()
		return handler(ctx, req)
	}
}

func streamRecover(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				log.ErrorContext(ss.Context(), "panic in RPC", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
				err = Errorf(codes.Internal, "INTERNAL", "internal error")
			}
		}()
		return handler(srv, ss)
	}
}

// unaryDeadline gives RPCs without a deadline a default one, so no unary
// call can hold resources forever. Streams are long-lived by design and get
// none.
func unaryDeadline(d time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return handler(ctx, req)
	}
}

// unaryLog logs each failed RPC once, and masks unexpected errors: an error
// that is not a gRPC status reaches the client as Internal without its text.
// A dependency outage anywhere in the error's chain (an *outage.Error, or a
// MongoDB or NATS driver error that a store passed on untranslated) reaches
// it as Unavailable with outage's reason, whatever wraps it: the client
// sees the dependency named, never the driver's text.
func unaryLog(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		return resp, logResult(ctx, log, info.FullMethod, start, err)
	}
}

func streamLog(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		return logResult(ss.Context(), log, info.FullMethod, start, err)
	}
}

func logResult(ctx context.Context, log *slog.Logger, method string, start time.Time, err error) error {
	if err == nil {
		return nil
	}
	if o := outage.Find(err); o != nil {
		log.WarnContext(ctx, "rpc failed", "method", method, "code", codes.Unavailable.String(), "dependency", o.Dependency, "error", err.Error(), "duration", time.Since(start))
		return o.GRPCStatus().Err()
	}
	st, ok := status.FromError(err)
	if !ok {
		if ctx.Err() == context.Canceled {
			st = status.New(codes.Canceled, "request cancelled")
		} else if ctx.Err() == context.DeadlineExceeded {
			st = status.New(codes.DeadlineExceeded, "deadline exceeded")
		} else {
			log.ErrorContext(ctx, "rpc failed", "method", method, "code", codes.Internal.String(), "error", err.Error(), "duration", time.Since(start))
			return Errorf(codes.Internal, "INTERNAL", "internal error")
		}
	}
	level := slog.LevelInfo
	switch st.Code() {
	case codes.Internal, codes.Unknown, codes.DataLoss:
		level = slog.LevelError
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
		level = slog.LevelWarn
	}
	log.Log(ctx, level, "rpc failed", "method", method, "code", st.Code().String(), "error", st.Message(), "duration", time.Since(start))
	return st.Err()
}
