package httpgateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// chatTurn streams one chat-loop turn; it sends the first event, then waits
// for release before sending the rest, so a test can prove events arrive
// one by one rather than at the end.
func chatTurn(release <-chan struct{}) func(*orchestratorv1.StreamMessageRequest, grpc.ServerStreamingServer[orchestratorv1.StreamMessageResponse]) error {
	type resp = orchestratorv1.StreamMessageResponse
	return func(r *orchestratorv1.StreamMessageRequest, s grpc.ServerStreamingServer[resp]) error {
		if r.GetConversationId() != "c1" || r.GetContent() != "hi" {
			return status.Errorf(codes.InvalidArgument, "unexpected request %v", r)
		}
		events := []*resp{
			{Event: &orchestratorv1.StreamMessageResponse_StatusUpdate{StatusUpdate: &orchestratorv1.StatusUpdate{Kind: "retrieval_skipped", Message: "indexer unavailable"}}},
			{Event: &orchestratorv1.StreamMessageResponse_ReasoningChunk{ReasoningChunk: &orchestratorv1.ReasoningChunk{Content: "think", Iteration: 1}}},
			{Event: &orchestratorv1.StreamMessageResponse_ToolCallStart{ToolCallStart: &orchestratorv1.ToolCallStart{CallId: "t1", ToolName: "rag_search", ArgumentsJson: `{"q":"x"}`, Iteration: 1}}},
			{Event: &orchestratorv1.StreamMessageResponse_ToolCallResult{ToolCallResult: &orchestratorv1.ToolCallResult{CallId: "t1", ToolName: "rag_search", Result: "[]", Duration: durationpb.New(1500 * time.Millisecond)}}},
			{Event: &orchestratorv1.StreamMessageResponse_ResponseChunk{ResponseChunk: &orchestratorv1.ResponseChunk{Content: "Hel", Iteration: 2}}},
			{Event: &orchestratorv1.StreamMessageResponse_ResponseChunk{ResponseChunk: &orchestratorv1.ResponseChunk{Content: "lo\nworld", Iteration: 2}}},
			{Event: &orchestratorv1.StreamMessageResponse_Error{Error: &orchestratorv1.ErrorEvent{Code: "UNAVAILABLE", Message: "tool flaked"}}},
			{Event: &orchestratorv1.StreamMessageResponse_Completed{Completed: &orchestratorv1.Completed{Iterations: 2, TotalTokens: 42, MessageId: "m9"}}},
		}
		for i, e := range events {
			if err := s.Send(e); err != nil {
				return err
			}
			if i == 0 {
				select {
				case <-release:
				case <-s.Context().Done():
					return s.Context().Err()
				}
			}
		}
		return nil
	}
}

func TestStreamMessageIsServerSentEvents(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	m := startMesh(t, httpgateway.Config{}, fakes{conversations: &conversationFake{stream: chatTurn(release)}})

	resp := send(t, context.Background(), "POST", m.url+"/v1/conversations/c1/messages:stream", `{"content":"hi"}`,
		map[string]string{"Accept": "text/event-stream"})
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-cache" {
		t.Errorf("Cache-Control = %q", cc)
	}
	events := readEvents(resp.Body)

	// The first event arrives while the service still holds the rest back.
	first, ok := nextEvent(t, events)
	if !ok || first.name != "StatusUpdate" {
		t.Fatalf("first event = %+v", first)
	}
	close(release)

	rest := allEvents(t, events)
	var names []string
	for _, ev := range append([]event{first}, rest...) {
		names = append(names, ev.name)
		if ev.id != "" {
			t.Errorf("%s has id %q; chat events carry no sequence", ev.name, ev.id)
		}
	}
	want := []string{"StatusUpdate", "ReasoningChunk", "ToolCallStart", "ToolCallResult", "ResponseChunk", "ResponseChunk", "Error", "Completed"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("event names = %v, want %v", names, want)
	}
	checks := map[int]map[string]any{
		-1: {"kind": "retrieval_skipped", "message": "indexer unavailable"},
		2:  {"callId": "t1", "toolName": "rag_search", "result": "[]", "duration": "1.500s"},
		3:  {"content": "Hel", "iteration": float64(2)},
		4:  {"content": "lo\nworld", "iteration": float64(2)},
		5:  {"code": "UNAVAILABLE", "message": "tool flaked"},
		6:  {"iterations": float64(2), "totalTokens": "42", "messageId": "m9"},
	}
	for i, wantData := range checks {
		ev := first
		if i >= 0 {
			ev = rest[i]
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(ev.data), &got); err != nil {
			t.Fatalf("%s data is not JSON: %q", ev.name, ev.data)
		}
		if !reflect.DeepEqual(got, wantData) {
			t.Errorf("%s data = %v, want %v", ev.name, got, wantData)
		}
	}
}

