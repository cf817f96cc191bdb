package grpcapi

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/vision/internal/analysis"
)

// Reasons carried in the google.rpc.ErrorInfo of vision model failures.
const (
	// ReasonModelUnavailable: the gateway or its provider is down; retry later.
	ReasonModelUnavailable = "VISION_MODEL_UNAVAILABLE"
	// ReasonModelBusy: rate-limited or queue full; retry later.
	ReasonModelBusy = "VISION_MODEL_BUSY"
	// ReasonModelFailed: the model route refused the call or answered
	// unusably (no vision-capable model, schema not met); retrying the same
	// request will not help until the route is fixed.
	ReasonModelFailed = "VISION_MODEL_FAILED"
)

// toStatus is the one mapping from analysis failures to gRPC status codes.
// A model failure is not reported with the gateway's own code unchanged: an
// InvalidArgument from the gateway means the provider refused our call, not
// that the client's request was malformed.
func toStatus(err error) error {
	var inv *analysis.InvalidInputError
	if errors.As(err, &inv) {
		return grpcx.InvalidArgument(inv.Field, "%s", inv.Reason)
	}
	var me *analysis.ModelError
	if !errors.As(err, &me) {
		if st, ok := status.FromError(err); ok {
			return st.Err()
		}
		return err // masked as Internal by the logging interceptor
	}
	st, ok := status.FromError(me.Err)
	if !ok {
		// Not from the gateway: the answer itself was unusable.
		return grpcx.Errorf(codes.FailedPrecondition, ReasonModelFailed, "%s", me.Error())
	}
	msg := fmt.Sprintf("vision model, stage %d, %s: %s", me.Stage, me.Image, st.Message())
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded:
		return status.Error(st.Code(), msg)
	case codes.Unavailable, codes.Internal, codes.Unknown:
		return grpcx.Errorf(codes.Unavailable, ReasonModelUnavailable, "%s", msg)
	case codes.ResourceExhausted:
		return grpcx.Errorf(codes.ResourceExhausted, ReasonModelBusy, "%s", msg)
	default:
		return grpcx.Errorf(codes.FailedPrecondition, ReasonModelFailed, "%s", msg)
	}
}
