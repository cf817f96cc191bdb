package chat_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/mongostore"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/grpcapi"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/strategy"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

// newBus connects to a fresh JetStream server with the mesh's streams.
func newBus(t *testing.T) *events.Bus {
	t.Helper()
	return busAt(t, testkit.NewNATS(t).URL())
}

// busAt connects to the JetStream server at url and ensures the mesh's
// streams.
func busAt(t *testing.T, url string) *events.Bus {
	t.Helper()
	bus, err := events.Connect(context.Background(), url, "chat-test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	if err := bus.EnsureStreams(context.Background()); err != nil {
		t.Fatal(err)
	}
	return bus
}

// resumeEnv is ConversationService over a resumable loop, with a gate tool
// that holds a turn in the middle until released.
type resumeEnv struct {
	*env
	client orchestratorv1.ConversationServiceClient
	gate   *gateTool
	bus    *events.Bus
	ids    *events.EventIDs // the bus's: the API's event ids to sequences
	// resumable is the loop behind client (env's loop publishes no events).
	resumable *chat.Loop
}

func newResumeEnv(t *testing.T, cfg chat.Config) *resumeEnv {
	t.Helper()
	return newResumeEnvWith(t, cfg, nil, nil, nil)
}

// newResumeEnvWith is newResumeEnv on store (nil: in memory) and bus (nil:
// a fresh server's), its loop's clock now (nil: time.Now).
func newResumeEnvWith(t *testing.T, cfg chat.Config, store conversation.Store, bus *events.Bus, now func() time.Time) *resumeEnv {
	t.Helper()
	gate := newGate()
	e := newEnv(t, envOptions{store: store, sim: providersim.Options{Flavor: providersim.DeepSeek}, tools: []tools.Tool{gate}})
	if bus == nil {
		bus = newBus(t)
	}
	reg, err := tools.NewRegistry(tools.Options{}, gate)
	if err != nil {
		t.Fatal(err)
	}
	set, _ := strategy.NewSet("deepseek_single", strategy.Builtin()...)
	cfg.Model = "chat"
	loop, err := chat.New(cfg, chat.Deps{Store: e.store, Model: e.model.Client, Tools: reg, Strategies: set, Events: bus, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	conn := testkit.StartGRPC(t, func(s *grpc.Server) {
		orchestratorv1.RegisterConversationServiceServer(s, grpcapi.NewConversations(e.store, loop, set))
	})
	e.sim.When(providersim.Match{LastRole: "user", WithTools: true}).Text("Let me wait.").ToolCall("gate", `{"n":1}`).Times(1)
	e.sim.When(providersim.Match{}).Text("The gate opened, so the answer is forty-two.")
	ids, err := bus.EventIDs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return &resumeEnv{env: e, client: orchestratorv1.NewConversationServiceClient(conn), gate: gate, bus: bus, ids: ids, resumable: loop}
}

// watch reads WatchTurn to its end.
func (e *resumeEnv) watch(t *testing.T, turnID string, after uint64) ([]*orchestratorv1.StreamMessageResponse, error) {
	t.Helper()
	return e.follow(t, turnID, after, nil)
}

// follow reads WatchTurn to its end, calling onEvent, if set, with each event.
func (e *resumeEnv) follow(t *testing.T, turnID string, after uint64, onEvent func(*orchestratorv1.StreamMessageResponse)) ([]*orchestratorv1.StreamMessageResponse, error) {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	st, err := e.client.WatchTurn(ctx, &orchestratorv1.WatchTurnRequest{Scope: testScope, ConversationId: e.conv, TurnId: turnID, AfterSequence: after})
	if err != nil {
		return nil, err
	}
	var out []*orchestratorv1.StreamMessageResponse
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, r.GetEvent())
		if onEvent != nil {
			onEvent(r.GetEvent())
		}
	}
}