func TestStreamsAreSSEWhateverTheAcceptHeaderUnlessNDJSON(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	close(release)
	m := startMesh(t, httpgateway.Config{}, fakes{conversations: &conversationFake{stream: chatTurn(release)}})
	url := m.url + "/v1/conversations/c1/messages:stream"

	for _, accept := range []string{"", "application/json", "*/*"} {
		resp := send(t, context.Background(), "POST", url, `{"content":"hi"}`, map[string]string{"Accept": accept})
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("Accept %q: Content-Type %q", accept, ct)
		}
		if n := len(allEvents(t, readEvents(resp.Body))); n != 8 {
			t.Errorf("Accept %q: %d events, want 8", accept, n)
		}
		resp.Body.Close()
	}

	resp := send(t, context.Background(), "POST", url, `{"content":"hi"}`, map[string]string{"Accept": "application/x-ndjson"})
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	var lines int
	for sc.Scan() {
		var line struct {
			Result map[string]any `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line.Result == nil {
			t.Fatalf("line %d is not {\"result\": ...}: %s", lines+1, sc.Bytes())
		}
		lines++
	}
	if lines != 8 {
		t.Fatalf("%d lines, want 8", lines)
	}
}

func TestChatStreamEventsAndStreamErrors(t *testing.T) {
	t.Parallel()
	m := startMesh(t, httpgateway.Config{}, fakes{model: &modelFake{
		stream: func(r *modelv1.ChatStreamRequest, s grpc.ServerStreamingServer[modelv1.ChatStreamResponse]) error {
			for _, c := range []*modelv1.ChatStreamResponse{
				{Chunk: &modelv1.ChatStreamResponse_ReasoningDelta{ReasoningDelta: "hmm"}},
				{Chunk: &modelv1.ChatStreamResponse_ContentDelta{ContentDelta: "Hi \"there\""}},
				{Chunk: &modelv1.ChatStreamResponse_ToolCall{ToolCall: &modelv1.ToolCall{Id: "c1", Name: "f", ArgumentsJson: "{}"}}},
			} {
				if err := s.Send(c); err != nil {
					return err
				}
			}
			if r.GetRequest().GetModel() == "broken" {
				return grpcx.Errorf(codes.Unavailable, "PROVIDER_ERROR", "provider went away")
			}
			return s.Send(&modelv1.ChatStreamResponse{Chunk: &modelv1.ChatStreamResponse_End{End: &modelv1.StreamEnd{FinishReason: modelv1.FinishReason_FINISH_REASON_STOP}}})
		},
	}})

	cases := []struct {
		model     string
		wantNames []string
		wantLast  string
	}{
		{"chat", []string{"reasoning_delta", "content_delta", "tool_call", "end"}, `{"finishReason":"FINISH_REASON_STOP"}`},
		{"broken", []string{"reasoning_delta", "content_delta", "tool_call", "error"}, `{"code":14,"message":"provider went away"}`},
	}
	for _, tc := range cases {
		resp := send(t, context.Background(), "POST", m.url+"/v1/models:chatStream", `{"request":{"model":"`+tc.model+`","messages":[{"role":"ROLE_USER","content":"hi"}]}}`, nil)
		evs := allEvents(t, readEvents(resp.Body))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", tc.model, resp.StatusCode)
		}
		var names []string
		for _, ev := range evs {
			names = append(names, ev.name)
		}
		if !reflect.DeepEqual(names, tc.wantNames) {
			t.Fatalf("%s: names %v, want %v", tc.model, names, tc.wantNames)
		}
		if evs[1].data != `"Hi \"there\""` {
			t.Errorf("content_delta data = %s", evs[1].data)
		}
		if last := evs[len(evs)-1].data; !jsonEqual(t, last, tc.wantLast) {
			t.Errorf("%s: last data = %s, want %s", tc.model, last, tc.wantLast)
		}
	}
}

func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("not JSON: %s", a)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("not JSON: %s", b)
	}
	return reflect.DeepEqual(x, y)
}

// jobWatcher answers WatchJob with events after the requested sequence,
// then holds the stream open until the client goes away, reporting the
// request and the cancellation.
func jobWatcher(requests chan<- *orchestratorv1.WatchJobRequest, cancelled chan<- struct{}, hold <-chan struct{}) *jobFake {
	return &jobFake{watch: func(r *orchestratorv1.WatchJobRequest, s grpc.ServerStreamingServer[orchestratorv1.WatchJobResponse]) error {
		requests <- r
		if hold != nil {
			<-hold
		}
		for i, st := range []orchestratorv1.JobStatus{orchestratorv1.JobStatus_JOB_STATUS_RUNNING, orchestratorv1.JobStatus_JOB_STATUS_WAITING_FOR_CHILDREN} {
			seq := r.GetAfterSequence() + uint64(i) + 1
			if err := s.Send(&orchestratorv1.WatchJobResponse{Sequence: seq, Event: &orchestratorv1.JobEvent{
				RootId: r.GetJobId(), Job: &orchestratorv1.Job{Id: r.GetJobId(), Status: st},
			}}); err != nil {
				return err
			}
		}
		<-s.Context().Done()
		close(cancelled)
		return s.Context().Err()
	}}
}

func TestWatchJobReplaysFromLastEventID(t *testing.T) {
	t.Parallel()
	requests := make(chan *orchestratorv1.WatchJobRequest, 1)
	cancelled := make(chan struct{})
	m := startMesh(t, httpgateway.Config{}, fakes{jobs: jobWatcher(requests, cancelled, nil)})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := send(t, ctx, "GET", m.url+"/v1/jobs/j1:watch", "", map[string]string{"Last-Event-ID": "7", "Accept": "text/event-stream"})
	defer resp.Body.Close()
	if r := waitFor(t, requests, "WatchJob"); r.GetAfterSequence() != 7 || r.GetJobId() != "j1" {
		t.Fatalf("request = %v, want after_sequence 7", r)
	}
	events := readEvents(resp.Body)
	for _, want := range []struct{ id, name string }{{"8", "job.running"}, {"9", "job.waiting_for_children"}} {
		ev, ok := nextEvent(t, events)
		if !ok || ev.id != want.id || ev.name != want.name {
			t.Fatalf("event = %+v, want id %s name %s", ev, want.id, want.name)
		}
		if !jsonEqual(t, ev.data, `{"job":{"id":"j1","status":"`+strings.ToUpper("JOB_STATUS_"+strings.TrimPrefix(want.name, "job."))+`"},"rootId":"j1"}`) {
			t.Errorf("data = %s", ev.data)
		}
	}

	// The client goes away: the service's stream is cancelled.
	cancel()
	waitFor(t, cancelled, "the WatchJob stream to be cancelled after the client disconnected")
}

func TestLastEventIDVariants(t *testing.T) {
	t.Parallel()
	requests := make(chan *orchestratorv1.WatchJobRequest, 1)
	m := startMesh(t, httpgateway.Config{}, fakes{jobs: &jobFake{watch: func(r *orchestratorv1.WatchJobRequest, _ grpc.ServerStreamingServer[orchestratorv1.WatchJobResponse]) error {
		requests <- r
		return nil
	}}})
	cases := []struct {
		name, query string
		header      map[string]string
		want        uint64
		wantHTTP    int
	}{
		{"query lastEventId", "?lastEventId=12", nil, 12, http.StatusNoContent},
		// An EventSource opened on a URL with afterSequence reconnects to
		// that URL with the id of the last event it got, which came after
		// the URL's: that id is where it is, whichever number is larger
		// (event ids are not ordered).
		{"Last-Event-ID beside the URL's afterSequence", "?afterSequence=3", map[string]string{"Last-Event-ID": "12"}, 12, http.StatusNoContent},
		{"a smaller Last-Event-ID beside the URL's afterSequence", "?afterSequence=30", map[string]string{"Last-Event-ID": "12"}, 12, http.StatusNoContent},
		{"lastEventId beside the URL's after_sequence", "?after_sequence=3&lastEventId=7", nil, 7, http.StatusNoContent},
		{"no id", "", nil, 0, http.StatusNoContent},
	}
	for _, tc := range cases {
		resp, body := do(t, "GET", m.url+"/v1/jobs/j1:watch"+tc.query, "", tc.header)
		// A stream that ends before any event is 204: EventSource stops reconnecting.
		if resp.StatusCode != tc.wantHTTP {
			t.Fatalf("%s: status %d: %s", tc.name, resp.StatusCode, body)
		}
		if r := waitFor(t, requests, "WatchJob"); r.GetAfterSequence() != tc.want {
			t.Fatalf("%s: after_sequence %d, want %d", tc.name, r.GetAfterSequence(), tc.want)
		}
	}
	resp, body := do(t, "GET", m.url+"/v1/jobs/j1:watch", "", map[string]string{"Last-Event-ID": "abc"})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "Last-Event-ID") {
		t.Fatalf("bad Last-Event-ID: status %d: %s", resp.StatusCode, body)
	}
	if resp, body := do(t, "GET", m.url+"/v1/jobs/j1:watch?lastEventId=abc", "", nil); resp.StatusCode != http.StatusBadRequest ||
		!strings.Contains(string(body), `"lastEventId: must be the id of an event`) {
		t.Fatalf("bad lastEventId: status %d: %s", resp.StatusCode, body)
	}
}

