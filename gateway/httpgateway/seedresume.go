package httpgateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// resumeLastEventID maps an SSE client's reconnect onto ResumeRun, whose
// route takes its fields from the body: on POST
// /agents/classificationAgent/runs/{runId}/resume the Last-Event-ID header
// (or a lastEventId query parameter) becomes the body's afterSequence,
// unless the body sets it. Run event ids are sequences within their run, so
// the resumed stream replays exactly the events after that one.
func resumeLastEventID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimSpace(r.URL.Query().Get("lastEventId"))
		if id == "" {
			id = strings.TrimSpace(r.Header.Get("Last-Event-ID"))
		}
		if id == "" || r.Method != http.MethodPost || !isResumePath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		if _, err := strconv.ParseUint(id, 10, 64); err != nil {
			writeStatus(w, http.StatusBadRequest, status.Convert(grpcx.InvalidArgument("Last-Event-ID", "must be the id of an event of this run (a sequence number)")))
			return
		}
		var body []byte
		if r.Body != nil {
			var err error
			if body, err = io.ReadAll(r.Body); err != nil {
				writeStatus(w, http.StatusBadRequest, status.Newf(codes.InvalidArgument, "reading body: %v", err))
				return
			}
		}
		fields := map[string]json.RawMessage{}
		if len(bytes.TrimSpace(body)) == 0 || json.Unmarshal(body, &fields) == nil {
			// An explicit afterSequence wins; a body that is no JSON object
			// is left for the handler to refuse.
			if fields["afterSequence"] == nil && fields["after_sequence"] == nil {
				fields["afterSequence"], _ = json.Marshal(id)
				body, _ = json.Marshal(fields)
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

func isResumePath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/agents/classificationAgent/runs/")
	if !ok {
		return false
	}
	id, ok := strings.CutSuffix(rest, "/resume")
	return ok && id != "" && !strings.Contains(id, "/")
}
