package openaiapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/frontdoor"
)

// apiError is OpenAI's error object. Param and Code are null when unknown,
// as OpenAI sends them.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// errorBody is the response body of a failed request, and the data of the
// event that ends a stream that failed after it started.
type errorBody struct {
	Error apiError `json:"error"`
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// WriteStatus answers with httpStatus and st as an OpenAI error object: the
// gateway's authentication and body limits use it on these routes, so
// that every failure an OpenAI SDK sees has the shape it parses.
func WriteStatus(w http.ResponseWriter, httpStatus int, st *status.Status) {
	e := describe(st)
	if httpStatus == 0 {
		httpStatus = e.status
	}
	writeError(w, httpStatus, e)
}

// failure is an error as this API reports it.
type failure struct {
	status     int
	body       apiError
	retryAfter time.Duration
	header     http.Header // set on the response: Allow of a 405, Accept-Encoding of a 415
}

// noRetry returns the header that keeps the official OpenAI SDKs from
// retrying a 5xx answer: they retry every 5xx (twice by default) unless
// its x-should-retry header says "false".
func noRetry() http.Header { return http.Header{"X-Should-Retry": {"false"}} }

// statusError is a failure the API decides itself, with a status of its
// own (a paramError is always 400).
type statusError struct{ f failure }

func (e *statusError) Error() string { return e.f.body.Message }

// describe maps a ModelService status to the HTTP status and error object
// an OpenAI client expects. The status follows the gRPC code, refined by
// the ErrorInfo reason where the code alone would blame the wrong side: a
// model answer that failed its schema (FAILED_PRECONDITION) is the
// server's failure, not a bad request.
func describe(st *status.Status) failure {
	f := failure{}
	var reason, field string
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		case *errdetails.BadRequest:
			if v := d.GetFieldViolations(); len(v) > 0 {
				field = v[0].GetField()
			}
		case *errdetails.RetryInfo:
			f.retryAfter = d.GetRetryDelay().AsDuration()
		}
	}
	msg := st.Message()
	param := ""
	if field != "" {
		param = openAIParam(field)
		if rest, ok := strings.CutPrefix(msg, field+":"); ok {
			msg = param + ":" + rest
		}
	}
	typ, code := "", strings.ToLower(reason)
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange:
		f.status, typ = http.StatusBadRequest, "invalid_request_error"
	case codes.Unauthenticated:
		f.status, typ = http.StatusUnauthorized, "authentication_error"
		if code == "" {
			code = "invalid_api_key"
		}
	case codes.PermissionDenied:
		f.status, typ = http.StatusForbidden, "permission_error"
	case codes.NotFound:
		f.status, typ = http.StatusNotFound, "invalid_request_error"
		if reason == "UNKNOWN_MODEL" || reason == "PROVIDER_MODEL_NOT_FOUND" {
			code, param = "model_not_found", "model"
		}
	case codes.ResourceExhausted:
		f.status, typ = http.StatusTooManyRequests, "rate_limit_error"
		if code == "" || reason == "PROVIDER_RATE_LIMITED" {
			code = "rate_limit_exceeded"
		}
	case codes.FailedPrecondition:
		switch reason {
		case "SCHEMA_VALIDATION_FAILED", "PROVIDER_AUTH_FAILED":
			// The model answered unusably after the gateway's repair
			// attempt, or the mesh's own provider credentials are wrong:
			// nothing the caller can fix, and the same request again
			// would only cost more model calls.
			f.status, typ = http.StatusInternalServerError, "server_error"
			f.header = noRetry()
		default:
			f.status, typ = http.StatusBadRequest, "invalid_request_error"
		}
	case codes.Unavailable:
		f.status, typ = http.StatusServiceUnavailable, "service_unavailable_error"
		if reason == "" {
			// The model gateway itself could not be reached: gRPC's
			// message names its address, which is not the caller's to see.
			msg = "the model service is unavailable; try again shortly"
		}
	case codes.DeadlineExceeded:
		f.status, typ = http.StatusGatewayTimeout, "timeout_error"
	case codes.Unimplemented:
		f.status, typ = http.StatusNotImplemented, "invalid_request_error"
		f.header = noRetry()
	case codes.Canceled:
		f.status, typ = 499, "invalid_request_error" // the client went away; nobody reads it
	default:
		f.status, typ = http.StatusInternalServerError, "server_error"
		if st.Code() == codes.Internal || st.Code() == codes.Unknown {
			msg = "internal error"
		}
	}
	f.body = apiError{Message: msg, Type: typ, Param: strPtr(param), Code: strPtr(code)}
	return f
}

