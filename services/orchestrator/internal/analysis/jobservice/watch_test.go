package jobservice_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/events"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobstore"
)

// Events of different jobs reach the stream in no fixed order across
// processes: a relay that retries after a NATS fault publishes the
// analysis's "pending" event after its children's events. A watch from the
// start must still begin at the tree's first event. The analysis's pending
// event is removed from the stream here, which is what a watch sees while
// that event is still on its way.
func TestWatchStartsAtTheTreesFirstEvent(t *testing.T) {
	t.Parallel()
	e, root, final := completedStockAnalysis(t)

	ctx := e.ctx(10 * time.Second)
	stream := eventsStream(ctx, t, e)
	// The first event on the subject of the analysis's states before its end.
	activeSubject := analysis.JobEventSubject(e.scope.GetTenantId(), root.GetId(), root.GetId(), analysis.StatusPending)
	msg, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(activeSubject))
	if err != nil {
		t.Fatalf("the analysis's pending event: %v", err)
	}
	if err := stream.DeleteMsg(ctx, msg.Sequence); err != nil {
		t.Fatal(err)
	}

	got, err := e.watch(root.GetId(), 0)()
	if err != nil {
		t.Fatal(err)
	}
	byJob := statusesByJob(got)
	want := map[string][]orchestratorv1.JobStatus{root.GetId(): {waiting, complete}}
	for _, k := range final.GetChildren() {
		want[k.GetId()] = []orchestratorv1.JobStatus{pending, running, complete}
	}
	if len(byJob) != len(want) {
		t.Errorf("events of %d jobs, want %d: %v", len(byJob), len(want), got)
	}
	for id, w := range want {
		if !slices.Equal(byJob[id], w) {
			t.Errorf("events of %s: %v, want %v", id, byJob[id], w)
		}
	}
}