// cutTurn sends a message and reads its stream until the event cut says
// to stop at, then goes away, as a client whose gateway replica died does.
func (e *resumeEnv) cutTurn(t *testing.T, cut func(*orchestratorv1.StreamMessageResponse) bool) (turnID string, got []*orchestratorv1.StreamMessageResponse) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxTimeout(t, 30*time.Second))
	defer cancel()
	st, err := e.client.StreamMessage(ctx, &orchestratorv1.StreamMessageRequest{Scope: testScope, ConversationId: e.conv, Content: "Wait for the gate"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := st.Recv()
		if err != nil {
			t.Fatalf("stream ended before the tool call: %v", err)
		}
		got = append(got, ev)
		if ts := ev.GetTurnStarted(); ts != nil {
			turnID = ts.GetTurnId()
			if ts.GetResumable() != (ev.GetSequence() != 0) || ts.GetConversationId() != e.conv {
				t.Fatalf("TurnStarted = %v with sequence %d, want a turn of %s, resumable if and only if stored", ts, ev.GetSequence(), e.conv)
			}
		}
		if cut(ev) {
			return turnID, got
		}
	}
}

func atToolCall(ev *orchestratorv1.StreamMessageResponse) bool { return ev.GetToolCallStart() != nil }

// checkSequences fails unless every event has an id and the ids name
// increasing stream sequences, none of them its own id.
func (e *resumeEnv) checkSequences(t *testing.T, what string, evs []*orchestratorv1.StreamMessageResponse) {
	t.Helper()
	var last uint64
	for i, ev := range evs {
		seq := e.seq(ev)
		if seq <= last || seq == ev.GetSequence() {
			t.Fatalf("%s: event %d (%v) has sequence %d after %d", what, i, ev, seq, last)
		}
		last = seq
	}
}

// seq is the stream sequence of ev's event id.
func (e *resumeEnv) seq(ev *orchestratorv1.StreamMessageResponse) uint64 {
	return e.ids.Seq(ev.GetSequence())
}

// TestResumeCutTurn cuts a turn's stream in the middle (while a tool runs)
// and resumes it through WatchTurn with the id of the last event the client
// got, while the turn still runs and after it ended: the client gets
// exactly the rest, the turn ran to its end although its stream went away,
// and a watch from the last event sends nothing.
func TestResumeCutTurn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		afterEnded bool
	}{
		{"while the turn runs", false},
		{"after the turn ended", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newResumeEnv(t, chat.Config{})
			// Cut while the tool waits, or, for a watch that must follow
			// the turn live, right at its start: the watch then gets the
			// tool call before the tool may finish.
			cut := atToolCall
			if !tc.afterEnded {
				cut = func(ev *orchestratorv1.StreamMessageResponse) bool { return ev.GetTurnStarted() != nil }
			}
			turnID, got := e.cutTurn(t, cut)
			e.checkSequences(t, "cut stream", got)
			last := got[len(got)-1].GetSequence()

			var rest []*orchestratorv1.StreamMessageResponse
			var err error
			if tc.afterEnded {
				close(e.gate.release)
				testkit.Eventually(t, 10*time.Second, func() bool {
					msgs := e.messages(t)
					return len(msgs) == 4 && msgs[3].Role == conversation.RoleAssistant
				}, "the cut turn to finish")
				rest, err = e.watch(t, turnID, last)
			} else {
				rest, err = e.follow(t, turnID, last, func(ev *orchestratorv1.StreamMessageResponse) {
					if ev.GetToolCallStart() != nil {
						close(e.gate.release)
					}
				})
			}
			if err != nil {
				t.Fatalf("WatchTurn: %v", err)
			}
			e.checkSequences(t, "resumed stream", rest)
			if len(rest) == 0 || e.seq(rest[0]) <= e.ids.Seq(last) || rest[len(rest)-1].GetCompleted() == nil {
				t.Fatalf("resumed with %d events %v, want the rest after %d ending with Completed", len(rest), rest, last)
			}
			whole, err := e.watch(t, turnID, 0)
			if err != nil {
				t.Fatalf("WatchTurn from the start: %v", err)
			}
			if diff := cmp.Diff(whole, append(got, rest...), protocmp.Transform()); diff != "" {
				t.Errorf("cut stream + resumed stream differ from the whole turn (-whole +cut+resumed):\n%s", diff)
			}
			if whole[0].GetTurnStarted() == nil {
				t.Errorf("the turn's first event is %v, want TurnStarted", whole[0])
			}
			// One subject holds the whole turn: the stream keeps state for
			// every subject it holds.
			ctx := ctxTimeout(t, 10*time.Second)
			stream, err := e.bus.JetStream().Stream(ctx, events.StreamEvents)
			if err != nil {
				t.Fatal(err)
			}
			info, err := stream.Info(ctx, jetstream.WithSubjectFilter(events.EventSubjectPrefix+">"))
			if err != nil {
				t.Fatal(err)
			}
			want := events.EventSubjectPrefix + testScope.TenantId + ".chat." + e.conv + "." + turnID + ".events"
			if len(info.State.Subjects) != 1 || info.State.Subjects[want] != uint64(len(whole)) {
				t.Errorf("the turn's events are on subjects %v, want its %d events on %s", info.State.Subjects, len(whole), want)
			}
			msgs := e.messages(t)
			if final := msgs[len(msgs)-1]; final.Cancelled || final.Content != "The gate opened, so the answer is forty-two." ||
				final.ID != rest[len(rest)-1].GetCompleted().GetMessageId() {
				t.Errorf("stored answer %+v, want the whole answer of the Completed event", final)
			}
			t.Logf("turn of %d events: %d before the cut, %d resumed", len(whole), len(got), len(rest))

			nothing, err := e.watch(t, turnID, rest[len(rest)-1].GetSequence())
			if err != nil || len(nothing) != 0 {
				t.Errorf("watch after the last event: %d events, %v; want none", len(nothing), err)
			}
		})
	}
}

