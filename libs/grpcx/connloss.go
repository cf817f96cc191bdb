package grpcx

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ConnectionLost reports whether err is a call that lost its server: gRPC's
// Unavailable with no ErrorInfo reason, which is what a client sees when
// the replica serving it dies or the connection breaks mid-call, or the
// same as Dial's connections report it (ReasonUnreachable, see
// maskTransport). Every other Unavailable the mesh's own services answer
// carries a reason (a provider failed, a dependency is down), and those are
// not connection losses.
func ConnectionLost(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	r := Reason(err)
	return r == "" || r == ReasonUnreachable
}

// connectionLossRetried are the methods Dial's connections send again, up
// to connectionLossAttempts times, when a call lost its server mid-flight
// (ConnectionLost): model calls, whose answer nothing keeps until the
// caller stores it, so a second call is safe, and the balancer sends it to
// another replica once the dead one's connection is gone. Without it a
// model gateway replica's death failed the classification run or analysis
// whose call it relayed.
var connectionLossRetried = map[string]bool{"/agentmesh.model.v1.ModelService/Chat": true}

// connectionLossAttempts is how many times a connectionLossRetried call is
// sent at most.
const connectionLossAttempts = 3

// retryConnectionLossUnary is the client interceptor Dial installs for
// connectionLossRetried.
func retryConnectionLossUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !connectionLossRetried[method] {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	return RetryConnectionLoss(ctx, connectionLossAttempts, func(ctx context.Context) error {
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

// RetryConnectionLoss runs call up to attempts times while it fails with a
// lost connection (ConnectionLost), waiting 100 ms, then 200 ms, ...
// between attempts, and returns its last error. It is for calls that are
// safe to run again because nothing was kept of a cut one, such as a model
// call whose answer the caller stores: the balancer sends the next attempt
// to another replica once the dead one's connection is gone. gRPC's own
// retry policy (see retriedMethods) does not cover these calls, since for
// most writes a cut call may have been applied.
func RetryConnectionLoss(ctx context.Context, attempts int, call func(context.Context) error) error {
	wait := 100 * time.Millisecond
	var err error
	for i := range max(attempts, 1) {
		if err = call(ctx); err == nil || !ConnectionLost(err) || i == attempts-1 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
	}
	return err
}
