package events

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

// job is a domain document that carries its pending events.
type job struct {
	ID     string        `bson:"_id"`
	Status string        `bson:"status"`
	Outbox []OutboxEntry `bson:"outbox,omitempty"`
}

// completeJob is how a domain store uses the outbox: the state change and
// its events in one single-document update.
func completeJob(ctx context.Context, t *testing.T, coll *mongo.Collection, id string, entries ...OutboxEntry) {
	t.Helper()
	update := bson.M{
		"$set":  bson.M{"status": "complete"},
		"$push": OutboxPush(entries...),
	}
	if _, err := coll.UpdateOne(ctx, bson.M{"_id": id}, update, options.UpdateOne().SetUpsert(true)); err != nil {
		t.Fatalf("update job %s: %v", id, err)
	}
}

func newEntry(t *testing.T, jobID, text string) OutboxEntry {
	t.Helper()
	e, err := OutboxEntryFor(EventSubject("acme", "job", jobID, "complete"), testEvent(t, text))
	if err != nil {
		t.Fatalf("OutboxEntryFor: %v", err)
	}
	return e
}

// pendingEntries counts outbox entries left in coll.
func pendingEntries(t *testing.T, coll *mongo.Collection) int {
	t.Helper()
	cur, err := coll.Find(testContext(t), bson.M{})
	if err != nil {
		t.Fatalf("find: %v", err)
	}
	var jobs []job
	if err := cur.All(testContext(t), &jobs); err != nil {
		t.Fatalf("read: %v", err)
	}
	n := 0
	for _, j := range jobs {
		n += len(j.Outbox)
	}
	return n
}

// storedIDs returns the event ids in stream order.
func storedIDs(t *testing.T, b *Bus, stream string) []string {
	t.Helper()
	ctx := testContext(t)
	s, err := b.JetStream().Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		raw, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("GetMsg %d: %v", seq, err)
		}
		ev := &commonv1.Event{}
		if err := proto.Unmarshal(raw.Data, ev); err != nil {
			t.Fatalf("seq %d: %v", seq, err)
		}
		if raw.Header.Get(HeaderMsgID) != ev.GetId() {
			t.Errorf("seq %d: Nats-Msg-Id %q != event id %q", seq, raw.Header.Get(HeaderMsgID), ev.GetId())
		}
		ids = append(ids, ev.GetId())
	}
	return ids
}

func TestOutboxEntryFor(t *testing.T) {
	t.Parallel()
	ev := testEvent(t, "x")
	subject := EventSubject("acme", "job", "j1", "complete")
	e, err := OutboxEntryFor(subject, ev)
	if err != nil {
		t.Fatal(err)
	}
	if e.ID != ev.GetId() || e.Subject != subject {
		t.Errorf("entry = %+v", e)
	}
	got := &commonv1.Event{}
	if err := proto.Unmarshal(e.Data, got); err != nil || got.GetSubject() != subject || got.GetId() != ev.GetId() {
		t.Errorf("entry data decodes to %v, %v", got, err)
	}
	if _, err := OutboxEntryFor("am.evt.>", ev); err == nil {
		t.Error("OutboxEntryFor accepted a wildcard subject")
	}
	if _, err := OutboxEntryFor(subject, &commonv1.Event{}); err == nil {
		t.Error("OutboxEntryFor accepted an event without id")
	}
}

