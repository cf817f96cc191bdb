package httpgateway

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// errorJSON renders google.rpc.Status as {"code", "message", "details"},
// always with all three fields (the OpenAPI document's rpcStatus).
var errorJSON = protojson.MarshalOptions{EmitUnpopulated: true}

// statusJSON encodes st. A detail whose type this binary cannot resolve is
// dropped rather than failing the whole error response.
func statusJSON(st *status.Status) []byte {
	b, err := errorJSON.Marshal(st.Proto())
	if err != nil {
		b, _ = errorJSON.Marshal(&spb.Status{Code: int32(st.Code()), Message: st.Message()})
	}
	return b
}

// writeStatus answers with httpStatus and the JSON error body of st. When
// the response is an SSE stream that has already started, the status line
// is gone, so the error becomes the stream's last event instead.
func writeStatus(w http.ResponseWriter, httpStatus int, st *status.Status) {
	if sw := findStreamWriter(w); sw != nil && sw.started() {
		sw.writeEvent(errorEvent(st))
		return
	}
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(httpStatus)
	_, _ = w.Write(statusJSON(st))
}

// handleError is the ServeMux's error handler: gRPC status → HTTP status
// with runtime's standard mapping (InvalidArgument and FailedPrecondition
// 400, NotFound 404, AlreadyExists and Aborted 409, Unavailable 503,
// Unimplemented 501, ...), body {code, message, details}.
func (g *gateway) handleError(ctx context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errEmptyStream) {
		// A stream that ended before its first event: 204 tells an
		// EventSource there is nothing to reconnect for.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	httpStatus := 0
	var he *runtime.HTTPStatusError
	if errors.As(err, &he) {
		httpStatus, err = he.HTTPStatus, he.Err
	}
	orig := status.Convert(err)
	st := jsonFieldNames(orig)
	if from, ok := r.Context().Value(cursorFromKey{}).(string); ok {
		st = renameField(st, "afterSequence", from)
	}
	if st.Code() == codes.ResourceExhausted && strings.HasPrefix(st.Message(), tooLargeAnswer) {
		// Not the caller's quota: a service answered more than the
		// gateway's gRPC client takes (grpcx.Dial's 32 MiB).
		httpStatus = http.StatusBadGateway
		st = status.New(codes.Internal, "the service's answer is larger than the gateway takes"+
			strings.TrimSuffix(strings.TrimPrefix(st.Message(), tooLargeAnswer), ")")+" bytes); ask for less (a narrower query, a smaller page)")
	}
	if p, ok := principalFrom(r.Context()); ok && p.Tenant == "" && orig.Code() == codes.InvalidArgument && orig.Message() == operatorNoTenant {
		// An operator key (or X-Tenant-Id: * without keys) has no tenant
		// of its own: say where the request names one.
		st = status.Convert(grpcx.InvalidArgument("scope.tenantId", "is required: an operator key (tenant *, or X-Tenant-Id: * without keys) acts for no tenant "+
			"of its own; name the tenant of this request in scope.tenantId (in the body, or ?scope.tenantId= on a GET), or use a tenant's key"))
	}
	if httpStatus == 0 {
		httpStatus = runtime.HTTPStatusFromCode(st.Code())
	}
	if httpStatus >= 500 && st.Code() != codes.Unimplemented {
		g.log.WarnContext(ctx, "request failed", "method", r.Method, "path", r.URL.Path, "http_status", httpStatus, "code", st.Code().String(), "error", st.Message())
	}
	writeStatus(w, httpStatus, st)
}

// operatorNoTenant is the services' refusal of a request without a
// tenant (grpcx.Scope).
const operatorNoTenant = "scope.tenant_id: is required"

// tooLargeAnswer begins the status grpc-go's client gives an answer over
// its receive limit: "grpc: received message larger than max (N vs. M)".
const tooLargeAnswer = "grpc: received message larger than max"

// handleRoutingError answers unknown paths with 404 and known paths with the
// wrong method with 405, in the same JSON error shape.
func (g *gateway) handleRoutingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	code := codes.Internal
	switch httpStatus {
	case http.StatusBadRequest:
		code = codes.InvalidArgument
	case http.StatusNotFound:
		code = codes.NotFound
	case http.StatusMethodNotAllowed:
		code = codes.Unimplemented
	}
	msg := http.StatusText(httpStatus) + ": " + r.Method + " " + r.URL.Path
	if httpStatus == http.StatusMethodNotAllowed {
		// RFC 9110: a 405 says which methods the resource takes.
		if allow := strings.Join(g.routes.methods(r.URL.Path), ", "); allow != "" {
			w.Header().Set("Allow", allow)
			msg += " (it takes " + allow + ")"
		}
	}
	err := status.Error(code, msg)
	g.handleError(ctx, mux, m, w, r, &runtime.HTTPStatusError{HTTPStatus: httpStatus, Err: err})
}
