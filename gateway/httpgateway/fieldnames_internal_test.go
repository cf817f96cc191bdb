package httpgateway

import (
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// TestJSONFieldNames: a service's refusal names proto fields; the REST
// caller reads the JSON names it wrote, in the message and the violations.
func TestJSONFieldNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in         *status.Status
		msg, field string // field "" : no violation expected
	}{
		{status.Convert(grpcx.InvalidArgument("scope.project_id", "does not match the project of the API key")),
			"scope.projectId: does not match the project of the API key", "scope.projectId"},
		{status.Convert(grpcx.InvalidArgument("messages[0].tool_call_id", `"a_b" is no call`)),
			`messages[0].toolCallId: "a_b" is no call`, "messages[0].toolCallId"},
		{status.Convert(grpcx.InvalidArgument("metadata[\"x_y\"].top_p", "is wrong")),
			`metadata["x_y"].topP: is wrong`, `metadata["x_y"].topP`},
		{status.New(codes.PermissionDenied, `tenant_id: "globex" is not the caller's tenant`), `tenantId: "globex" is not the caller's tenant`, ""},
		{status.New(codes.InvalidArgument, `parsing field "source_type": "99" is not a valid value`), `sourceType: "99" is not a valid value`, "sourceType"},
		// Left alone: no field path at the head, or nothing to rename.
		{status.New(codes.InvalidArgument, "request body: proto: unexpected EOF"), "request body: proto: unexpected EOF", ""},
		{status.New(codes.InvalidArgument, "Last-Event-ID: must be a number"), "Last-Event-ID: must be a number", ""},
		{status.Convert(grpcx.InvalidArgument("query", "is required")), "query: is required", "query"},
		{status.New(codes.NotFound, "job not found: a_b"), "job not found: a_b", ""},
	} {
		got := jsonFieldNames(tc.in)
		if got.Code() != tc.in.Code() || got.Message() != tc.msg {
			t.Errorf("%q: %v %q, want %v %q", tc.in.Message(), got.Code(), got.Message(), tc.in.Code(), tc.msg)
		}
		var field string
		for _, d := range got.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
				field = br.GetFieldViolations()[0].GetField()
			}
		}
		if field != tc.field {
			t.Errorf("%q: violation on %q, want %q", tc.in.Message(), field, tc.field)
		}
	}
}
