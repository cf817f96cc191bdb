package grpcapi_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intake"
)

// runs records the extractor runs of every indexer of a test.
type runs struct {
	mu      sync.Mutex
	started []string    // the instances, in the order they started a run
	at      []time.Time // when
}

// recording is an extractor that records its runs; the first blocks until
// its context ends (its worker's attempt is cancelled).
type recording struct {
	instance string
	r        *runs
}

func (recording) Name() string                     { return "recording" }
func (recording) SchemaVersion() int               { return 1 }
func (recording) CanHandle(*extract.Document) bool { return true }
func (e recording) Extract(ctx context.Context, _ *extract.Document) ([]extract.Extract, error) {
	e.r.mu.Lock()
	e.r.started = append(e.r.started, e.instance)
	e.r.at = append(e.r.at, time.Now())
	first := len(e.r.started) == 1
	e.r.mu.Unlock()
	if first {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, nil
}

func (r *runs) snapshot() ([]string, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.started...), append([]time.Time(nil), r.at...)
}

// TestJobClaimAcrossReplicas: two indexers on one database and one NATS,
// as two replicas. While one runs an extraction job, deliveries of the
// same job to either replica wait instead of running the extractors; when
// the one running it dies, the other takes over within a few seconds and
// the job succeeds, its extractors run once per holder.
func TestJobClaimAcrossReplicas(t *testing.T) {
	t.Parallel()
	const ttl = 1500 * time.Millisecond
	ctx := context.Background()
	in := newInfra(t)
	rec := &runs{}
	// The work item as the consumers receive it, to deliver it again.
	nc, err := nats.Connect(in.nats.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	workMsgs := make(chan *nats.Msg, 16)
	if _, err := nc.ChanSubscribe(events.WorkSubject(intake.ExtractionQueue), workMsgs); err != nil {
		t.Fatal(err)
	}
	replicas := map[string]*harness{}
	for _, name := range []string{"a", "b"} {
		replicas[name] = startWith(t, in, startOptions{extractors: []extract.Extractor{recording{instance: name, r: rec}}, leaseTTL: ttl, instance: name, ownDir: true})
	}
	sc := scope("acme", "")
	res := replicas["a"].ingest(t, sc, wiki, "https://x/runbook", "Runbook", "Restart the ledger when payments time out.")
	var work commonv1.Event
	select {
	case m := <-workMsgs:
		if err := proto.Unmarshal(m.Data, &work); err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no work item published")
	}
	testkit.Eventually(t, 20*time.Second, func() bool { s, _ := rec.snapshot(); return len(s) == 1 }, "the job's first run")
	started, _ := rec.snapshot()
	holder := replicas[started[0]]
	other := replicas[map[string]string{"a": "b", "b": "a"}[started[0]]]

	// Deliveries of the job while it runs: to the other replica, and to the
	// holder itself (another of its workers).
	type result struct {
		replica *harness
		err     error
	}
	results := make(chan result, 2)
	for _, h := range []*harness{other, holder} {
		go func() {
			err := h.svc.HandleJob(ctx, &events.Delivery{Event: &work, Subject: events.WorkSubject(intake.ExtractionQueue), NumDelivered: 2})
			results <- result{h, err}
		}()
	}
	// The holder renews its claim past several lapses of the first TTL;
	// meanwhile nothing else runs the extractors.
	claims := holder.db.Collection("indexer_claims")
	var first time.Time
	testkit.Eventually(t, 20*time.Second, func() bool {
		if s, _ := rec.snapshot(); len(s) != 1 {
			t.Fatalf("the extractors ran %d times while the first run held the job: %v", len(s), s)
		}
		var c struct {
			Until time.Time `bson:"until"`
		}
		if err := claims.FindOne(ctx, map[string]any{"_id": "job/" + res.GetExtractionJobId() + "/000001"}).Decode(&c); err != nil {
			return false
		}
		if first.IsZero() {
			first = c.Until
		}
		return c.Until.After(first.Add(2 * ttl))
	}, "the holder's claim renewed past two TTLs")
	if s, _ := rec.snapshot(); len(s) != 1 {
		t.Fatalf("the extractors ran %d times while the first run held the job: %v", len(s), s)
	}
	select {
	case r := <-results:
		t.Fatalf("a second delivery returned while the job ran: %v", r.err)
	default:
	}

	// The holder dies: its database and NATS connections go.
	killed := time.Now()
	if err := holder.db.Client().Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	holder.bus.Close()
	testkit.Eventually(t, 20*time.Second, func() bool { s, _ := rec.snapshot(); return len(s) == 2 }, "a takeover")
	started, at := rec.snapshot()
	if started[1] != other.instanceName {
		t.Fatalf("runs by %v; want the second by %s", started, other.instanceName)
	}
	if took := at[1].Sub(killed); took > 3*ttl {
		t.Fatalf("taken over %v after the holder died; want within %v", took, 3*ttl)
	} else {
		t.Logf("taken over %v after the holder died (lease TTL %v)", took.Round(time.Millisecond), ttl)
	}
	job := other.job(t, sc, res.GetExtractionJobId())
	if job.GetStatus() != indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED {
		t.Fatalf("job after the takeover: %v", job)
	}
	// The waiting delivery to the survivor ran it; the dead holder's ended
	// with an error (its database is gone). No third run.
	for range 2 {
		r := <-results
		if r.replica == other && r.err != nil {
			t.Fatalf("the survivor's delivery: %v", r.err)
		}
	}
	if s, _ := rec.snapshot(); len(s) != 2 {
		t.Fatalf("extractor runs %v; want one per holder", s)
	}
	// A late delivery of the ended job is acknowledged without a run.
	if err := other.svc.HandleJob(ctx, &events.Delivery{Event: &work, NumDelivered: 3}); err != nil {
		t.Fatal(err)
	}
	if s, _ := rec.snapshot(); len(s) != 2 {
		t.Fatalf("a delivery of the ended job ran the extractors: %v", s)
	}
	doc, err := other.docs.GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: sc, DocumentId: res.GetDocument().GetId()})
	if err != nil || doc.GetDocument().GetExtractionStatus() != indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED {
		t.Fatalf("document after the takeover: %v, %v", doc, err)
	}
}
