package openaiapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// ModelService's field paths become the OpenAI parameters they came from.
func TestOpenAIParam(t *testing.T) {
	t.Parallel()
	for field, want := range map[string]string{
		"model":                                    "model",
		"options.temperature":                      "temperature",
		"request.options.max_tokens":               "max_tokens",
		"request.messages[3].tool_call_id":         "messages[3].tool_call_id",
		"messages[2].tool_calls[1].arguments_json": "messages[2].tool_calls[1].function.arguments",
		"messages[0].images[1].mime_type":          "messages[0].content",
		"messages[4].reasoning":                    "messages[4].reasoning_content",
		"tools[12].name":                           "tools[12].function.name",
		"tools[0].parameters_json_schema":          "tools[0].function.parameters",
		"request.tool_choice.name":                 "tool_choice.function.name",
		"tool_choice.mode":                         "tool_choice",
		"response_format.json_schema":              "response_format.json_schema.schema",
		"thinking.effort":                          "reasoning_effort",
		"inputs[7]":                                "input[7]",
		"inputs":                                   "input",
		"options.stop[2]":                          "stop[2]",
	} {
		if got := openAIParam(field); got != want {
			t.Errorf("openAIParam(%q) = %q, want %q", field, got, want)
		}
	}
}

// Statuses map to OpenAI's error types and HTTP statuses; the message
// names the OpenAI parameter; Retry-After comes from RetryInfo.
func TestDescribe(t *testing.T) {
	t.Parallel()
	limited, _ := status.New(codes.ResourceExhausted, "rate limited").WithDetails(
		&errdetails.ErrorInfo{Reason: "PROVIDER_RATE_LIMITED"}, &errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)})
	for _, tc := range []struct {
		name       string
		st         *status.Status
		httpStatus int
		typ, param string
		message    string
	}{
		{"field", status.Convert(grpcx.InvalidArgument("options.top_p", "must be at most 1")), 400, "invalid_request_error", "top_p", "top_p: must be at most 1"},
		{"rate limited", limited, 429, "rate_limit_error", "", "rate limited"},
		{"schema", status.Convert(grpcx.Errorf(codes.FailedPrecondition, "SCHEMA_VALIDATION_FAILED", "no")), 500, "server_error", "", "no"},
		{"unsupported by the provider", status.Convert(grpcx.Errorf(codes.FailedPrecondition, "PROVIDER_UNSUPPORTED", "no images")), 400, "invalid_request_error", "", "no images"},
		{"internal hides its message", status.New(codes.Internal, "nil pointer at x.go:12"), 500, "server_error", "", "internal error"},
		{"no provider", status.Convert(grpcx.Errorf(codes.Unavailable, "NO_PROVIDER", "no provider for chat")), 503, "service_unavailable_error", "", "no provider for chat"},
		{"model gateway unreachable", status.New(codes.Unavailable, `connection error: desc = "transport: dial tcp 10.1.2.3:9091: connect: connection refused"`), 503,
			"service_unavailable_error", "", "the model service is unavailable; try again shortly"},
	} {
		f := describe(tc.st)
		if f.status != tc.httpStatus || f.body.Type != tc.typ || derefOr(f.body.Param) != tc.param || f.body.Message != tc.message {
			t.Errorf("%s: got %d %q %q %q", tc.name, f.status, f.body.Type, derefOr(f.body.Param), f.body.Message)
		}
	}
	// The SDKs retry 5xx unless told not to: not where the gateway has
	// retried already (the schema's repair) or a retry cannot help.
	for _, tc := range []struct {
		st    *status.Status
		retry string
	}{
		{status.Convert(grpcx.Errorf(codes.FailedPrecondition, "SCHEMA_VALIDATION_FAILED", "no")), "false"},
		{status.Convert(grpcx.Errorf(codes.FailedPrecondition, "PROVIDER_AUTH_FAILED", "no")), "false"},
		{status.New(codes.Unimplemented, "no"), "false"},
		{status.Convert(grpcx.Errorf(codes.Unavailable, "NO_PROVIDER", "no provider for chat")), ""},
		{status.New(codes.Internal, "x"), ""},
		{limited, ""},
	} {
		f := describe(tc.st)
		rec := httptest.NewRecorder()
		writeError(rec, f.status, f)
		if got := rec.Header().Get("X-Should-Retry"); got != tc.retry {
			t.Errorf("%v: x-should-retry %q, want %q", tc.st.Code(), got, tc.retry)
		}
	}
	f := describe(limited)
	if f.retryAfter != 1500*time.Millisecond {
		t.Fatalf("retryAfter %v", f.retryAfter)
	}
	rec := httptest.NewRecorder()
	writeError(rec, f.status, f)
	if h := rec.Header(); rec.Code != http.StatusTooManyRequests || h.Get("Retry-After") != "2" || h.Get("Retry-After-Ms") != "1500" {
		t.Errorf("%d %v: Retry-After rounds up to whole seconds", rec.Code, h)
	}
}

func derefOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
