package httpgateway_test

import (
	"context"
	"net/http"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

// TestChatTurnEventIDs: the events of a streamed turn carry their sequence
// as SSE id, and GET .../turns/{turn}:watch resumes the turn after the
// Last-Event-ID with the same ids and names; a watch that has nothing to
// send is 204, an unknown turn 404.
func TestChatTurnEventIDs(t *testing.T) {
	t.Parallel()
	type resp = orchestratorv1.StreamMessageResponse
	turn := []*resp{
		{Sequence: 5, Event: &orchestratorv1.StreamMessageResponse_TurnStarted{TurnStarted: &orchestratorv1.TurnStarted{TurnId: "t1", ConversationId: "c1", Resumable: true}}},
		{Sequence: 7, Event: &orchestratorv1.StreamMessageResponse_ResponseChunk{ResponseChunk: &orchestratorv1.ResponseChunk{Content: "Hel", Iteration: 1}}},
		{Sequence: 9, Event: &orchestratorv1.StreamMessageResponse_ResponseChunk{ResponseChunk: &orchestratorv1.ResponseChunk{Content: "lo", Iteration: 1}}},
		{Sequence: 12, Event: &orchestratorv1.StreamMessageResponse_Completed{Completed: &orchestratorv1.Completed{Iterations: 1, MessageId: "m1"}}},
	}
	requests := make(chan *orchestratorv1.WatchTurnRequest, 4)
	m := startMesh(t, httpgateway.Config{}, fakes{conversations: &conversationFake{
		stream: func(_ *orchestratorv1.StreamMessageRequest, s grpc.ServerStreamingServer[resp]) error {
			for _, ev := range turn {
				if err := s.Send(ev); err != nil {
					return err
				}
			}
			return nil
		},
		watch: func(r *orchestratorv1.WatchTurnRequest, s grpc.ServerStreamingServer[orchestratorv1.WatchTurnResponse]) error {
			requests <- r
			if r.GetTurnId() != "t1" {
				return status.Error(codes.NotFound, "turn_id: no such turn")
			}
			for _, ev := range turn {
				if ev.GetSequence() > r.GetAfterSequence() {
					if err := s.Send(&orchestratorv1.WatchTurnResponse{Event: ev}); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}})
	want := []struct{ id, name string }{{"5", "TurnStarted"}, {"7", "ResponseChunk"}, {"9", "ResponseChunk"}, {"12", "Completed"}}

	r := send(t, context.Background(), "POST", m.url+"/v1/conversations/c1/messages:stream", `{"content":"hi"}`, map[string]string{"Accept": "text/event-stream"})
	events := readEvents(r.Body)
	for _, w := range want {
		ev, ok := nextEvent(t, events)
		if !ok || ev.id != w.id || ev.name != w.name {
			t.Fatalf("stream event = %+v, want id %s name %s", ev, w.id, w.name)
		}
	}
	_ = r.Body.Close()

	r = send(t, context.Background(), "GET", m.url+"/v1/conversations/c1/turns/t1:watch", "", map[string]string{"Accept": "text/event-stream", "Last-Event-ID": "7"})
	if req := waitFor(t, requests, "WatchTurn"); req.GetAfterSequence() != 7 || req.GetConversationId() != "c1" || req.GetTurnId() != "t1" {
		t.Fatalf("WatchTurn request = %v, want c1/t1 after 7", req)
	}
	events = readEvents(r.Body)
	for _, w := range want[2:] {
		ev, ok := nextEvent(t, events)
		if !ok || ev.id != w.id || ev.name != w.name {
			t.Fatalf("watch event = %+v, want id %s name %s", ev, w.id, w.name)
		}
	}
	if ev, ok := nextEvent(t, events); ok {
		t.Errorf("watch sent %+v after the turn's end", ev)
	}
	_ = r.Body.Close()

	for _, tc := range []struct {
		name, path string
		header     map[string]string
		code       int
	}{
		{"client holds the last event", "/v1/conversations/c1/turns/t1:watch", map[string]string{"Last-Event-ID": "12"}, http.StatusNoContent},
		{"unknown turn", "/v1/conversations/c1/turns/nope:watch", nil, http.StatusNotFound},
	} {
		resp, body := do(t, "GET", m.url+tc.path, "", tc.header)
		waitFor(t, requests, "WatchTurn")
		if resp.StatusCode != tc.code {
			t.Errorf("%s: status %d, want %d: %s", tc.name, resp.StatusCode, tc.code, body)
		}
	}
}