// TestRefusedLastEventIDIsNamedAsSent: an id the service refuses (one past
// the stream's events) is named as the client sent it, Last-Event-ID or
// lastEventId, not as the afterSequence the gateway made of it; a URL's
// own afterSequence keeps its name.
func TestRefusedLastEventIDIsNamedAsSent(t *testing.T) {
	t.Parallel()
	m := startMesh(t, httpgateway.Config{}, fakes{jobs: &jobFake{watch: func(r *orchestratorv1.WatchJobRequest, _ grpc.ServerStreamingServer[orchestratorv1.WatchJobResponse]) error {
		return grpcx.InvalidArgument("after_sequence", "%d is past the last event of this job's stream", r.GetAfterSequence())
	}}})
	for _, tc := range []struct {
		query  string
		header map[string]string
		field  string
	}{
		{"", map[string]string{"Last-Event-ID": "99"}, "Last-Event-ID"},
		{"?afterSequence=3", map[string]string{"Last-Event-ID": "99"}, "Last-Event-ID"},
		{"?lastEventId=99", nil, "lastEventId"},
		{"?afterSequence=99", nil, "afterSequence"},
	} {
		resp, body := do(t, "GET", m.url+"/v1/jobs/j1:watch"+tc.query, "", tc.header)
		var got struct {
			Message string
			Details []struct{ FieldViolations []struct{ Field string } }
		}
		_ = json.Unmarshal(body, &got)
		if resp.StatusCode != http.StatusBadRequest || got.Message != tc.field+": 99 is past the last event of this job's stream" ||
			len(got.Details) != 1 || len(got.Details[0].FieldViolations) != 1 || got.Details[0].FieldViolations[0].Field != tc.field {
			t.Errorf("%s %v: %d %s; want 400 naming %s", tc.query, tc.header, resp.StatusCode, body, tc.field)
		}
	}
}

