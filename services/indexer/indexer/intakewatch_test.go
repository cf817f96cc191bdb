package indexer_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// sseEvent is one Server-Sent Event as a client reads it.
type sseEvent struct {
	id, name string
	data     map[string]any
}

// watchIntake opens the intake watch of doc through the gateway at url
// with key (and Last-Event-ID lastID, when set), and reads the stream to
// its end; it fails the test if the stream does not end by itself.
func watchIntake(t *testing.T, url, key, doc, lastID string) (int, []sseEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/documents/"+doc+"/intake:watch", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var evs []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" || cur.data != nil {
				evs = append(evs, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data); err != nil {
				t.Fatalf("event data %q: %v", line, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("the watch did not end by itself: %v (after %d events)", err, len(evs))
	}
	return resp.StatusCode, evs
}

// jetStream is a JetStream client of the NATS server at url, closed at
// the test's end.
func jetStream(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// intakeConsumers counts the consumers of AM_EVENTS reading intake
// events (a watch's replay is an ephemeral one filtered to them).
func intakeConsumers(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	lister := stream.ListConsumers(ctx)
	for info := range lister.Info() {
		if strings.Contains(info.Config.FilterSubject+strings.Join(info.Config.FilterSubjects, " "), ".intake.") {
			n++
		}
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWatchIntakeThroughTheGateway follows a ticket's intake over SSE
// through the real gateway: every phase's event in order, then finished,
// which ends the stream; a resume after a Last-Event-ID gets only what
// follows it; another tenant gets 404; no watch leaves its JetStream
// consumer behind.
func TestWatchIntakeThroughTheGateway(t *testing.T) {
	t.Parallel()
	m := startQualifierMesh(t, func(sim *providersim.Server) {
		sim.When(providersim.Match{JSON: true, WithImages: true}).JSON(map[string]any{"key": "PAY-412", "status": "In Review", "assignee": "Jan Novak"})
		sim.When(providersim.Match{WithImages: true}).Text("A Grafana panel: ledger p99 latency at 30 seconds.")
		sim.When(providersim.Match{Tools: []string{"route_task"}}).ToolCall("route_task", map[string]any{"decision": "DONE", "reason": "informational"})
	})
	url := uploadGateway(t, m)
	js := jetStream(t, m.nats)

	ticket := "Status: In Review\nIssue Type: Story\nAssignee: Jan Novak\nReporter: Ana Novakova\n\nDescription:\nMake the ledger pool size configurable.\n"
	res, err := m.docs.IngestDocument(context.Background(), &indexerv1.IngestDocumentRequest{
		Scope: &commonv1.Scope{TenantId: "acme", ProjectId: "intake"}, SourceType: indexerv1.SourceType_SOURCE_TYPE_TICKET,
		Title: "PAY-412: Configurable ledger pool", RawContent: ticket,
		Attachments: []*indexerv1.Attachment{{Name: "p99.png", MimeType: "image/png", Data: qualifierFixture(t, "panel.png")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetDocument().GetId()

	// Started while the extraction job may still run: live, then ended.
	code, evs := watchIntake(t, url, "k-intake", id, "")
	want := []string{"intake.vision_stage1", "intake.content_type", "intake.vision_stage2", "intake.extraction", "intake.indexing", "intake.routing", "intake.finished"}
	var names []string
	var last uint64
	ids := testkit.EventIDs(t, m.nats)
	for _, ev := range evs {
		names = append(names, ev.name)
		eid, err := strconv.ParseUint(ev.id, 10, 64)
		seq := ids.Seq(eid)
		if err != nil || seq <= last || seq == eid {
			t.Errorf("event %s has id %q (sequence %d) after sequence %d: want ids of increasing sequences, none its own", ev.name, ev.id, seq, last)
		}
		last = seq
		if ev.data["documentId"] != id {
			t.Errorf("event %s is of document %v, want %s", ev.name, ev.data["documentId"], id)
		}
	}
	if code != http.StatusOK || !slices.Equal(names, want) {
		t.Fatalf("status %d, events %v, want %v", code, names, want)
	}
	if p, _ := evs[6].data["pipeline"].(map[string]any); p["finished"] != true || p["routing"] == nil {
		t.Errorf("finished event's pipeline %v: want it finished with routing", p)
	}

	// Resumed after the third event: the other four; after the last: none
	// (204, which stops an EventSource reconnecting).
	if code, rest := watchIntake(t, url, "k-intake", id, evs[2].id); code != http.StatusOK || len(rest) != 4 || rest[0].id != evs[3].id || rest[3].name != "intake.finished" {
		t.Errorf("resumed after %s: status %d, %d events %v", evs[2].id, code, len(rest), rest)
	}
	if code, rest := watchIntake(t, url, "k-intake", id, evs[6].id); code != http.StatusNoContent || len(rest) != 0 {
		t.Errorf("resumed after finished: status %d, events %v", code, rest)
	}
	// After an id beyond every event of the stream, which no watch sent:
	// 400, not the 204 of a client that holds the whole intake.
	if code, rest := watchIntake(t, url, "k-intake", id, "99999999999"); code != http.StatusBadRequest || len(rest) != 0 {
		t.Errorf("resumed after an id beyond the stream: status %d, events %v, want 400", code, rest)
	}

	// Another tenant, or no such document: 404.
	for _, tc := range []struct{ key, doc string }{{"k-other", id}, {"k-intake", "no-such-document"}} {
		if code, evs := watchIntake(t, url, tc.key, tc.doc, ""); code != http.StatusNotFound || len(evs) != 0 {
			t.Errorf("%s watching %s: status %d, events %v, want 404", tc.key, tc.doc, code, evs)
		}
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return intakeConsumers(t, js) == 0 },
		"the watches' consumers are deleted")

	// Deleted, the document takes its intake's events with it: they hold
	// what the pipeline read of it (the panel's summary, the ticket's
	// fields), and no watch may reach them any more.
	intakeSubjects := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stream, err := js.Stream(ctx, events.StreamEvents)
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(events.EntityEventsSubject("acme", "intake", id)))
		if err != nil {
			t.Fatal(err)
		}
		return len(info.State.Subjects)
	}
	if n := intakeSubjects(); n != len(want) {
		t.Fatalf("%d intake subjects of the document before its delete, want %d", n, len(want))
	}
	if _, err := m.docs.DeleteDocument(context.Background(), &indexerv1.DeleteDocumentRequest{
		Scope: &commonv1.Scope{TenantId: "acme", ProjectId: "intake"}, DocumentId: id}); err != nil {
		t.Fatal(err)
	}
	if n := intakeSubjects(); n != 0 {
		t.Errorf("%d intake subjects of the deleted document left in the stream", n)
	}
	if code, evs := watchIntake(t, url, "k-intake", id, ""); code != http.StatusNotFound || len(evs) != 0 {
		t.Errorf("watching the deleted document: status %d, events %v, want 404", code, evs)
	}
}