// failureOf describes any error a handler meets: a statusError, a
// paramError, or a gRPC status from ModelService.
func failureOf(err error) failure {
	var se *statusError
	if errors.As(err, &se) {
		return se.f
	}
	var pe *paramError
	if errors.As(err, &pe) {
		return failure{status: http.StatusBadRequest, body: apiError{Message: pe.Error(), Type: "invalid_request_error", Param: strPtr(pe.param)}}
	}
	return describe(status.Convert(err))
}

// writeError writes f as the response. Retry-After (whole seconds, rounded
// up) and retry-after-ms pass on how long the provider asked callers to
// wait; OpenAI's SDKs read either before retrying.
func writeError(w http.ResponseWriter, httpStatus int, f failure) {
	h := w.Header()
	for k, v := range f.header {
		h[k] = v
	}
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if f.retryAfter > 0 {
		frontdoor.SetRetryAfter(h, f.retryAfter)
	}
	w.WriteHeader(httpStatus)
	b, _ := json.Marshal(errorBody{Error: f.body})
	_, _ = w.Write(append(b, '\n'))
}

// paramRenames turn ModelService's field paths (proto names) into the
// OpenAI parameters they were decoded from, first match wins.
var paramRenames = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`^request\.`), ""}, // ChatStreamRequest wraps the ChatRequest
	{regexp.MustCompile(`^options\.`), ""},
	{regexp.MustCompile(`^thinking\..*`), "reasoning_effort"},
	{regexp.MustCompile(`^tools\[(\d+)\]\.name$`), "tools[$1].function.name"},
	{regexp.MustCompile(`^tools\[(\d+)\]\.description$`), "tools[$1].function.description"},
	{regexp.MustCompile(`^tools\[(\d+)\]\.parameters_json_schema$`), "tools[$1].function.parameters"},
	{regexp.MustCompile(`^tool_choice\.name$`), "tool_choice.function.name"},
	{regexp.MustCompile(`^tool_choice\.mode$`), "tool_choice"},
	{regexp.MustCompile(`^response_format\.json_schema$`), "response_format.json_schema.schema"},
	{regexp.MustCompile(`^response_format\.schema_name$`), "response_format.json_schema.name"},
	{regexp.MustCompile(`^messages\[(\d+)\]\.tool_calls\[(\d+)\]\.arguments_json$`), "messages[$1].tool_calls[$2].function.arguments"},
	{regexp.MustCompile(`^messages\[(\d+)\]\.tool_calls\[(\d+)\]\.name$`), "messages[$1].tool_calls[$2].function.name"},
	{regexp.MustCompile(`^messages\[(\d+)\]\.images.*`), "messages[$1].content"},
	{regexp.MustCompile(`^messages\[(\d+)\]\.reasoning$`), "messages[$1].reasoning_content"},
	{regexp.MustCompile(`^inputs`), "input"},
}

// openAIParam renames a ModelService field path to its OpenAI parameter.
func openAIParam(field string) string {
	for _, r := range paramRenames {
		if r.re.MatchString(field) {
			field = r.re.ReplaceAllString(field, r.repl)
			if r.repl != "" { // a prefix strip goes on to the next rules
				return field
			}
		}
	}
	return field
}