// TestWatchTurnRefusals: a malformed or unknown turn id, a turn of another
// conversation or project, and a sequence beyond the turn are refused
// naming the field.
func TestWatchTurnRefusals(t *testing.T) {
	t.Parallel()
	e := newResumeEnv(t, chat.Config{})
	turnID, got := e.cutTurn(t, atToolCall)
	// While the turn waits, another watch's event reaches the stream (an
	// analysis's, another turn's): its id lies among the turn's.
	elsewhere, err := events.NewEvent("job.running", "orchestrator", testScope, "another-watch", &orchestratorv1.StreamMessageResponse{})
	if err != nil {
		t.Fatal(err)
	}
	elsewhereSeq, err := e.bus.Publish(context.Background(), events.EventSubject(testScope.TenantId, "job", "another-watch", "running"), elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	close(e.gate.release)
	var end uint64
	testkit.Eventually(t, 10*time.Second, func() bool {
		whole, err := e.watch(t, turnID, got[len(got)-1].GetSequence())
		if err != nil || len(whole) == 0 {
			return false
		}
		end = whole[len(whole)-1].GetSequence()
		return true
	}, "the turn to end")
	other := e.newConversation(t, "")

	for _, tc := range []struct {
		name string
		req  *orchestratorv1.WatchTurnRequest
		code codes.Code
		want string // in the message
	}{
		{"malformed turn id", &orchestratorv1.WatchTurnRequest{ConversationId: e.conv, TurnId: "not-a-turn"}, codes.InvalidArgument, "turn_id: "},
		{"wildcard turn id", &orchestratorv1.WatchTurnRequest{ConversationId: e.conv, TurnId: ">"}, codes.InvalidArgument, "turn_id: "},
		{"unknown turn", &orchestratorv1.WatchTurnRequest{ConversationId: e.conv, TurnId: uuid.NewString()}, codes.NotFound, "turn_id"},
		{"turn of another conversation", &orchestratorv1.WatchTurnRequest{ConversationId: other, TurnId: turnID}, codes.NotFound, "turn_id"},
		{"turn of another project", &orchestratorv1.WatchTurnRequest{ConversationId: e.conv, TurnId: turnID, Scope: &commonv1.Scope{TenantId: testScope.TenantId, ProjectId: "other"}}, codes.NotFound, "conversation"},
		{"sequence beyond the turn", &orchestratorv1.WatchTurnRequest{ConversationId: e.conv, TurnId: turnID, AfterSequence: end + 1}, codes.InvalidArgument, "after_sequence: "},
		{"sequence far beyond the stream", &orchestratorv1.WatchTurnRequest{ConversationId: e.conv, TurnId: turnID, AfterSequence: 1 << 62}, codes.InvalidArgument, "after_sequence: "},
		// The turn's events before it would be skipped unsaid.
		{"another watch's event among the turn's", &orchestratorv1.WatchTurnRequest{ConversationId: e.conv, TurnId: turnID, AfterSequence: e.ids.ID(elsewhereSeq)},
			codes.InvalidArgument, "after_sequence: is an event id of another watch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.req.Scope == nil {
				tc.req.Scope = testScope
			}
			st, err := e.client.WatchTurn(ctxTimeout(t, 10*time.Second), tc.req)
			if err == nil {
				_, err = st.Recv()
			}
			if s := status.Convert(err); s.Code() != tc.code || !strings.Contains(s.Message(), tc.want) {
				t.Errorf("WatchTurn = %v, want %v naming %q", err, tc.code, tc.want)
			}
		})
	}

	// A deleted conversation's turns are not replayed, though their
	// events are still in the stream.
	if _, err := e.client.DeleteConversation(ctxTimeout(t, 10*time.Second), &orchestratorv1.DeleteConversationRequest{Scope: testScope, ConversationId: e.conv}); err != nil {
		t.Fatal(err)
	}
	st, err := e.client.WatchTurn(ctxTimeout(t, 10*time.Second), &orchestratorv1.WatchTurnRequest{Scope: testScope, ConversationId: e.conv, TurnId: turnID})
	var ev *orchestratorv1.WatchTurnResponse
	if err == nil {
		ev, err = st.Recv()
	}
	if status.Code(err) != codes.NotFound {
		t.Errorf("WatchTurn of a deleted conversation's turn = %v, %v; want NotFound", ev, err)
	}
}

