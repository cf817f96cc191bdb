package orchestrator_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat/chattest"
)

// sseEvent is one event as a browser's EventSource dispatches it.
type sseEvent struct {
	ID, Event, Data string
}

// readEventSource parses a text/event-stream body the way the HTML
// EventSource does: lines end in LF, CR or CRLF; a line starting with ':'
// is a comment; "field: value" drops one leading space from the value; data
// lines are joined with "\n"; a blank line dispatches the event (type
// "message" when no event field was set), unless its data is empty. Events
// go to the channel, which closes at the end of the body.
func readEventSource(body io.Reader) <-chan sseEvent {
	out := make(chan sseEvent, 64)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
			for i, c := range data {
				switch c {
				case '\n':
					return i + 1, data[:i], nil
				case '\r':
					if i+1 < len(data) {
						if data[i+1] == '\n' {
							return i + 2, data[:i], nil
						}
						return i + 1, data[:i], nil
					}
					if atEOF {
						return i + 1, data[:i], nil
					}
					return 0, nil, nil // need the next byte to know if it is CRLF
				}
			}
			if atEOF && len(data) > 0 {
				return len(data), data, nil
			}
			return 0, nil, nil
		})
		var ev sseEvent
		var data []string
		lastID := ""
		for sc.Scan() {
			line := sc.Text()
			if line == "" {
				if len(data) > 0 {
					ev.Data = strings.Join(data, "\n")
					if ev.Event == "" {
						ev.Event = "message"
					}
					ev.ID = lastID
					out <- ev
				}
				ev, data = sseEvent{}, nil
				continue
			}
			if strings.HasPrefix(line, ":") {
				continue
			}
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				ev.Event = value
			case "data":
				data = append(data, value)
			case "id":
				if !strings.Contains(value, "\x00") {
					lastID = value
				}
			}
		}
	}()
	return out
}

