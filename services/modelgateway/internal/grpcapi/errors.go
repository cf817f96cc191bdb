package grpcapi

import (
	"errors"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
)

// toStatus is the one mapping from gateway failures to gRPC status codes,
// each with a stable google.rpc.ErrorInfo reason (and RetryInfo when the
// provider gave a Retry-After). Messages carry the provider's own words;
// adapters have already scrubbed API keys from them.
//
// ErrorInfo metadata: "provider" always (empty when no provider answered);
// for UPSTREAM_STREAM_CUT (a provider's answer ended before it was complete)
// "bytes_received", the answer bytes that arrived, and
// "partial_output_sent", "true" when part of the answer had already been
// streamed to the caller (then nothing was retried); other failures carry
// "partial_output_sent" only when it is "true".
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var le *llm.Error
	if !errors.As(err, &le) {
		return status.Error(codes.Internal, "internal error")
	}
	code, reason := codes.Internal, "INTERNAL"
	switch le.Kind {
	case llm.KindInvalidRequest:
		code, reason = codes.InvalidArgument, "PROVIDER_REJECTED_REQUEST"
	case llm.KindAuth:
		code, reason = codes.FailedPrecondition, "PROVIDER_AUTH_FAILED"
	case llm.KindBalance:
		code, reason = codes.ResourceExhausted, "PROVIDER_INSUFFICIENT_BALANCE"
	case llm.KindNotFound:
		code, reason = codes.NotFound, "PROVIDER_MODEL_NOT_FOUND"
	case llm.KindRateLimited:
		code, reason = codes.ResourceExhausted, "PROVIDER_RATE_LIMITED"
	case llm.KindServer:
		code, reason = codes.Unavailable, "PROVIDER_ERROR"
	case llm.KindConnection:
		code, reason = codes.Unavailable, "PROVIDER_UNREACHABLE"
	case llm.KindTimeout:
		code, reason = codes.DeadlineExceeded, "PROVIDER_TIMEOUT"
	case llm.KindBadResponse:
		code, reason = codes.Unavailable, "PROVIDER_BAD_RESPONSE"
	case llm.KindUnsupported:
		code, reason = codes.FailedPrecondition, "PROVIDER_UNSUPPORTED"
	case llm.KindOverloaded:
		code, reason = codes.ResourceExhausted, "PROVIDER_QUEUE_FULL"
	case llm.KindUnavailable:
		code, reason = codes.Unavailable, "NO_PROVIDER"
	case llm.KindStreamCut:
		code, reason = codes.Unavailable, "UPSTREAM_STREAM_CUT"
	case llm.KindCanceled:
		code, reason = codes.Canceled, "CANCELED"
	case llm.KindInvalidOutput:
		code, reason = codes.FailedPrecondition, "SCHEMA_VALIDATION_FAILED"
	case llm.KindUnknownModel:
		code, reason = codes.NotFound, "UNKNOWN_MODEL"
	}
	meta := map[string]string{"provider": le.Provider}
	if le.Kind == llm.KindStreamCut {
		meta["bytes_received"] = strconv.FormatInt(le.BytesReceived, 10)
	}
	if le.Kind == llm.KindStreamCut || le.PartialSent {
		meta["partial_output_sent"] = strconv.FormatBool(le.PartialSent)
	}
	st := status.New(code, le.Error())
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "agentmesh", Metadata: meta}); err == nil {
		st = d
	}
	if le.RetryAfter > 0 {
		if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(le.RetryAfter.Round(time.Millisecond))}); err == nil {
			st = d
		}
	}
	return st.Err()
}