// TestDeleteConversationRemovesItsTurnEvents: a turn's events hold its
// answer, so deleting a conversation removes its turns' events from the
// stream; another conversation's stay, and so do the events of a turn
// stored before subjects carried the conversation (they expire). A delete
// refused because a turn runs removes nothing: the turn's client may
// resume it.
func TestDeleteConversationRemovesItsTurnEvents(t *testing.T) {
	t.Parallel()
	e := newResumeEnv(t, chat.Config{})
	completed := func(ev *orchestratorv1.StreamMessageResponse) bool { return ev.GetCompleted() != nil }
	deleted := e.conv
	running, cut := e.cutTurn(t, atToolCall)
	_, err := e.client.DeleteConversation(ctxTimeout(t, 10*time.Second), &orchestratorv1.DeleteConversationRequest{Scope: testScope, ConversationId: deleted})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("DeleteConversation while a turn runs: %v, want Aborted (busy)", err)
	}
	close(e.gate.release)
	if rest, err := e.watch(t, running, cut[len(cut)-1].GetSequence()); err != nil || len(rest) == 0 || rest[len(rest)-1].GetCompleted() == nil {
		t.Fatalf("the running turn, resumed after the refused delete: %v, %v; want it to its end", rest, err)
	}
	kept := e.newConversation(t, "")
	e.conv = kept
	keptTurn, _ := e.cutTurn(t, completed)
	legacyTurn := uuid.NewString()
	started := &orchestratorv1.StreamMessageResponse{Event: &orchestratorv1.StreamMessageResponse_TurnStarted{
		TurnStarted: &orchestratorv1.TurnStarted{TurnId: legacyTurn, ConversationId: deleted, Resumable: true},
	}}
	ev, err := events.NewEvent("chat.turn.started", "orchestrator", testScope, legacyTurn, started)
	if err != nil {
		t.Fatal(err)
	}
	legacySubject := events.EventSubject(testScope.TenantId, "chat", legacyTurn, "started")
	if _, err := e.bus.Publish(context.Background(), legacySubject, ev); err != nil {
		t.Fatal(err)
	}

	ctx := ctxTimeout(t, 10*time.Second)
	subjects := func() map[string]uint64 {
		stream, err := e.bus.JetStream().Stream(ctx, events.StreamEvents)
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(events.EventSubjectPrefix+testScope.TenantId+".chat.>"))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects
	}
	prefix := func(conv string) string {
		return events.EventSubjectPrefix + testScope.TenantId + ".chat." + events.SubjectToken(conv) + "."
	}
	count := func(all map[string]uint64, prefix string) (n int) {
		for s := range all {
			if strings.HasPrefix(s, prefix) {
				n++
			}
		}
		return n
	}
	before := subjects()
	if count(before, prefix(deleted)) == 0 || count(before, prefix(kept)) == 0 {
		t.Fatalf("before the delete, the turns' subjects are %v: want subjects under %s and %s", before, prefix(deleted), prefix(kept))
	}
	// The resumed turn's lease is released just after its completed
	// event is published: a delete in between is refused as busy
	// (Aborted), which a client retries.
	var delErr error
	testkit.Eventually(t, 10*time.Second, func() bool {
		_, delErr = e.client.DeleteConversation(ctx, &orchestratorv1.DeleteConversationRequest{Scope: testScope, ConversationId: deleted})
		return status.Code(delErr) != codes.Aborted
	}, "the conversation's last turn to release it")
	if delErr != nil {
		t.Fatal(delErr)
	}
	after := subjects()
	if n := count(after, prefix(deleted)); n != 0 {
		t.Errorf("after the delete, %d subjects of the deleted conversation's turns are left: %v", n, after)
	}
	if count(after, prefix(kept)) != count(before, prefix(kept)) || after[legacySubject] != 1 {
		t.Errorf("after the delete, the subjects are %v: want the other conversation's and the old-layout turn's kept", after)
	}
	// The other conversation's turn is still watched from its events, and
	// so is a turn in the old layout (its started event alone here).
	if got, err := e.watch(t, keptTurn, 0); err != nil || len(got) == 0 || got[len(got)-1].GetCompleted() == nil {
		t.Errorf("watch of the other conversation's turn: %v, %v; want it to its end", got, err)
	}
}

