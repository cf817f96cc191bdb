package grpcx

import (
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// InvalidArgument returns an InvalidArgument status naming the offending
// field in the message and in a google.rpc.BadRequest detail, so clients can
// point at the field without parsing text.
func InvalidArgument(field, format string, args ...any) error {
	desc := fmt.Sprintf(format, args...)
	st := status.New(codes.InvalidArgument, field+": "+desc)
	if d, err := st.WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: desc}},
	}); err == nil {
		st = d
	}
	return st.Err()
}

// Errorf returns a status with an ErrorInfo detail carrying a stable reason,
// so clients branch on code plus reason, never on message text.
func Errorf(code codes.Code, reason, format string, args ...any) error {
	st := status.New(code, fmt.Sprintf(format, args...))
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "agentmesh"}); err == nil {
		st = d
	}
	return st.Err()
}

// Unimplemented reports a capability a later release delivers. The message
// names the capability, so nobody mistakes it for a working feature.
func Unimplemented(capability string) error {
	return Errorf(codes.Unimplemented, "NOT_IMPLEMENTED", "%s is not implemented yet", capability)
}

// Reason returns the ErrorInfo reason of a gRPC error (see Errorf), or ""
// when it carries none.
func Reason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}