func TestIdleStreamsGetKeepAlives(t *testing.T) {
	t.Parallel()
	requests := make(chan *orchestratorv1.WatchJobRequest, 1)
	cancelled := make(chan struct{})
	hold := make(chan struct{})
	m := startMesh(t, httpgateway.Config{SSEKeepAlive: 50 * time.Millisecond}, fakes{jobs: jobWatcher(requests, cancelled, hold)})

	// The service takes its time to send anything: the client still gets the
	// stream's headers and keep-alives at once.
	resp := send(t, context.Background(), "GET", m.url+"/v1/jobs/j1:watch", "", nil)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := readEvents(resp.Body)
	if ev := waitFor(t, events, "a keep-alive before the first event"); ev.comment != "keep-alive" {
		t.Fatalf("got %+v, want a keep-alive comment", ev)
	}
	close(hold)
	if ev, _ := nextEvent(t, events); ev.name != "job.running" {
		t.Fatalf("first event = %+v", ev)
	}
	// Idle again after the events: more keep-alives.
	if _, ok := nextEvent(t, events); !ok {
		t.Fatal("stream ended")
	}
	for {
		ev := waitFor(t, events, "a keep-alive while idle")
		if ev.comment == "keep-alive" {
			break
		}
	}
}

func TestClassifierRunStreamsAsTheOriginalAgent(t *testing.T) {
	t.Parallel()
	commands := make(chan *classifierv1.SendCommandRequest, 4)
	data := func(v any) *structpb.Value {
		s, err := structpb.NewValue(v)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	runEvents := []*classifierv1.RunEvent{
		{Type: "agent.run.started", LogMessage: "Classification agent started successfully", RunId: "r1", Sequence: 1},
		{Type: "agent.run.plan_summary.delta", Data: data("## Classification Plan\n\nTarget: 50"), RunId: "r1", Sequence: 2},
		{Type: "agent.run.awaiting_fetch_approval", LogMessage: "Waiting for approval of fetched data (8 conversations)", RunId: "r1", Sequence: 3,
			Data: data(map[string]any{"plan": map[string]any{"targetSampleSize": 35}, "fetchedData": map[string]any{"conversationCount": 8}})},
	}
	m := startMesh(t, httpgateway.Config{}, fakes{classifier: &classifierFake{
		start: func(r *classifierv1.StartRunRequest, s grpc.ServerStreamingServer[classifierv1.StartRunResponse]) error {
			if r.GetInstruction() != "Classify last week" {
				return status.Errorf(codes.InvalidArgument, "instruction %q", r.GetInstruction())
			}
			for _, e := range runEvents {
				if err := s.Send(&classifierv1.StartRunResponse{Event: e}); err != nil {
					return err
				}
			}
			return nil
		},
		command: func(r *classifierv1.SendCommandRequest, s grpc.ServerStreamingServer[classifierv1.SendCommandResponse]) error {
			commands <- r
			return s.Send(&classifierv1.SendCommandResponse{Event: &classifierv1.RunEvent{Type: "agent.run.classifying.started", LogMessage: "Classifying 8 conversations...", Sequence: 4}})
		},
	}})

	resp := send(t, context.Background(), "POST", m.url+"/agents/classificationAgent/runs", `{"instruction":"Classify last week"}`, nil)
	evs := allEvents(t, readEvents(resp.Body))
	resp.Body.Close()
	want := []event{
		{id: "1", name: "agent.run.started", data: `{"type":"agent.run.started","logMessage":"Classification agent started successfully"}`},
		{id: "2", name: "agent.run.plan_summary.delta", data: `{"type":"agent.run.plan_summary.delta","data":"## Classification Plan\n\nTarget: 50"}`},
		{id: "3", name: "agent.run.awaiting_fetch_approval", data: `{"type":"agent.run.awaiting_fetch_approval","logMessage":"Waiting for approval of fetched data (8 conversations)","data":{"plan":{"targetSampleSize":35},"fetchedData":{"conversationCount":8}}}`},
	}
	if len(evs) != len(want) {
		t.Fatalf("events = %+v", evs)
	}
	for i := range want {
		if evs[i].id != want[i].id || evs[i].name != want[i].name || !jsonEqual(t, evs[i].data, want[i].data) {
			t.Errorf("event %d = %+v\nwant %+v", i, evs[i], want[i])
		}
	}

	// The original agent's clients send {"type": "ApproveFetch"}.
	for _, body := range []string{`{"type":"ApproveFetch"}`, `{"type":"COMMAND_TYPE_REJECT_FETCH","feedback":"wider"}`} {
		resp := send(t, context.Background(), "POST", m.url+"/agents/classificationAgent/runs/r1/command", body, nil)
		evs := allEvents(t, readEvents(resp.Body))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(evs) != 1 || evs[0].name != "agent.run.classifying.started" {
			t.Fatalf("%s: status %d, events %+v", body, resp.StatusCode, evs)
		}
	}
	if r := waitFor(t, commands, "SendCommand"); r.GetType() != classifierv1.CommandType_COMMAND_TYPE_APPROVE_FETCH || r.GetRunId() != "r1" {
		t.Fatalf("command = %v", r)
	}
	if r := waitFor(t, commands, "SendCommand"); r.GetType() != classifierv1.CommandType_COMMAND_TYPE_REJECT_FETCH || r.GetFeedback() != "wider" {
		t.Fatalf("command = %v", r)
	}
}