func TestRelayPublishesAndClearsOutbox(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	coll := startFerret(t).Collection("jobs")
	ctx := testContext(t)

	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tctx, span := tp.Tracer("test").Start(ctx, "complete job")
	defer span.End()

	// One document with three events, in order, carrying a trace...
	first := []OutboxEntry{
		newEntry(t, "j0", "a").WithTraceContext(tctx),
		newEntry(t, "j0", "b").WithTraceContext(tctx),
		newEntry(t, "j0", "c").WithTraceContext(tctx),
	}
	completeJob(ctx, t, coll, "j0", first...)
	want := []string{first[0].ID, first[1].ID, first[2].ID}
	// ...and more documents than one sweep page holds.
	for i := 1; i <= relayPageSize+5; i++ {
		id := fmt.Sprintf("j%03d", i)
		e := newEntry(t, id, strconv.Itoa(i))
		completeJob(ctx, t, coll, id, e)
		want = append(want, e.ID)
	}

	r := NewRelay(b, coll, testLogger(t))
	runRelay(t, r)

	waitFor(t, 10*time.Second, "outbox drained", func() bool { return pendingEntries(t, coll) == 0 })
	got := storedIDs(t, b, StreamEvents)
	if len(got) != len(want) {
		t.Fatalf("stream holds %d events, want %d", len(got), len(want))
	}
	gotSet := map[string]bool{}
	for _, id := range got {
		gotSet[id] = true
	}
	for _, id := range want {
		if !gotSet[id] {
			t.Errorf("event %s not published", id)
		}
	}
	// The events of one document keep their order (the first document
	// sorts first, so they lead the stream).
	for i := range first {
		if got[i] != first[i].ID {
			t.Errorf("stream position %d = %s, want %s", i, got[i], first[i].ID)
		}
	}
	// The state change stayed.
	var j job
	if err := coll.FindOne(ctx, bson.M{"_id": "j0"}).Decode(&j); err != nil || j.Status != "complete" {
		t.Errorf("job j0 = %+v, %v", j, err)
	}
	// The trace context travelled through the outbox.
	s, err := b.JetStream().Stream(ctx, StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if tp := raw.Header.Get("traceparent"); tp == "" || !containsTraceID(tp, span.SpanContext().TraceID()) {
		t.Errorf("traceparent = %q, want trace %s", tp, span.SpanContext().TraceID())
	}

	// A later write is picked up promptly after Notify.
	late := newEntry(t, "j0", "late")
	completeJob(ctx, t, coll, "j0", late)
	r.Notify()
	r.Notify() // coalesces, never blocks
	waitFor(t, 5*time.Second, "late entry relayed", func() bool { return pendingEntries(t, coll) == 0 })
	if n := streamMsgs(t, b, StreamEvents); n != uint64(len(want)+1) {
		t.Errorf("stream holds %d events, want %d", n, len(want)+1)
	}
}

func containsTraceID(traceparent string, id trace.TraceID) bool {
	// traceparent: version-traceid-spanid-flags
	return len(traceparent) > 35 && traceparent[3:35] == id.String()
}

func TestRelayRecoversAfterCrashWithoutDuplicates(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	coll := startFerret(t).Collection("jobs")
	ctx := testContext(t)

	entries := []OutboxEntry{newEntry(t, "j1", "a"), newEntry(t, "j1", "b")}
	completeJob(ctx, t, coll, "j1", entries...)

	// Simulate a relay that crashed after publishing but before removing
	// the entries: publish them exactly as the relay does, keep the outbox.
	crashed := NewRelay(b, coll, testLogger(t))
	for _, e := range entries {
		if err := crashed.publish(ctx, e); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	if n := pendingEntries(t, coll); n != 2 {
		t.Fatalf("%d entries pending before recovery, want 2", n)
	}

	// The restarted relay sweeps on start: it re-publishes (deduplicated by
	// event id) and clears the outbox.
	r := NewRelay(b, coll, testLogger(t))
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(runCtx) }()
	waitFor(t, 10*time.Second, "outbox drained", func() bool { return pendingEntries(t, coll) == 0 })
	stop()
	if err := <-ran; err != nil {
		t.Errorf("Run returned %v", err)
	}

	got := storedIDs(t, b, StreamEvents)
	if len(got) != 2 || got[0] != entries[0].ID || got[1] != entries[1].ID {
		t.Fatalf("stream holds %v, want exactly %s, %s", got, entries[0].ID, entries[1].ID)
	}
	// Nothing left: a further sweep publishes nothing.
	if n, err := r.Sweep(ctx); n != 0 || err != nil {
		t.Errorf("Sweep = %d, %v; want 0, nil", n, err)
	}
}

func TestRelayKeepsEntriesItCannotPublish(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	coll := startFerret(t).Collection("jobs")
	ctx := testContext(t)

	good := newEntry(t, "j1", "ok")
	// No stream binds am.nowhere.>: the publish can never be acknowledged.
	ev := testEvent(t, "stuck")
	stuck, err := OutboxEntryFor("am.nowhere.x", ev)
	if err != nil {
		t.Fatal(err)
	}
	after := newEntry(t, "j1", "after")
	completeJob(ctx, t, coll, "j1", good, stuck, after)

	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	n, err := NewRelay(b, coll, testLogger(t)).Sweep(sctx)
	if err == nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1 and an error", n, err)
	}
	var j job
	if err := coll.FindOne(ctx, bson.M{"_id": "j1"}).Decode(&j); err != nil {
		t.Fatal(err)
	}
	if len(j.Outbox) != 2 || j.Outbox[0].ID != stuck.ID || j.Outbox[1].ID != after.ID {
		t.Errorf("outbox after failed sweep = %+v; want the stuck entry and the one after it, in order", j.Outbox)
	}
	if got := storedIDs(t, b, StreamEvents); len(got) != 1 || got[0] != good.ID {
		t.Errorf("stream holds %v, want only %s", got, good.ID)
	}
}