// TestDeleteFinishedOnceTheStreamTakesThePurge: a conversation deleted
// while the events stream is unreachable (its server down: an outage, a
// leader election) is deleted at once for its caller, and its turns'
// events go once the stream is back: the store kept a record of the
// delete, which FinishDeletes finishes.
func TestDeleteFinishedOnceTheStreamTakesThePurge(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 60*time.Second)
	store, err := mongostore.New(ctx, testkit.MongoDB(t))
	if err != nil {
		t.Fatal(err)
	}
	opts := testkit.NATSOptions{StoreDir: t.TempDir(), Port: testkit.FreePort(t)}
	srv, err := testkit.StartNATS(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown() })
	bus := busAt(t, srv.URL())
	var ahead atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	e := newResumeEnvWith(t, chat.Config{}, store, bus, now)
	close(e.gate.release) // the turn runs to its end
	e.cutTurn(t, func(ev *orchestratorv1.StreamMessageResponse) bool { return ev.GetCompleted() != nil })
	filter := events.EventSubjectPrefix + testScope.TenantId + ".chat." + events.SubjectToken(e.conv) + ".>"
	left := func() int {
		stream, err := bus.JetStream().Stream(ctx, events.StreamEvents)
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			t.Fatal(err)
		}
		return len(info.State.Subjects)
	}
	if left() == 0 {
		t.Fatal("the turn published no events")
	}
	// The turn releases its lease just after its last event.
	testkit.Eventually(t, 10*time.Second, func() bool {
		err := store.Delete(ctx, conversation.Scope{TenantID: testScope.TenantId, ProjectID: testScope.ProjectId}, e.conv, time.Now())
		if err != nil && !errors.Is(err, conversation.ErrBusy) {
			t.Fatal(err)
		}
		return err == nil
	}, "the turn's lease released")
	// The store has deleted it; then the stream is away while the
	// service removes its events.
	srv.Shutdown()
	e.resumable.ForgetConversation(ctx, testScope, e.conv)
	srv, err = testkit.StartNATS(opts)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return bus.Conn().IsConnected() }, "the bus reconnected")
	if left() == 0 {
		t.Fatal("the turn's events went while the stream was down")
	}
	defer chat.SetDeleteSweep(50 * time.Millisecond)()
	stop := e.resumable.FinishDeletes(ctx)
	defer stop()
	time.Sleep(300 * time.Millisecond)
	if left() == 0 {
		t.Fatal("the events went before the delete's record was old enough not to be a delete under way")
	}
	ahead.Store(int64(2 * time.Minute))
	testkit.Eventually(t, 10*time.Second, func() bool { return left() == 0 }, "the deleted conversation's turn events purged")
}

