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
// unless the body sets a later one: a client reconnecting sends the body
// it first sent with the id of the last event it got, so the later of the
// two is where it is (as on the GET watch routes). Run event ids are
// sequences within their run, so the resumed stream replays exactly the
// events after that one.
func resumeLastEventID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, from := lastEventID(r, r.URL.Query())
		if id == "" || r.Method != http.MethodPost || !isResumePath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		last, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, status.Convert(grpcx.InvalidArgument(from, "must be the id of an event of this run (a sequence number)")))
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
		// (A null body unmarshals as a nil map: no object either.)
		if len(bytes.TrimSpace(body)) == 0 || json.Unmarshal(body, &fields) == nil && fields != nil {
			// A body that is no JSON object, or whose afterSequence is no
			// sequence, is left for the handler to refuse.
			name := "afterSequence"
			if fields[name] == nil && fields["after_sequence"] != nil {
				name = "after_sequence"
			}
			if after, set, ok := jsonSequence(fields[name]); ok && (!set || last > after) {
				fields[name], _ = json.Marshal(id)
				body, _ = json.Marshal(fields)
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// jsonSequence reads a uint64 field of a JSON body, as protojson writes it
// (a string) or accepts it (a number too): set is false for an absent or
// null field, ok false for a value that is no sequence.
func jsonSequence(v json.RawMessage) (n uint64, set, ok bool) {
	if v == nil || string(bytes.TrimSpace(v)) == "null" {
		return 0, false, true
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		s = string(bytes.TrimSpace(v))
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, true, err == nil
}

func isResumePath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/agents/classificationAgent/runs/")
	if !ok {
		return false
	}
	id, ok := strings.CutSuffix(rest, "/resume")
	return ok && id != "" && !strings.Contains(id, "/")
}