// TestRelayNotifyDocumentPublishesWithoutWaitingForAScan: after the start-up
// sweep, a document named with NotifyDocument is relayed at once, long before
// the next full scan would find it.
func TestRelayNotifyDocumentPublishesWithoutWaitingForAScan(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	coll := startFerret(t).Collection("jobs")
	ctx := testContext(t)

	r := NewRelay(b, coll, testLogger(t))
	runRelay(t, r)

	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("n%02d", i)
		completeJob(ctx, t, coll, id, newEntry(t, id, "x"))
		r.NotifyDocument(id)
	}
	// RelayPollInterval is 5 s; the notified documents must not wait for it.
	waitFor(t, RelayPollInterval/2, "notified documents relayed", func() bool { return streamMsgs(t, b, StreamEvents) == 20 })
	// Removal follows publishing; it too must not wait for a scan.
	waitFor(t, RelayPollInterval/2, "outbox emptied", func() bool { return pendingEntries(t, coll) == 0 })
}

// TestRelayDrainedHook: the drained hook sees each relayed document once its
// outbox is empty — documents found by the start-up sweep, documents named
// afterwards, and a named document with nothing to publish — with one
// document relayed at a time and with several.
func TestRelayDrainedHook(t *testing.T) {
	t.Parallel()
	for _, conc := range []int{1, 4} {
		t.Run(fmt.Sprintf("concurrency_%d", conc), func(t *testing.T) {
			t.Parallel()
			b := newBusWithStreams(t)
			coll := startFerret(t).Collection("jobs")
			ctx := testContext(t)

			completeJob(ctx, t, coll, "before", newEntry(t, "before", "a"), newEntry(t, "before", "b"))
			completeJob(ctx, t, coll, "empty")
			r := NewRelay(b, coll, testLogger(t))
			r.SetConcurrency(conc)
			var (
				mu      sync.Mutex
				drained = map[string]int{}
				early   []string
			)
			r.SetDrained(func(ctx context.Context, id any) error {
				var j job
				if err := coll.FindOne(ctx, bson.M{"_id": id}).Decode(&j); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if len(j.Outbox) > 0 {
					early = append(early, fmt.Sprintf("%v with %d entries", id, len(j.Outbox)))
				}
				drained[id.(string)]++
				return nil
			})
			runRelay(t, r)
			seen := func(id string) func() bool {
				return func() bool {
					mu.Lock()
					defer mu.Unlock()
					return drained[id] > 0
				}
			}
			waitFor(t, RelayPollInterval/2, "document of the start-up sweep drained", seen("before"))
			completeJob(ctx, t, coll, "after", newEntry(t, "after", "c"))
			r.NotifyDocument("after")
			r.NotifyDocument("empty")
			waitFor(t, RelayPollInterval/2, "named document drained", seen("after"))
			waitFor(t, RelayPollInterval/2, "named empty document drained", seen("empty"))
			mu.Lock()
			defer mu.Unlock()
			if len(early) > 0 {
				t.Errorf("drained called before the outbox was empty: %v", early)
			}
			if n := streamMsgs(t, b, StreamEvents); n != 3 {
				t.Errorf("%d events published, want 3", n)
			}
		})
	}
}