// TestAbandonedTurnCancelled: a turn whose stream went away and that no
// watch follows is cancelled after ResumeGrace, its partial answer stored
// marked cancelled, and a later watch gets the cancelled tool result and a
// CANCELLED ErrorEvent as its end.
func TestAbandonedTurnCancelled(t *testing.T) {
	t.Parallel()
	e := newResumeEnv(t, chat.Config{ResumeGrace: time.Second}) // raised to the minimum, 6s
	turnID, got := e.cutTurn(t, atToolCall)
	testkit.Eventually(t, 20*time.Second, func() bool { started, running, _, _ := e.gate.stats(); return started == 1 && running == 0 }, "the running tool to be cancelled")
	rest, err := e.watch(t, turnID, got[len(got)-1].GetSequence())
	if err != nil {
		t.Fatalf("WatchTurn: %v", err)
	}
	// The tool's cancelled result is sent when the tool stage saw the
	// cancellation first, not when the turn did.
	if len(rest) == 2 && rest[0].GetToolCallResult().GetIsError() {
		rest = rest[1:]
	}
	if len(rest) != 1 || rest[0].GetError().GetCode() != "CANCELLED" {
		t.Fatalf("after the cut the turn sent %v, want (the tool's cancelled result and) a CANCELLED ErrorEvent", rest)
	}
	msgs := e.messages(t)
	if len(msgs) != 3 || !msgs[1].Cancelled {
		t.Errorf("stored %+v, want the user message, the cancelled tool call and its result", msgs)
	}
}

// TestWatchOfLostTurn: a turn whose process died after its first event
// (its TurnStarted is stored, nothing answers for it, no end comes) ends
// its watch with an ABORTED ErrorEvent instead of following it forever.
func TestWatchOfLostTurn(t *testing.T) {
	t.Parallel()
	e := newResumeEnv(t, chat.Config{})
	turnID := uuid.NewString()
	started := &orchestratorv1.StreamMessageResponse{Event: &orchestratorv1.StreamMessageResponse_TurnStarted{
		TurnStarted: &orchestratorv1.TurnStarted{TurnId: turnID, ConversationId: e.conv, Resumable: true},
	}}
	ev, err := events.NewEvent("chat.turn.started", "orchestrator", testScope, turnID, started)
	if err != nil {
		t.Fatal(err)
	}
	// On the subject of a turn stored before subjects carried the
	// conversation: a watch still finds those.
	seq, err := e.bus.Publish(context.Background(), events.EventSubject(testScope.TenantId, "chat", turnID, "started"), ev)
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	got, err := e.watch(t, turnID, 0)
	if err != nil {
		t.Fatalf("WatchTurn: %v", err)
	}
	if len(got) != 2 || e.seq(got[0]) != seq || got[0].GetTurnStarted().GetTurnId() != turnID ||
		got[1].GetError().GetCode() != "ABORTED" || got[1].GetSequence() != 0 {
		t.Fatalf("watch of a lost turn sent %v, want its TurnStarted (seq %d), then an ABORTED ErrorEvent", got, seq)
	}
	t.Logf("the lost turn's watch ended after %v", time.Since(begin).Round(time.Millisecond))
}

