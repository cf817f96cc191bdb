package grpcapi

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/outage"
	"github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runner"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// Reasons carried in the google.rpc.ErrorInfo of failed calls, for clients
// to branch on.
const (
	ReasonRunNotFound       = "RUN_NOT_FOUND"
	ReasonRunBusy           = "RUN_BUSY"
	ReasonRunFinished       = "RUN_FINISHED"
	ReasonWrongState        = "WRONG_STATE"
	ReasonCheckpointCorrupt = "CHECKPOINT_CORRUPT"
	ReasonEventsUndelivered = "EVENTS_UNDELIVERED"
	ReasonRunInterrupted    = "RUN_INTERRUPTED"
)

// toStatus maps the domain's errors to gRPC statuses: the one place that
// does. Unexpected errors are returned as they are, for the server's
// interceptor to log once and mask as Internal.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if o := outage.Find(err); o != nil {
		// Before the context cases: the driver reports a database that
		// never answered as a deadline too.
		return o.GRPCStatus().Err()
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, runner.ErrBusy):
		return grpcx.Errorf(codes.Aborted, ReasonRunBusy, "%v", err)
	case errors.Is(err, checkpoint.ErrNotFound):
		return grpcx.Errorf(codes.NotFound, ReasonRunNotFound, "run not found")
	case errors.Is(err, statemachine.ErrFinished):
		return grpcx.Errorf(codes.FailedPrecondition, ReasonRunFinished, "%v; start a new run", err)
	case errors.Is(err, statemachine.ErrWrongState):
		return grpcx.Errorf(codes.FailedPrecondition, ReasonWrongState, "%v", err)
	case errors.Is(err, checkpoint.ErrCorrupt):
		return grpcx.Errorf(codes.DataLoss, ReasonCheckpointCorrupt, "%v; the run was stopped", err)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	}
	return err
}