// newSingleWriterRelay returns a bus with the mesh's streams, a new "jobs"
// collection, the test's context and a single writer's relay of the
// collection, four documents at a time, configured but not running.
func newSingleWriterRelay(t *testing.T) (*Bus, *mongo.Collection, context.Context, *Relay) {
	t.Helper()
	b := newBusWithStreams(t)
	coll := startFerret(t).Collection("jobs")
	r := NewRelay(b, coll, testLogger(t))
	r.SetSingleWriter()
	r.SetConcurrency(4)
	return b, coll, testContext(t), r
}

// runRelay runs r until the test ends.
func runRelay(t *testing.T, r *Relay) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		<-ran
	})
}

// TestRelayPollInterval: entries nobody names are found by the next full
// sweep, which comes as often as SetPollInterval says.
func TestRelayPollInterval(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	coll := startFerret(t).Collection("jobs")
	ctx := testContext(t)
	r := NewRelay(b, coll, testLogger(t))
	r.SetPollInterval(200 * time.Millisecond)
	runRelay(t, r)
	// After the start-up sweep, written without a Notify.
	time.Sleep(100 * time.Millisecond)
	completeJob(ctx, t, coll, "unnamed", newEntry(t, "unnamed", "x"))
	waitFor(t, RelayPollInterval/2, "unnamed entry found by a sweep", func() bool { return streamMsgs(t, b, StreamEvents) == 1 })
}

// TestRelaySingleWriterPollsRetryFailuresOnly: a single writer's relay
// sweeps at start (more documents than a page), then at each poll relays
// again only the documents whose relay failed — in that sweep or after it,
// each read by _id: a failed publish goes out once it can, the entry after
// it waits, and an entry nobody named (which only a sweep would find) waits
// for the next start.
func TestRelaySingleWriterPollsRetryFailuresOnly(t *testing.T) {
	t.Parallel()
	b, coll, ctx, r := newSingleWriterRelay(t)

	// Stream LATER refuses its entries at first (too large): their
	// publishes fail at once.
	cfg := jetstream.StreamConfig{Name: "LATER", Subjects: []string{"am.later.>"}, MaxMsgSize: 16}
	if _, err := b.JetStream().CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	refused := func(id string) OutboxEntry {
		e, err := OutboxEntryFor("am.later."+id, testEvent(t, "later"))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	const before = relayPageSize + 20
	for i := range before {
		id := fmt.Sprintf("before%03d", i)
		completeJob(ctx, t, coll, id, newEntry(t, id, "a"))
	}
	completeJob(ctx, t, coll, "failing-at-start", refused("s"), newEntry(t, "failing-at-start", "b"))
	r.SetPollInterval(100 * time.Millisecond)
	runRelay(t, r)
	waitFor(t, RelayPollInterval/2, "the start-up sweep's entries published", func() bool { return streamMsgs(t, b, StreamEvents) == before })

	completeJob(ctx, t, coll, "failing", refused("f"), newEntry(t, "failing", "c"))
	var j job
	if err := coll.FindOne(ctx, bson.M{"_id": "failing"}).Decode(&j); err != nil {
		t.Fatal(err)
	}
	r.NotifyEntries("failing", j.Outbox...)
	completeJob(ctx, t, coll, "unnamed", newEntry(t, "unnamed", "x"))
	time.Sleep(300 * time.Millisecond) // polls go by
	if n := streamMsgs(t, b, StreamEvents); n != before {
		t.Fatalf("%d events published before the failed ones could be; want %d (order kept, unnamed left alone)", n, before)
	}
	cfg.MaxMsgSize = -1
	if _, err := b.JetStream().UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, RelayPollInterval/2, "the failed documents relayed by a poll", func() bool {
		return streamMsgs(t, b, "LATER") == 2 && streamMsgs(t, b, StreamEvents) == before+2
	})
	waitFor(t, RelayPollInterval/2, "their outboxes emptied", func() bool { return pendingEntries(t, coll) == 1 })
	time.Sleep(300 * time.Millisecond)
	if n := pendingEntries(t, coll); n != 1 {
		t.Errorf("%d entries pending; want 1: the unnamed one, which a single writer's polls do not scan for", n)
	}
}