// startGateway serves the HTTP gateway (open development mode) in front of
// the orchestrator at conn; every other backend is an address nobody
// serves.
func startGateway(t *testing.T, orch *grpc.ClientConn) string {
	t.Helper()
	dial := func(addr string) *grpc.ClientConn {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	nobody := dial(chattest.UnreachableAddr(t))
	h, err := httpgateway.Handler(&httpgateway.Config{SSEKeepAlive: time.Second}, httpgateway.Backends{
		Model: nobody, Orchestrator: orch, Vision: nobody, Indexer: nobody, Classifier: nobody, SQLAgent: nobody,
	}, nil, nil)
	if err != nil {
		t.Fatalf("httpgateway.Handler: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func get(t *testing.T, ctx context.Context, url string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-Tenant-Id", "acme")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp
}

func post(t *testing.T, ctx context.Context, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream") // what EventSource-style clients send
	req.Header.Set("X-Tenant-Id", "acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp
}

// TestSSEThroughGateway drives a turn end to end as a browser would: REST
// to create the conversation, then POST .../messages:stream read as an
// EventSource, through the real gateway, the orchestrator started with Run,
// and the real model gateway in front of the simulator. Every event has its
// stream sequence as id, and GET .../turns/{turn}:watch with Last-Event-ID
// sends exactly the events after it. A second message while the first
// streams is refused, and the client going away cancels the turn once no
// one resumed it within ORCHESTRATOR_TURN_RESUME_GRACE.
func TestSSEThroughGateway(t *testing.T) {
	t.Parallel()
	model := chattest.StartModel(t, providersim.Options{Flavor: providersim.DeepSeek, ChunkRunes: 4})
	model.Sim.When(providersim.Match{LastRole: "user", LastUserContains: "policy"}).
		Reasoning("Search first.").ToolCall("rag_search", map[string]any{"query": "leave policy"})
	model.Sim.When(providersim.Match{LastRole: "tool"}).Text("The knowledge base is down, so I cannot quote the policy.")
	model.Sim.When(providersim.Match{LastUserContains: "slow"}).Text("This answer streams until the client leaves.").Hang()
	model.Sim.When(providersim.Match{}).Text("ok")

	uri, db := testkit.MongoURI(t)
	natsURL := testkit.NewNATS(t).URL()
	conn, err := runOrchestrator(t, map[string]string{
		"MONGO_URI": uri, "MONGO_DATABASE": db, "NATS_URL": natsURL,
		"MODELGATEWAY_ADDR": model.Conn.Target(), "INDEXER_ADDR": chattest.UnreachableAddr(t),
		"ORCHESTRATOR_MODEL": chattest.ModelName, "ORCHESTRATOR_TURN_RESUME_GRACE": "6s",
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	base := startGateway(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	resp := post(t, ctx, base+"/v1/conversations", `{"title":"handbook"}`)
	var created struct {
		Conversation struct{ ID string } `json:"conversation"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&created); err != nil || resp.StatusCode != http.StatusOK || created.Conversation.ID == "" {
		t.Fatalf("create: status %d, %+v, %v", resp.StatusCode, created, err)
	}
	resp.Body.Close()
	streamURL := base + "/v1/conversations/" + created.Conversation.ID + "/messages:stream"

	resp = post(t, ctx, streamURL, `{"content":"What is the leave policy?"}`)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var names []string
	var answer strings.Builder
	var completed struct {
		Iterations int    `json:"iterations"`
		MessageID  string `json:"messageId"`
	}
	var all []sseEvent
	var turnID string
	for ev := range readEventSource(resp.Body) {
		all = append(all, ev)
		var payload map[string]any
		if err := json.Unmarshal([]byte(ev.Data), &payload); err != nil {
			t.Errorf("event %s carries no JSON object: %q", ev.Event, ev.Data)
		}
		if len(names) == 0 || names[len(names)-1] != ev.Event {
			names = append(names, ev.Event)
		}
		switch ev.Event {
		case "ResponseChunk":
			answer.WriteString(payload["content"].(string))
		case "StatusUpdate":
			if payload["kind"] != "retrieval_skipped" {
				t.Errorf("status update %v, want retrieval_skipped", payload)
			}
		case "TurnStarted":
			turnID, _ = payload["turnId"].(string)
		case "Completed":
			_ = json.Unmarshal([]byte(ev.Data), &completed)
		}
	}
	resp.Body.Close()
	want := "TurnStarted,StatusUpdate,ReasoningChunk,ToolCallStart,ToolCallResult,ResponseChunk,Completed"
	if strings.Join(names, ",") != want {
		t.Errorf("event sequence %v, want %s", names, want)
	}
	if answer.String() != "The knowledge base is down, so I cannot quote the policy." || completed.Iterations != 2 || completed.MessageID == "" {
		t.Errorf("answer %q, completed %+v", answer.String(), completed)
	}

	// Every event's id names its stream sequence, in order, without being
	// it; the turn resumed from any of its events' ids gets exactly the rest.
	ids := testkit.EventIDs(t, natsURL)
	var prev uint64
	for i, ev := range all {
		id, err := strconv.ParseUint(ev.ID, 10, 64)
		if seq := ids.Seq(id); err != nil || seq <= prev || seq == id {
			t.Fatalf("event %d (%s) has id %q (sequence %d) after sequence %d, want ids of increasing sequences", i, ev.Event, ev.ID, seq, prev)
		}
		prev = ids.Seq(id)
	}
	watchURL := base + "/v1/conversations/" + created.Conversation.ID + "/turns/" + turnID + ":watch"
	for _, cut := range []int{0, 3, len(all) - 2} {
		r := get(t, ctx, watchURL, map[string]string{"Last-Event-ID": all[cut].ID})
		var rest []sseEvent
		for ev := range readEventSource(r.Body) {
			rest = append(rest, ev)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusOK || !reflect.DeepEqual(rest, all[cut+1:]) {
			t.Errorf("watch after event %d (id %s): HTTP %d, %d events %v, want the %d after it", cut, all[cut].ID, r.StatusCode, len(rest), rest, len(all)-cut-1)
		}
	}
	r := get(t, ctx, watchURL, map[string]string{"Last-Event-ID": all[len(all)-1].ID})
	r.Body.Close()
	if r.StatusCode != http.StatusNoContent {
		t.Errorf("watch after the last event: HTTP %d, want 204 (nothing more, the EventSource stops)", r.StatusCode)
	}
	for _, bad := range []struct {
		url, lastID string
		code        int
		field       string
	}{
		{base + "/v1/conversations/" + created.Conversation.ID + "/turns/not-a-turn:watch", "", http.StatusBadRequest, "turnId: "},
		{base + "/v1/conversations/" + created.Conversation.ID + "/turns/0191c9a0-0000-7000-8000-000000000000:watch", "", http.StatusNotFound, "turnId: "},
		// The id is named as the client sent it, not as the afterSequence
		// the gateway made of it.
		{watchURL, strconv.FormatUint(prev+1, 10), http.StatusBadRequest, "Last-Event-ID: "},
	} {
		h := map[string]string{}
		if bad.lastID != "" {
			h["Last-Event-ID"] = bad.lastID
		}
		r = get(t, ctx, bad.url, h)
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != bad.code || !strings.Contains(string(b), bad.field) {
			t.Errorf("GET %s (Last-Event-ID %q): HTTP %d %s, want %d naming %s", bad.url, bad.lastID, r.StatusCode, b, bad.code, bad.field)
		}
	}

	// A slow turn: while it streams, a second message is refused with the
	// gateway's JSON error; then the client leaves, and as no one resumes
	// the turn, it is cancelled after the grace.
	slowCtx, leave := context.WithCancel(ctx)
	slow := post(t, slowCtx, streamURL, `{"content":"something slow"}`)
	events := readEventSource(slow.Body)
	for ev := range events {
		if ev.Event == "ResponseChunk" {
			break
		}
	}
	busy := post(t, ctx, streamURL, `{"content":"me too"}`)
	var body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	_ = json.NewDecoder(busy.Body).Decode(&body)
	busy.Body.Close()
	if busy.StatusCode != http.StatusConflict || body.Code != 10 || !strings.Contains(body.Message, "already processing a message") {
		t.Errorf("second concurrent message: HTTP %d %+v, want 409 ABORTED (10) saying the conversation is busy", busy.StatusCode, body)
	}
	leave()
	slow.Body.Close()
	testkit.Eventually(t, 20*time.Second, func() bool { return model.Sim.Disconnects() == 1 }, "the model call to be cancelled")

	var got struct {
		Conversation struct {
			Messages []struct {
				Role      string `json:"role"`
				Content   string `json:"content"`
				Cancelled bool   `json:"cancelled"`
			} `json:"messages"`
		} `json:"conversation"`
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/conversations/"+created.Conversation.ID, nil)
		req.Header.Set("X-Tenant-Id", "acme")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer r.Body.Close()
		got.Conversation.Messages = nil
		if json.NewDecoder(r.Body).Decode(&got) != nil {
			return false
		}
		msgs := got.Conversation.Messages
		return len(msgs) == 6 && msgs[5].Cancelled
	}, "the cancelled partial answer to be stored")
	if last := got.Conversation.Messages[5]; last.Role != "assistant" || !strings.HasPrefix("This answer streams until the client leaves.", last.Content) || last.Content == "" {
		t.Errorf("stored partial answer %+v", last)
	}
}
