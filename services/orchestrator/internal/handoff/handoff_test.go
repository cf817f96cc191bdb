package handoff

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentmesh/agentmesh/libs/config"
	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobservice"
)

// liftedEvent is the indexer's lifted_up event of one routing of doc.
func liftedEvent(t *testing.T, doc *indexerv1.Document, eventID string) *commonv1.Event {
	t.Helper()
	ev, err := events.NewEvent("document.lifted_up", "indexer", doc.GetScope(), doc.GetId(), &indexerv1.DocumentIndexed{Document: doc})
	if err != nil {
		t.Fatal(err)
	}
	ev.Id = eventID
	return ev
}

// TestLiftedDocumentStartsOneAnalysis: a lifted_up event starts one
// analysis, with the id the document shows and an input naming the
// document, even when the handler dies between the submit and the ack
// (the event is redelivered) and when the document is lifted again by a
// re-run extraction (another event naming the same job).
func TestLiftedDocumentStartsOneAnalysis(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, natsSrv := testkit.MongoDB(t), testkit.NewNATS(t)
	bus, err := events.Connect(ctx, natsSrv.URL(), "handoff-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	if err := bus.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	var cfg jobservice.Config
	if err := config.Load("", &cfg, config.Map(map[string]string{"ANALYSIS_DOCUMENT_TOOLS": "false"})); err != nil {
		t.Fatal(err)
	}
	// No model gateway: the analyses fail at planning, which is no
	// concern here; that they exist, once each, is.
	gw, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	jobs, err := jobservice.Start(ctx, cfg, jobservice.Deps{DB: db, Bus: bus, ModelGateway: gw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(jobs.Stop)

	h := New(jobs.Engine(), nil)
	var mu sync.Mutex
	var submits []string // guarded by mu: the job id of every submit that returned
	h.afterSubmit = func(j *analysis.Job) error {
		mu.Lock()
		defer mu.Unlock()
		submits = append(submits, j.ID)
		if len(submits) == 1 {
			return errors.New("killed between the submit and the ack")
		}
		return nil
	}
	consumer, err := Start(ctx, bus, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(consumer.Stop)

	sc := &commonv1.Scope{TenantId: "acme", ProjectId: "ops"}
	const jobID = "0195f3a2-7c4e-8d11-9a0b-3c5d7e9f1a2b"
	doc := &indexerv1.Document{Id: "doc_0123", Scope: sc, Title: "ledger.log", ContentType: "log", SourceUrl: "file:///var/log/ledger.log",
		Routing: indexerv1.Routing_ROUTING_LIFT_UP, RoutingReason: "log with 7 error line(s): needs analysis", LiftedJobId: jobID}
	subject := events.EventSubject("acme", "document", doc.GetId(), "lifted_up")
	for _, id := range []string{"doc_0123:lifted_up:xj_1", "doc_0123:lifted_up:xj_2"} {
		if _, err := bus.Publish(ctx, subject, liftedEvent(t, doc, id)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(submits) == 3
	}, "the first event handled twice (redelivered after the failure), the second once")

	list, _, err := jobs.Engine().List(ctx, analysis.ListQuery{Tenant: "acme", Project: "ops", Type: analysis.TypeAnalysis, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != jobID {
		var ids []string
		for _, j := range list {
			ids = append(ids, j.ID)
		}
		t.Fatalf("analyses %v, want exactly %s", ids, jobID)
	}
	var input map[string]any
	if err := json.Unmarshal([]byte(list[0].InputJSON), &input); err != nil {
		t.Fatal(err)
	}
	if input["document_id"] != doc.GetId() || input["query"] == "" || input["routing_reason"] != doc.GetRoutingReason() {
		t.Errorf("job input %v: want it to name the document", input)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range submits {
		if id != jobID {
			t.Errorf("a submit returned job %s, want %s every time", id, jobID)
		}
	}
}

// An event that names no document is dead-lettered at once: retrying it
// cannot help.
func TestLiftedEventWithoutDocumentIsPermanent(t *testing.T) {
	t.Parallel()
	h := New(nil, nil)
	ev := liftedEvent(t, &indexerv1.Document{Scope: &commonv1.Scope{TenantId: "acme"}}, "x:lifted_up:1")
	if err := h.Handle(context.Background(), &events.Delivery{Event: ev}); !events.IsPermanent(err) {
		t.Fatalf("Handle = %v, want a permanent error", err)
	}
}