// TestRelayWritesNoRemovalToGoneDocuments: a document the store reports
// gone (SetGone) has its entries published but no removal written; the
// others' published entries are removed. The "gone" document is left in
// the collection here, so a removal written to it would show.
func TestRelayWritesNoRemovalToGoneDocuments(t *testing.T) {
	t.Parallel()
	b, coll, ctx, r := newSingleWriterRelay(t)
	r.SetRemovalDelay(100 * time.Millisecond)
	var asked sync.Map
	r.SetGone(func(id any) bool {
		asked.Store(id, true)
		return id == "archived"
	})
	runRelay(t, r)
	for _, id := range []string{"archived", "live"} {
		e := newEntry(t, id, id)
		completeJob(ctx, t, coll, id, e)
		r.NotifyEntries(id, e)
	}
	waitFor(t, RelayPollInterval/2, "both entries published", func() bool { return streamMsgs(t, b, StreamEvents) == 2 })
	waitFor(t, RelayPollInterval/2, "the live document's entry removed", func() bool {
		var j job
		return coll.FindOne(ctx, bson.M{"_id": "live"}).Decode(&j) == nil && len(j.Outbox) == 0
	})
	time.Sleep(300 * time.Millisecond) // the other removal, were it written
	var j job
	if err := coll.FindOne(ctx, bson.M{"_id": "archived"}).Decode(&j); err != nil {
		t.Fatal(err)
	}
	if len(j.Outbox) != 1 {
		t.Errorf("the document reported gone holds %d entries; want its 1 (no removal written)", len(j.Outbox))
	}
	if _, ok := asked.Load("archived"); !ok {
		t.Fatal("the relay did not ask whether the archived document was gone")
	}
}

