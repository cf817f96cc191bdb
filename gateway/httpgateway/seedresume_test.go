package httpgateway_test

import (
	"net/http"
	"testing"

	"google.golang.org/grpc"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
)

// An SSE client reconnecting to a classification run sends the last event
// id it saw; the resume replays from there: Last-Event-ID (or lastEventId)
// becomes ResumeRun's after_sequence, unless the body names a later one.
func TestResumeTakesLastEventID(t *testing.T) {
	t.Parallel()
	requests := make(chan *classifierv1.ResumeRunRequest, 1)
	m := startMesh(t, httpgateway.Config{}, fakes{classifier: &classifierFake{
		resume: func(r *classifierv1.ResumeRunRequest, s grpc.ServerStreamingServer[classifierv1.ResumeRunResponse]) error {
			requests <- r
			return s.Send(&classifierv1.ResumeRunResponse{Event: &classifierv1.RunEvent{Type: "agent.run.resumed", RunId: r.GetRunId(), Sequence: r.GetAfterSequence() + 1}})
		},
	}})
	cases := []struct {
		name, query, body string
		header            map[string]string
		want              uint64
		status            int
	}{
		{"header, no body", "", "", map[string]string{"Last-Event-ID": "7"}, 7, http.StatusOK},
		{"header, empty object", "", `{}`, map[string]string{"Last-Event-ID": " 12 "}, 12, http.StatusOK},
		{"query parameter", "?lastEventId=3", "", nil, 3, http.StatusOK},
		{"a later header than the body's afterSequence", "", `{"afterSequence":"2"}`, map[string]string{"Last-Event-ID": "9"}, 9, http.StatusOK},
		{"an earlier header than the body's afterSequence", "", `{"afterSequence":"30"}`, map[string]string{"Last-Event-ID": "9"}, 30, http.StatusOK},
		{"a later header than the body's after_sequence, a number", "", `{"after_sequence":4}`, map[string]string{"Last-Event-ID": "9"}, 9, http.StatusOK},
		{"a null afterSequence", "", `{"afterSequence":null}`, map[string]string{"Last-Event-ID": "9"}, 9, http.StatusOK},
		{"a body's afterSequence that is no sequence", "", `{"afterSequence":"x"}`, map[string]string{"Last-Event-ID": "9"}, 0, http.StatusBadRequest},
		{"a null body", "", `null`, map[string]string{"Last-Event-ID": "9"}, 0, http.StatusBadRequest},
		{"no id", "", "", nil, 0, http.StatusOK},
		{"not a sequence", "", "", map[string]string{"Last-Event-ID": "abc"}, 0, http.StatusBadRequest},
		{"negative", "", "", map[string]string{"Last-Event-ID": "-1"}, 0, http.StatusBadRequest},
	}
	for _, tc := range cases {
		resp, body := do(t, "POST", m.url+"/agents/classificationAgent/runs/r1/resume"+tc.query, tc.body, tc.header)
		if resp.StatusCode != tc.status {
			t.Fatalf("%s: status %d: %s", tc.name, resp.StatusCode, body)
		}
		if tc.status != http.StatusOK {
			continue
		}
		if r := waitFor(t, requests, "ResumeRun"); r.GetAfterSequence() != tc.want || r.GetRunId() != "r1" {
			t.Fatalf("%s: request %v, want after_sequence %d", tc.name, r, tc.want)
		}
	}

}