// A watch from the start of an analysis whose events are not in memory
// (see TestWatchOfANewAnalysisIsServedFromMemory) asks JetStream for
// nothing but its consumer: the server's subject index finds the tree's
// first event, and the layout is read from that event. A lookup of the first event before the consumer
// (a message get, served in turn with every JetStream request of the
// mesh) was a fifth of an analysis's first event p99 in the growth bench.
func TestWatchFromTheStartAsksOnlyForItsConsumer(t *testing.T) {
	t.Parallel()
	e, root, _ := completedStockAnalysis(t)
	// The archive's checks ask JetStream too: the analysis leaves the live
	// set before the requests are heard.
	testkit.Eventually(t, 10*time.Second, func() bool {
		n, err := e.db.Collection(jobstore.Collection).CountDocuments(context.Background(), bson.D{})
		return err == nil && n == 0
	}, "the finished analysis to leave the live set")
	var mu sync.Mutex
	var asked []string
	sub, err := e.bus.Conn().Subscribe("$JS.API.>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, m.Subject)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.bus.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := e.watch(root.GetId(), 0)()
	if err != nil || len(got) == 0 {
		t.Fatalf("watch from the start: %d events, %v", len(got), err)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	created := false
	for _, subject := range asked {
		created = created || strings.HasPrefix(subject, "$JS.API.CONSUMER.CREATE.")
		for _, lookup := range []string{"$JS.API.STREAM.MSG.GET.", "$JS.API.DIRECT.GET.", "$JS.API.STREAM.INFO."} {
			if strings.HasPrefix(subject, lookup) {
				t.Errorf("the watch asked JetStream %s before its replay; want only its consumer (all: %q)", subject, asked)
			}
		}
	}
	if !created {
		t.Errorf("no consumer creation among the JetStream requests heard: %q", asked)
	}
}

// A watch of an analysis created since the engine started is served from
// the events the engine's own consumer keeps in memory: it creates no
// consumer of its own, and gets the tree's events of the stream, each with
// its stream sequence, from the first to the analysis's end.
func TestWatchOfANewAnalysisIsServedFromMemory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.scriptBHPPlan()
	e.scriptSynthesis(stockAnswer)
	e.start(analysis.Hooks{})
	// An analysis created less than a second after the consumer started
	// is replayed from the stream (another replica's clock may run ahead).
	time.Sleep(1200 * time.Millisecond)
	var mu sync.Mutex
	var creates []string
	sub, err := e.bus.Conn().Subscribe("$JS.API.CONSUMER.CREATE.>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		creates = append(creates, m.Subject+" "+string(m.Data))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.bus.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	root := e.submit("Analyse BHP for investment", "stock_analysis")
	got, err := e.watch(root.GetId(), 0)()
	if err != nil {
		t.Fatalf("watch: %d events, %v", len(got), err)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	// The watch ends once the analysis and every job of it have sent their
	// final event (the stream's order of them: TestAnalysisFinalEventComesLastInTheStream).
	byJob := statusesByJob(got)
	if _, ok := byJob[root.GetId()]; !ok {
		t.Fatalf("the watch sent no event of the analysis: %v", got)
	}
	for id, statuses := range byJob {
		last := statuses[len(statuses)-1]
		if id == root.GetId() && last != complete || !analysis.StatusFromProto(last).Terminal() {
			t.Fatalf("the watch ended with job %s at %v (the analysis %s must end complete, every job final): %v", id, last, root.GetId(), got)
		}
	}
	var want []uint64
	for _, msg := range treeMessages(e.ctx(10*time.Second), t, e, root.GetId()) {
		meta, err := msg.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, meta.Sequence.Stream)
	}
	seqs := make([]uint64, len(got))
	for i, w := range got {
		seqs[i] = w.stream
	}
	if !slices.Equal(seqs, want) {
		t.Errorf("watched sequences %v; the tree's in the stream %v", seqs, want)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range creates {
		if strings.Contains(c, root.GetId()) {
			t.Errorf("the watch created a consumer of its own: %s", c)
		}
	}
}

// Job events were published on am.evt.<tenant>.job.<job>.<status> before
// they carried their tree (am.evt.<tenant>.job.<root>.<job>.<status>), and
// the stream keeps them for a week: a watch of an analysis whose events are
// in the old layout, from the start or resumed, still gets every job's.
func TestWatchReadsThePreviousSubjectLayout(t *testing.T) {
	t.Parallel()
	e, root, final := completedStockAnalysis(t)
	want, err := e.watch(root.GetId(), 0)()
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 8 {
		t.Fatalf("the watch in today's layout got %d events: %v", len(want), want)
	}

	// Move the tree's events to the old layout, in their order.
	ctx := e.ctx(20 * time.Second)
	js := e.bus.JetStream()
	stream := eventsStream(ctx, t, e)
	moved := 0
	for _, msg := range treeMessages(ctx, t, e, root.GetId()) {
		tok := strings.Split(msg.Subject(), ".") // am evt <tenant> job <root> <job> <status>
		if len(tok) != 7 {
			t.Fatalf("job event subject %q: want am.evt.<tenant>.job.<root>.<job>.<status>", msg.Subject())
		}
		old := &nats.Msg{Subject: strings.Join(append(tok[:4:4], tok[5], tok[6]), "."), Data: msg.Data()}
		if _, err := js.PublishMsg(ctx, old); err != nil {
			t.Fatal(err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.DeleteMsg(ctx, meta.Sequence.Stream); err != nil {
			t.Fatal(err)
		}
		moved++
	}
	if moved != len(want) {
		t.Fatalf("moved %d events of the tree, the watch got %d", moved, len(want))
	}

	got, err := e.watch(root.GetId(), 0)()
	if err != nil {
		t.Fatal(err)
	}
	if !sameEvents(got, want) {
		t.Errorf("watch of the old layout from the start:\n got %v\nwant %v", got, want)
	}
	rest, err := e.watch(root.GetId(), got[2].seq)()
	if err != nil {
		t.Fatal(err)
	}
	if !sameEvents(rest, want[3:]) {
		t.Errorf("watch of the old layout after its third event:\n got %v\nwant %v", rest, want[3:])
	}
	if n := len(final.GetChildren()); len(statusesByJob(got)) != n+1 {
		t.Errorf("events of %d jobs, want the analysis and its %d children", len(statusesByJob(got)), n)
	}
}

// A watch opened before any event of its tree is in the stream (the
// relay has not published the analysis's first one yet) gets every event
// when they come. The tree's events are taken out of the stream here,
// the watch opened, and they are published again.
func TestWatchOpenedBeforeTheTreesFirstEvent(t *testing.T) {
	t.Parallel()
	e, root, _ := completedStockAnalysis(t)
	want, err := e.watch(root.GetId(), 0)()
	if err != nil {
		t.Fatal(err)
	}

	ctx := e.ctx(20 * time.Second)
	js := e.bus.JetStream()
	var tree []*nats.Msg
	for _, msg := range treeMessages(ctx, t, e, root.GetId()) {
		tree = append(tree, &nats.Msg{Subject: msg.Subject(), Data: msg.Data()}) // no message id: not a duplicate
	}
	if len(tree) != len(want) {
		t.Fatalf("read %d events of the tree, the watch got %d", len(tree), len(want))
	}
	stream := eventsStream(ctx, t, e)
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(treeSubjects(e, root.GetId()))); err != nil {
		t.Fatal(err)
	}
	// The consumers by name, not by count: the ordered consumers read
	// above go away on their own meanwhile, and a count can stay level
	// while the watch's consumer is added.
	consumers := func() map[string]bool {
		names := map[string]bool{}
		lister := stream.ConsumerNames(ctx)
		for name := range lister.Name() {
			names[name] = true
		}
		if err := lister.Err(); err != nil {
			t.Fatal(err)
		}
		return names
	}
	before := consumers()
	made := func() bool {
		for name := range consumers() {
			if !before[name] {
				return true
			}
		}
		return false
	}

	collect := e.watch(root.GetId(), 0)
	for !made() { // the watch has looked for the tree's events
		if ctx.Err() != nil {
			t.Fatal("the watch made no consumer")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, m := range tree {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	got, err := collect()
	if err != nil {
		t.Fatal(err)
	}
	if !sameEvents(got, want) {
		t.Errorf("watch opened before the tree's events:\n got %v\nwant %v", got, want)
	}
}

// eventsStream returns the events stream of e's bus.
func eventsStream(ctx context.Context, t *testing.T, e *env) jetstream.Stream {
	t.Helper()
	stream, err := e.bus.JetStream().Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// treeSubjects is the subject filter of analysis rootID's events in e's
// tenant (the layout of today).
func treeSubjects(e *env, rootID string) string {
	return events.EventSubjectPrefix + e.scope.GetTenantId() + ".job." + rootID + ".>"
}

// treeMessages reads the events of analysis rootID's tree in the stream,
// in their order.
func treeMessages(ctx context.Context, t *testing.T, e *env, rootID string) []jetstream.Msg {
	t.Helper()
	cons, err := e.bus.JetStream().OrderedConsumer(ctx, events.StreamEvents,
		jetstream.OrderedConsumerConfig{FilterSubjects: []string{treeSubjects(e, rootID)}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(1000)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for msg := range batch.Messages() {
		msgs = append(msgs, msg)
	}
	return msgs
}

// sameEvents reports whether two watches got the same job states in the
// same order (their stream sequences differ).
func sameEvents(a, b []watched) bool {
	return slices.EqualFunc(a, b, func(x, y watched) bool { return x.id == y.id && x.status == y.status && x.typ == y.typ })
}

// completedStockAnalysis runs the scripted BHP stock analysis to its end
// and returns the env, the analysis as submitted and as it ended. Every
// watch of it replays the stream (Config.LiveTrees 0): the tests change
// the stream under it.
func completedStockAnalysis(t *testing.T) (e *env, root, final *orchestratorv1.Job) {
	t.Helper()
	e = newEnv(t)
	e.cfg.LiveTrees = 0
	e.scriptBHPPlan()
	e.scriptSynthesis(stockAnswer)
	e.start(analysis.Hooks{})
	root = e.submit("Analyse BHP for investment", "stock_analysis")
	return e, root, e.waitStatus(root.GetId(), complete, 30*time.Second)
}

// TestWatchAfterAnIDBeyondTheStream: a resume from an event id beyond the
// newest event of the stream (no watch ever sent it) is refused naming
// after_sequence, as a turn's watch refuses it, instead of answering as if
// the client held the whole analysis; a resume from the analysis's last
// event still sends nothing.
func TestWatchAfterAnIDBeyondTheStream(t *testing.T) {
	t.Parallel()
	e, root, _ := completedStockAnalysis(t)
	all, err := e.watch(root.GetId(), 0)()
	if err != nil || len(all) == 0 {
		t.Fatalf("watch from the start: %d events, %v", len(all), err)
	}
	last := all[len(all)-1].seq
	if rest, err := e.watch(root.GetId(), last)(); err != nil || len(rest) != 0 {
		t.Errorf("watch after the last event: %v, %v; want nothing", rest, err)
	}
	for _, after := range []uint64{last + 1_000_000, 1 << 62} {
		_, err := e.watch(root.GetId(), after)()
		if s := status.Convert(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), "after_sequence") {
			t.Errorf("watch after %d: %v, want InvalidArgument naming after_sequence", after, err)
		}
	}
}

// TestWatchAfterAnotherWatchsID: a resume from an event id of another
// watch (another analysis's, a chat turn's) that lies among this
// analysis's events is refused naming after_sequence: the tree's events
// before it would otherwise be skipped unsaid (a client mixing up ids
// lost 10 of 12 events).
func TestWatchAfterAnotherWatchsID(t *testing.T) {
	t.Parallel()
	e, root, _ := completedStockAnalysis(t)
	ctx := e.ctx(10 * time.Second)
	ev, err := events.NewEvent("chat.turn.started", "orchestrator", e.scope, "another-watch", &orchestratorv1.JobEvent{})
	if err != nil {
		t.Fatal(err)
	}
	seq, err := e.bus.Publish(ctx, events.EventSubject(e.scope.GetTenantId(), "chat", "another-watch", "started"), ev)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := e.bus.EventIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.watch(root.GetId(), ids.ID(seq))()
	if s := status.Convert(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), "after_sequence: is an event id of another watch") {
		t.Errorf("watch after another watch's event: %v, want InvalidArgument naming after_sequence", err)
	}
	all, err := e.watch(root.GetId(), 0)()
	if err != nil || len(all) < 3 {
		t.Fatalf("watch from the start: %d events, %v", len(all), err)
	}
	if rest, err := e.watch(root.GetId(), all[1].seq)(); err != nil || len(rest) != len(all)-2 {
		t.Errorf("watch after its own second event: %d events, %v; want %d", len(rest), err, len(all)-2)
	}
}

// TestAJobsEventsShareTwoSubjects: each job of a finished analysis has its
// events on two subjects, one for the states it passed through (pending,
// running, waiting for its children) and one for how it ended; the status
// is in each event. The stream keeps state for every subject it holds for
// a week, so a subject per status made each analysis cost nats-server
// memory and its collector work in proportion to its states.
func TestAJobsEventsShareTwoSubjects(t *testing.T) {
	t.Parallel()
	e, root, final := completedStockAnalysis(t)
	ctx := e.ctx(10 * time.Second)
	stream := eventsStream(ctx, t, e)
	tenant := e.scope.GetTenantId()
	want := map[string]bool{}
	for _, id := range append([]string{root.GetId()}, jobIDs(final.GetChildren())...) {
		active := analysis.JobEventSubject(tenant, root.GetId(), id, analysis.StatusPending)
		for _, s := range []analysis.Status{analysis.StatusRunning, analysis.StatusWaiting} {
			if got := analysis.JobEventSubject(tenant, root.GetId(), id, s); got != active {
				t.Errorf("job %s %s on %s, pending on %s: want one subject", id, s, got, active)
			}
		}
		want[active] = true
		want[analysis.JobEventSubject(tenant, root.GetId(), id, analysis.StatusComplete)] = true
	}
	// The store says the analysis is complete as soon as it is written;
	// the relay publishes the root's last event just after.
	var got map[string]bool
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(treeSubjects(e, root.GetId())))
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]bool{}
		for s := range info.State.Subjects {
			got[s] = true
		}
		if maps.Equal(got, want) || time.Now().After(deadline) {
			break
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("the analysis's %d jobs' events are on %d subjects %v, want %d: %v",
			len(final.GetChildren())+1, len(got), slices.Sorted(maps.Keys(got)), len(want), slices.Sorted(maps.Keys(want)))
	}
}

// jobIDs returns the ids of jobs.
func jobIDs(jobs []*orchestratorv1.Job) []string {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.GetId()
	}
	return ids
}

// TestAnalysisFinalEventComesLastInTheStream: a consumer reading an
// analysis's events from NATS (am.evt.<tenant>.job.<root>.>) can stop at
// the analysis's final event: every job's final event precedes it. The
// relay publishes the jobs' documents side by side, and the analysis
// completes right after its synthesis job, so its completion reached the
// stream first in some analyses (seen in CI); its final write now carries
// copies of its jobs' pending events (Engine.finishRoot), which JetStream
// deduplicates. Both writer modes, 24 analyses at once.
func TestAnalysisFinalEventComesLastInTheStream(t *testing.T) {
	t.Parallel()
	eachWriterMode(t, func(t *testing.T, singleWriter bool) {
		e := newEnvIn(t, singleWriter)
		e.scriptBHPPlan()
		e.scriptSynthesis(stockAnswer)
		e.start(analysis.Hooks{})
		roots := make([]*orchestratorv1.Job, 24)
		var wg sync.WaitGroup
		for i := range roots {
			wg.Go(func() { roots[i] = e.submit(fmt.Sprintf("Analyse BHP for investment #%d", i), "stock_analysis") })
		}
		wg.Wait()
		for _, root := range roots {
			e.waitStatus(root.GetId(), complete, 30*time.Second)
		}
		for _, root := range roots {
			var msgs []jetstream.Msg
			// Every job's final event is in the stream once the relay
			// caught up: 1 analysis + planning + 2 tools + synthesis.
			testkit.Eventually(t, 10*time.Second, func() bool {
				msgs = treeMessages(e.ctx(10*time.Second), t, e, root.GetId())
				finals := 0
				for _, m := range msgs {
					if !strings.HasSuffix(m.Subject(), ".active") {
						finals++
					}
				}
				return finals >= 5
			}, "the tree's final events")
			prefix := strings.TrimSuffix(treeSubjects(e, root.GetId()), ">")
			var subjects []string // <job>.<state>
			for _, m := range msgs {
				subjects = append(subjects, strings.TrimPrefix(m.Subject(), prefix))
			}
			if last := subjects[len(subjects)-1]; last != root.GetId()+".complete" {
				t.Errorf("analysis %s: its events end with %s, not its completion: %v", root.GetId(), last, subjects)
			}
			seen := map[string]bool{}
			for _, m := range msgs {
				id := m.Headers().Get(events.HeaderMsgID)
				if seen[id] {
					t.Errorf("analysis %s: event %s twice in the stream", root.GetId(), id)
				}
				seen[id] = true
			}
		}
	})
}