// TestRelayOffersRemovalsToTheRemover: every removal is offered to the
// remover, under the document's lock, with the ids of the entries
// published, and not for a document gone; one it writes itself is not
// written again by the relay, one it declines the relay writes ($pullAll),
// and one it fails is offered again later.
func TestRelayOffersRemovalsToTheRemover(t *testing.T) {
	t.Parallel()
	b, coll, ctx, r := newSingleWriterRelay(t)
	r.SetPollInterval(200 * time.Millisecond) // the failed removal's retry
	var (
		mu      sync.Mutex
		locked  = map[any]bool{}
		offered = map[any][][]string{}
		failed  atomic.Bool
	)
	r.SetDocumentLock(func(id any) func() {
		mu.Lock()
		locked[id] = true
		mu.Unlock()
		return func() {
			mu.Lock()
			locked[id] = false
			mu.Unlock()
		}
	})
	r.SetGone(func(id any) bool { return id == "gone" })
	r.SetRemover(func(ctx context.Context, id any, ids []string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if !locked[id] {
			t.Errorf("the removal from %v was offered without the document's lock", id)
		}
		offered[id] = append(offered[id], ids)
		switch {
		case id == "failing" && failed.CompareAndSwap(false, true):
			return true, errors.New("disk full")
		case id == "mine" || id == "failing":
			return true, nil // written by the store (here: not at all)
		}
		return false, nil
	})
	runRelay(t, r)
	entries := map[string][]OutboxEntry{}
	for _, id := range []string{"mine", "theirs", "gone", "failing"} {
		entries[id] = []OutboxEntry{newEntry(t, id, "a"), newEntry(t, id, "b")}
		completeJob(ctx, t, coll, id, entries[id]...)
		r.NotifyEntries(id, entries[id]...)
	}
	waitFor(t, RelayPollInterval/2, "every entry published", func() bool { return streamMsgs(t, b, StreamEvents) == 8 })
	waitFor(t, RelayPollInterval/2, "the declined removal written, the failed one offered again", func() bool {
		var j job
		mu.Lock()
		again := len(offered["failing"]) >= 2
		mu.Unlock()
		return again && coll.FindOne(ctx, bson.M{"_id": "theirs"}).Decode(&j) == nil && len(j.Outbox) == 0
	})
	time.Sleep(300 * time.Millisecond) // other removals, were they written
	for id, want := range map[string]int{"mine": 2, "gone": 2, "failing": 2} {
		var j job
		if err := coll.FindOne(ctx, bson.M{"_id": id}).Decode(&j); err != nil {
			t.Fatal(err)
		}
		if len(j.Outbox) != want {
			t.Errorf("%s: %d entries left, want %d (no removal written by the relay)", id, len(j.Outbox), want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ok := offered["gone"]; ok {
		t.Error("the removal from a document gone was offered")
	}
	for _, id := range []string{"mine", "theirs", "failing"} {
		var got []string
		for _, ids := range offered[id] {
			got = append(got, ids...)
		}
		got = slices.Compact(got)
		if want := []string{entries[id][0].ID, entries[id][1].ID}; len(got) < 2 || !slices.Equal(got[:2], want) {
			t.Errorf("%s: offered %q, want %q", id, got, want)
		}
	}
}

// TestRelayPublishedHook: the published hook hears each document's
// entries, in order, once JetStream holds them, whichever way the relay
// found them: named with their entries, named alone (read back), or swept.
// One document at a time, it hears them before their removal is written.
func TestRelayPublishedHook(t *testing.T) {
	t.Parallel()
	for _, conc := range []int{1, 4} {
		t.Run(fmt.Sprintf("concurrency_%d", conc), func(t *testing.T) {
			t.Parallel()
			b := newBusWithStreams(t)
			coll := startFerret(t).Collection("jobs")
			ctx := testContext(t)
			swept := newEntry(t, "swept", "a")
			completeJob(ctx, t, coll, "swept", swept)
			r := NewRelay(b, coll, testLogger(t))
			r.SetConcurrency(conc)
			var (
				mu    sync.Mutex
				heard = map[string][]string{}
				late  []string // entries heard of after their removal
			)
			r.SetPublished(func(ctx context.Context, id any, ids []string) error {
				var j job
				if err := coll.FindOne(ctx, bson.M{"_id": id}).Decode(&j); err != nil {
					return err
				}
				inStream := streamMsgs(t, b, StreamEvents)
				mu.Lock()
				defer mu.Unlock()
				if (conc == 1 && len(j.Outbox) < len(ids)) || inStream < uint64(len(ids)) {
					late = append(late, fmt.Sprintf("%v: %d in the outbox, %d in the stream, %d heard", id, len(j.Outbox), inStream, len(ids)))
				}
				heard[id.(string)] = append(heard[id.(string)], ids...)
				return nil
			})
			runRelay(t, r)
			// The start's sweep is past "swept" (and so past "named" and
			// "read", which sort before it) once the hook heard of it: a
			// sweep that read "named" too would publish its entries as
			// well as NotifyEntries, and the hook may then hear of them
			// twice, as SetPublished allows.
			waitFor(t, RelayPollInterval/2, "the start's sweep", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(heard["swept"]) > 0
			})
			named := []OutboxEntry{newEntry(t, "named", "b"), newEntry(t, "named", "c")}
			completeJob(ctx, t, coll, "named", named...)
			r.NotifyEntries("named", named...)
			read := newEntry(t, "read", "d")
			completeJob(ctx, t, coll, "read", read)
			r.NotifyDocument("read")
			want := map[string][]string{"swept": {swept.ID}, "named": {named[0].ID, named[1].ID}, "read": {read.ID}}
			waitFor(t, RelayPollInterval/2, "every entry heard of", func() bool {
				mu.Lock()
				defer mu.Unlock()
				for id, ids := range want {
					if len(heard[id]) < len(ids) {
						return false
					}
				}
				return true
			})
			mu.Lock()
			defer mu.Unlock()
			for id, ids := range want {
				if !slices.Equal(heard[id], ids) {
					t.Errorf("%s: heard %q, want %q", id, heard[id], ids)
				}
			}
			if len(late) > 0 {
				t.Errorf("heard of after their removal or before JetStream held them: %v", late)
			}
		})
	}
}

// TestRelayAsksGoneUnderTheDocumentsLock: a store moving a document away
// holds its lock; the relay's removal waits for it and then asks whether
// the document is gone, so a move under way spares the removal too.
func TestRelayAsksGoneUnderTheDocumentsLock(t *testing.T) {
	t.Parallel()
	_, coll, ctx, r := newSingleWriterRelay(t)
	var (
		moving  sync.Mutex // held by the "store" while it moves the document
		gone    atomic.Bool
		waiting = make(chan struct{})
		once    sync.Once
	)
	r.SetDocumentLock(func(id any) func() {
		once.Do(func() { close(waiting) })
		moving.Lock()
		return moving.Unlock
	})
	r.SetGone(func(any) bool { return gone.Load() })
	moving.Lock() // the move starts before the relay publishes
	runRelay(t, r)
	e := newEntry(t, "moved", "a")
	completeJob(ctx, t, coll, "moved", e)
	r.NotifyEntries("moved", e)
	select {
	case <-waiting: // the removal waits for the document's lock
	case <-time.After(RelayPollInterval / 2):
		t.Fatal("the relay never asked for the document's lock")
	}
	gone.Store(true) // the move is through
	moving.Unlock()
	time.Sleep(300 * time.Millisecond) // the removal, were it written
	var j job
	if err := coll.FindOne(ctx, bson.M{"_id": "moved"}).Decode(&j); err != nil {
		t.Fatal(err)
	}
	if len(j.Outbox) != 1 {
		t.Errorf("a removal was written to the document moved meanwhile (outbox %d, want its 1 entry)", len(j.Outbox))
	}
}

// TestRelayReadsNamedDocumentsTogether: with many writers the relay reads
// each named document (NotifyDocument) before publishing it; when more are
// named than its goroutines can take at once, each goroutine reads its
// share in one query, not one by one. Every event is still published, in
// order per document, and every outbox emptied.
func TestRelayReadsNamedDocumentsTogether(t *testing.T) {
	t.Parallel()
	var (
		counting atomic.Bool
		reads    atomic.Int64
		release  = make(chan struct{})
	)
	monitor := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "find" && counting.Load() {
			reads.Add(1)
			<-release // the relay's goroutines stay busy while the names arrive
		}
	}}
	b := newBusWithStreams(t)
	coll := startFerretMonitored(t, monitor).Collection("jobs")
	ctx := testContext(t)
	r := NewRelay(b, coll, testLogger(t))
	r.SetConcurrency(4)
	started := make(chan struct{})
	r.SetDrained(func(_ context.Context, id any) error {
		if id == "warm-up" {
			close(started)
		}
		return nil
	})
	runRelay(t, r)
	// The start-up sweep is done once a document named after it is drained.
	completeJob(ctx, t, coll, "warm-up")
	r.NotifyDocument("warm-up")
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the relay did not start")
	}

	const docs = 40
	written := map[string][2]string{} // document → its two entries' ids, in order
	for i := range docs {
		id := fmt.Sprintf("d%02d", i)
		first, second := newEntry(t, id, "first"), newEntry(t, id, "second")
		completeJob(ctx, t, coll, id, first, second)
		written[id] = [2]string{first.ID, second.ID}
	}
	counting.Store(true)
	for i := range docs {
		r.NotifyDocument(fmt.Sprintf("d%02d", i))
	}
	time.Sleep(100 * time.Millisecond) // the names reach the relay's queue
	close(release)
	waitFor(t, RelayPollInterval/2, "named documents relayed", func() bool { return streamMsgs(t, b, StreamEvents) == 2*docs })
	counting.Store(false) // every read of the relay came before its publish
	waitFor(t, RelayPollInterval/2, "outboxes emptied", func() bool { return pendingEntries(t, coll) == 0 })
	// A goroutine takes a quarter of the queue (a share of the
	// concurrency), rounded up, so the 40 names take 11 reads; each of the
	// 4 goroutines may also have started a read before the names were all
	// in (a slow machine, or -race, lets several wake between two names).
	// One by one, 40.
	want := 4
	for left := docs; left > 0; want++ {
		left -= (left + 3) / 4
	}
	t.Logf("%d reads for %d named documents", reads.Load(), docs)
	if n := reads.Load(); n > int64(want) {
		t.Errorf("the relay read %d times for %d named documents, want at most %d", n, docs, want)
	}
	pos := map[string]int{}
	for i, id := range storedIDs(t, b, StreamEvents) {
		pos[id] = i
	}
	for doc, ids := range written {
		first, ok1 := pos[ids[0]]
		second, ok2 := pos[ids[1]]
		if !ok1 || !ok2 || first > second {
			t.Errorf("%s: its events at %d (%v) and %d (%v) of the stream, want both, in order", doc, first, ok1, second, ok2)
		}
	}
}
