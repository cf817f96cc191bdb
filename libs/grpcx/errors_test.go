package grpcx

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestReason(t *testing.T) {
	t.Parallel()
	err := Errorf(codes.FailedPrecondition, "SCHEMA_VALIDATION_FAILED", "answer does not validate")
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"with reason":     {err, "SCHEMA_VALIDATION_FAILED"},
		"wrapped":         {fmt.Errorf("call: %w", err), "SCHEMA_VALIDATION_FAILED"},
		"status without":  {status.Error(codes.Internal, "x"), ""},
		"field violation": {InvalidArgument("model", "is required"), ""},
		"not a status":    {errors.New("x"), ""},
		"no error at all": {nil, ""},
	} {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("%s: Reason = %q, want %q", name, got, tc.want)
		}
	}
}