// TestWatchOfTurnStoredByKind: a turn stored when each kind of its events
// had a subject of its own (…<conversation>.<turn>.started, .event,
// .ended) is still watched, from its start and from an event in it, and a
// watch from its last event sends nothing.
func TestWatchOfTurnStoredByKind(t *testing.T) {
	t.Parallel()
	e := newResumeEnv(t, chat.Config{})
	turnID := uuid.NewString()
	turn := []*orchestratorv1.StreamMessageResponse{
		{Event: &orchestratorv1.StreamMessageResponse_TurnStarted{TurnStarted: &orchestratorv1.TurnStarted{TurnId: turnID, ConversationId: e.conv, Resumable: true}}},
		{Event: &orchestratorv1.StreamMessageResponse_ResponseChunk{ResponseChunk: &orchestratorv1.ResponseChunk{Content: "forty-two", Iteration: 1}}},
		{Event: &orchestratorv1.StreamMessageResponse_Completed{Completed: &orchestratorv1.Completed{MessageId: "m1"}}},
	}
	prefix := events.EventSubjectPrefix + testScope.TenantId + ".chat." + e.conv + "." + turnID + "."
	var seqs []uint64
	for i, kind := range []string{"started", "event", "ended"} {
		ev, err := events.NewEvent("chat.turn."+kind, "orchestrator", testScope, turnID, turn[i])
		if err != nil {
			t.Fatal(err)
		}
		seq, err := e.bus.Publish(context.Background(), prefix+kind, ev)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	whole, err := e.watch(t, turnID, 0)
	if err != nil {
		t.Fatalf("WatchTurn: %v", err)
	}
	if len(whole) != 3 {
		t.Fatalf("watch of a turn stored by kind sent %v, want its 3 events", whole)
	}
	for i, ev := range whole {
		if e.seq(ev) != seqs[i] || !proto.Equal(withoutSequence(ev), turn[i]) {
			t.Errorf("event %d: %v (sequence %d), want %v (sequence %d)", i, ev, e.seq(ev), turn[i], seqs[i])
		}
	}
	rest, err := e.watch(t, turnID, whole[0].GetSequence())
	if err != nil || len(rest) != 2 || rest[1].GetCompleted() == nil {
		t.Errorf("watch after its start: %v, %v; want its last 2 events", rest, err)
	}
	nothing, err := e.watch(t, turnID, whole[2].GetSequence())
	if err != nil || len(nothing) != 0 {
		t.Errorf("watch after its last event: %v, %v; want nothing", nothing, err)
	}
}

// withoutSequence is ev without the id a watch gave it.
func withoutSequence(ev *orchestratorv1.StreamMessageResponse) *orchestratorv1.StreamMessageResponse {
	c := proto.Clone(ev).(*orchestratorv1.StreamMessageResponse)
	c.Sequence = 0
	return c
}

// TestTurnOutlastsAnEventStoreOutage: the events stream is away when a turn
// starts, as while JetStream elects a new leader for it after its leader
// died (4-9 s). A turn that starts then waits for the stream instead of
// going on unstored: its client gets TurnStarted with an id, resumable, and
// resumes it after a cut. Where the stream stays away longer than
// EventStoreTimeout, the turn goes on, and its TurnStarted says it cannot
// be resumed (WatchTurn would not find it).
func TestTurnOutlastsAnEventStoreOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		storeWait time.Duration
		resumable bool
	}{
		{"the stream is back within the wait", 0, true}, // the default wait
		{"the stream is back after the wait", time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newResumeEnv(t, chat.Config{EventStoreTimeout: tc.storeWait})
			ctx := ctxTimeout(t, 30*time.Second)
			if err := e.bus.JetStream().DeleteStream(ctx, events.StreamEvents); err != nil {
				t.Fatal(err)
			}
			const away = 3 * time.Second // longer than the previous fixed wait, 2s
			returned := make(chan struct{})
			back := time.AfterFunc(away, func() {
				defer close(returned)
				if err := e.bus.EnsureStreams(context.Background()); err != nil {
					t.Error(err)
				}
			})
			defer back.Stop()
			begin := time.Now()
			turnID, got := e.cutTurn(t, atToolCall)
			ts := got[0].GetTurnStarted()
			if ts.GetResumable() != tc.resumable || (got[0].GetSequence() != 0) != tc.resumable {
				t.Fatalf("TurnStarted %v with sequence %d after %v, want resumable %v (with an id iff resumable)",
					ts, got[0].GetSequence(), time.Since(begin).Round(time.Millisecond), tc.resumable)
			}
			close(e.gate.release)
			if !tc.resumable {
				<-returned
				_, err := e.watch(t, turnID, 0)
				if status.Code(err) != codes.NotFound {
					t.Fatalf("WatchTurn of the turn that was not stored = %v, want NotFound", err)
				}
				return
			}
			rest, err := e.watch(t, turnID, got[len(got)-1].GetSequence())
			if err != nil {
				t.Fatalf("WatchTurn: %v", err)
			}
			if len(rest) == 0 || rest[len(rest)-1].GetCompleted() == nil {
				t.Fatalf("resumed with %v, want the rest of the turn ending with Completed", rest)
			}
			e.checkSequences(t, "the whole turn", append(got, rest...))
		})
	}
}
