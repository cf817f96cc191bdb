// Package outage tells a dependency outage apart from every other failure:
// it knows which errors of the MongoDB driver and of NATS mean that the
// database or the message bus cannot be reached, and it wraps them in an
// [Error] that carries gRPC's Unavailable with the ErrorInfo reason
// DEPENDENCY_UNAVAILABLE, naming the dependency ("mongo", "nats") and
// nothing of its address or connection string.
//
// It sits below mongox, events and grpcx: mongox.Translate wraps the
// driver's outage errors at the store's edge, and the server interceptor of
// grpcx finds an outage in any failed RPC's error chain (wrapped or still
// the driver's own), so a store that forgot to translate still answers
// Unavailable rather than Internal.
package outage

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reason is the google.rpc.ErrorInfo reason of an outage's status; its
// metadata key "dependency" names what is down.
const Reason = "DEPENDENCY_UNAVAILABLE"

// Dependencies named by this package.
const (
	// Mongo is the database (MongoDB or FerretDB).
	Mongo = "mongo"
	// NATS is the message bus.
	NATS = "nats"
)

// Error is a failure to reach a dependency. Its GRPCStatus is Unavailable
// with the reason [Reason] and a message that names the dependency only:
// the cause (which may quote hosts) stays in Err, for logs.
type Error struct {
	// Dependency names what is down: [Mongo] or [NATS].
	Dependency string
	// Err is the driver's error.
	Err error
}

// Error implements error.
func (e *Error) Error() string { return e.Dependency + " unavailable: " + e.Err.Error() }

// Unwrap returns the driver's error.
func (e *Error) Unwrap() error { return e.Err }

// GRPCStatus is the status a client sees: Unavailable, worth retrying once
// the dependency is back.
func (e *Error) GRPCStatus() *status.Status {
	st := status.New(codes.Unavailable, e.Dependency+" is unavailable; retry later")
	if d, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason: Reason, Domain: "agentmesh", Metadata: map[string]string{"dependency": e.Dependency},
	}); err == nil {
		st = d
	}
	return st
}

// Find returns the outage in err's chain: an *Error already there, or a
// driver error that means MongoDB or NATS cannot be reached, wrapped. It
// returns nil for every other error, and for a failure whose cause is that
// the caller cancelled (the client went away; no dependency is to blame).
func Find(err error) *Error {
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	switch {
	case mongoDown(err):
		return &Error{Dependency: Mongo, Err: err}
	case natsDown(err):
		return &Error{Dependency: NATS, Err: err}
	}
	return nil
}

// Mark returns err with its outage made visible: an *Error wrapping err
// when err is a driver's outage error not yet marked, err itself otherwise
// (nil for nil).
func Mark(err error) error {
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	if o := Find(err); o != nil {
		return o
	}
	return err
}

// mongoDown reports whether err is the MongoDB driver saying the server
// cannot be reached: no server could be selected (the server selection
// timeout, or the caller's deadline, ran out while none answered), the
// connection failed (refused, reset, closed mid-command: the driver labels
// these NetworkError), or the client is already disconnected. A network
// error ended by the caller's deadline is not one: a slow server is not a
// missing one, and DeadlineExceeded says so better.
func mongoDown(err error) bool {
	if _, ok := errors.AsType[topology.ServerSelectionError](err); ok {
		return true
	}
	if errors.Is(err, mongo.ErrClientDisconnected) || errors.Is(err, topology.ErrTopologyClosed) {
		return true
	}
	return mongo.IsNetworkError(err) && !errors.Is(err, context.DeadlineExceeded)
}

// natsDown reports whether err is the NATS client saying no server (or no
// JetStream) answers: the connection is closed, reconnecting or has no
// server, a request found no responder or no JetStream response, or
// JetStream answered 503 (no meta leader, JetStream unavailable).
func natsDown(err error) bool {
	for _, target := range []error{
		nats.ErrConnectionClosed, nats.ErrNoServers, nats.ErrDisconnected, nats.ErrConnectionReconnecting,
		nats.ErrNoResponders, nats.ErrTimeout,
		jetstream.ErrConnectionClosed, jetstream.ErrServerShutdown, jetstream.ErrNoStreamResponse, jetstream.ErrNoHeartbeat,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	ae, ok := errors.AsType[*jetstream.APIError](err)
	return ok && ae.Code == 503
}
