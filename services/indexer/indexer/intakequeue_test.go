package indexer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intakequeue"
)

// TestIntakeWorkQueue sends intakes as another system would, on
// am.work.indexer.intake in the mesh's envelope: one lands as one
// document with one intake, however often it is published or delivered;
// each message that can never be ingested is dead-lettered on its first
// delivery with the reason, and nothing of it is stored.
func TestIntakeWorkQueue(t *testing.T) {
	t.Parallel()
	uri, db := testkit.MongoURI(t)
	natsSrv := testkit.NewNATS(t)
	conn, _ := startRun(t, testEnv(t, uri, db, natsSrv.URL()))
	docs := indexerv1.NewDocumentServiceClient(conn)
	js := jetStream(t, natsSrv.URL())
	ctx := context.Background()
	subject := events.WorkSubject(intakequeue.Queue)
	// publish stores data on the queue as message msgID (Nats-Msg-Id).
	publish := func(data []byte, msgID string) {
		t.Helper()
		msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, msgID)
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	envelope := func(sc *commonv1.Scope, payload proto.Message) *commonv1.Event {
		t.Helper()
		ev, err := events.NewEvent(intakequeue.EventType, "helpdesk", sc, "", payload)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	encode := func(ev *commonv1.Event) []byte {
		t.Helper()
		data, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	queue := &commonv1.Scope{TenantId: "acme", ProjectId: "queue"}
	list := func(sc *commonv1.Scope) []*indexerv1.Document {
		t.Helper()
		r, err := docs.ListDocuments(ctx, &indexerv1.ListDocumentsRequest{Scope: sc})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetDocuments()
	}
	// idle waits until the queue's consumer has nothing pending or unacknowledged.
	idle := func() {
		t.Helper()
		testkit.Eventually(t, 20*time.Second, func() bool {
			c, err := js.Consumer(ctx, events.StreamWork, intakequeue.Durable)
			if err != nil {
				return false
			}
			info, err := c.Info(ctx)
			return err == nil && info.NumPending == 0 && info.NumAckPending == 0
		}, "the intake queue is drained")
	}

	ticket := envelope(queue, &indexerv1.IngestDocumentRequest{SourceType: indexerv1.SourceType_SOURCE_TYPE_TICKET,
		SourceUrl: "https://jira.example.com/PAY-9", Title: "PAY-9 Ledger timeout",
		RawContent: "Status: Open\nPriority: High\nIssue type: Bug\n\nThe ledger times out for card payments since the 2.4 deploy."})
	publish(encode(ticket), ticket.GetId())
	publish(encode(ticket), ticket.GetId()) // published again: stored once
	var doc *indexerv1.Document
	testkit.Eventually(t, 20*time.Second, func() bool {
		ds := list(queue)
		if len(ds) != 1 {
			return false
		}
		r, err := docs.GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: queue, DocumentId: ds[0].GetId()})
		doc = r.GetDocument()
		return err == nil && doc.GetPipeline().GetFinished()
	}, "the queued ticket ingested and its pipeline finished")
	if doc.GetSourceUrl() != "https://jira.example.com/PAY-9" || doc.GetPipeline().GetContentType().GetType() != indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_JIRA {
		t.Errorf("document %s %v: want the ticket, typed JIRA", doc.GetSourceUrl(), doc.GetPipeline().GetContentType())
	}
	// The same event delivered again (as after a crash between the
	// ingest and the ack): no second intake.
	publish(encode(ticket), ticket.GetId()+"/redelivered")
	idle()

	// Bad messages, each with the reason it must be dead-lettered for.
	noTenant := envelope(&commonv1.Scope{}, &indexerv1.IngestDocumentRequest{SourceType: indexerv1.SourceType_SOURCE_TYPE_OTHER, RawContent: "orphan"})
	wrongType := envelope(queue, &commonv1.Scope{TenantId: "acme"})
	noContent := envelope(queue, &indexerv1.IngestDocumentRequest{SourceType: indexerv1.SourceType_SOURCE_TYPE_OTHER, Title: "empty"})
	noSourceType := envelope(queue, &indexerv1.IngestDocumentRequest{RawContent: "typeless"})
	otherTenant := envelope(queue, &indexerv1.IngestDocumentRequest{Scope: &commonv1.Scope{TenantId: "globex"}, SourceType: indexerv1.SourceType_SOURCE_TYPE_OTHER, RawContent: "smuggled"})
	badURL := envelope(queue, &indexerv1.IngestDocumentRequest{SourceType: indexerv1.SourceType_SOURCE_TYPE_OTHER, SourceUrl: "not a url", RawContent: "text"})
	brokenMail := envelope(queue, &indexerv1.IngestDocumentRequest{SourceType: indexerv1.SourceType_SOURCE_TYPE_EMAIL, RawContent: "From: a@example.com\nSubject: hi\nContent-Type: multipart/mixed; boundary=\"b\"\n\n--b\nContent-Type: text/plain\nContent-Transfer-Encoding: base64\n\n!!!not base64!!!\n--b--\n"})
	bad := []struct {
		msgID  string
		data   []byte
		reason string
	}{
		{"garbage", []byte("\xff\x00 not an envelope"), "decode event"},
		{noTenant.GetId(), encode(noTenant), "scope.tenant_id is required"},
		{wrongType.GetId(), encode(wrongType), "payload must be a agentmesh.indexer.v1.IngestDocumentRequest"},
		{noContent.GetId(), encode(noContent), "raw_content"},
		{noSourceType.GetId(), encode(noSourceType), "source_type"},
		{otherTenant.GetId(), encode(otherTenant), "differs from the envelope"},
		{badURL.GetId(), encode(badURL), "source_url"},
		{brokenMail.GetId(), encode(brokenMail), "not a well-formed e-mail"},
	}
	for _, b := range bad {
		publish(b.data, b.msgID)
	}
	idle()

	dead := map[string]nats.Header{}
	dlq, err := js.OrderedConsumer(ctx, events.StreamDeadLetter, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.DeadLetterSubject(subject)}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := dlq.Fetch(len(bad)+1, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		dead[m.Headers().Get(events.HeaderDLQMsgID)] = m.Headers()
	}
	if len(dead) != len(bad) {
		t.Errorf("%d dead letters, want %d: %v", len(dead), len(bad), dead)
	}
	for _, b := range bad {
		h := dead[b.msgID]
		if reason := h.Get(events.HeaderDLQReason); !strings.Contains(reason, b.reason) || h.Get(events.HeaderDLQDeliveries) != "1" {
			t.Errorf("%s: dead-letter reason %q after %s deliveries, want it about %q after 1", b.msgID, reason, h.Get(events.HeaderDLQDeliveries), b.reason)
		}
	}

	// One document, one intake: one extraction job queued, one finished event.
	if ds := list(queue); len(ds) != 1 {
		t.Errorf("%d documents in acme/queue, want the ticket alone", len(ds))
	}
	if ds := list(&commonv1.Scope{TenantId: "globex"}); len(ds) != 0 {
		t.Errorf("%d documents in globex, want none", len(ds))
	}
	stream, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	for subject, want := range map[string]uint64{
		events.EventSubject("acme", "intake", doc.GetId(), "finished"): 1,
		"am.evt.acme.extraction_job.*.queued":                          1,
	} {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, c := range info.State.Subjects {
			n += c
		}
		if n != want {
			t.Errorf("%d events on %s, want %d", n, subject, want)
		}
	}
}
