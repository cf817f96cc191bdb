package chat_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat/chattest"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/memstore"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/mongostore"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/strategy"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

// TestCancelMidStream: the client goes away while the answer streams. The
// model call is cancelled upstream (the provider sees the disconnect), the
// partial answer is stored marked cancelled, and the conversation is free
// for the next message, whose model request carries the partial answer.
func TestCancelMidStream(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(*testing.T) conversation.Store) {
		e := newEnv(t, envOptions{store: open(t), sim: providersim.Options{Flavor: providersim.DeepSeek}})
		e.sim.When(providersim.Match{}).Reasoning("Thinking hard.").Text("The answer is forty-two, because the question was never clear.").Hang().Times(1)
		e.sim.When(providersim.Match{}).Text("Second answer.")

		ctx, cancel := context.WithCancel(ctxTimeout(t, 30*time.Second))
		rec := &chattest.Recorder{OnEvent: func(ev *orchestratorv1.StreamMessageResponse) {
			if ev.GetResponseChunk() != nil {
				cancel()
			}
		}}
		_, err := e.loop.Send(ctx, chat.Request{Scope: testScope, ConversationID: e.conv, Content: "What is the answer?"}, rec.Emit)
		if !errors.Is(err, chat.ErrCancelled) {
			t.Fatalf("Send: %v, want ErrCancelled", err)
		}
		testkit.Eventually(t, 10*time.Second, func() bool { return e.sim.Disconnects() == 1 }, "the provider to see the stream abandoned")

		msgs := e.messages(t)
		if len(msgs) != 2 {
			t.Fatalf("stored %d messages, want the user message and the partial answer", len(msgs))
		}
		partial := msgs[1]
		streamed := text(rec)
		if !partial.Cancelled || partial.Role != conversation.RoleAssistant || partial.Content == "" ||
			!strings.HasPrefix("The answer is forty-two, because the question was never clear.", partial.Content) ||
			!strings.HasPrefix(partial.Content, streamed) || partial.Reasoning != "Thinking hard." {
			t.Errorf("stored partial answer %+v (streamed %q), want a cancelled prefix of the answer with its reasoning", partial, streamed)
		}

		if _, _, err := e.send(t, ctxTimeout(t, 30*time.Second), "Try again"); err != nil {
			t.Fatalf("next message after a cancelled turn: %v", err)
		}
		reqs := e.sim.ChatRequests()
		var roles []string
		for _, m := range reqs[len(reqs)-1].Messages {
			roles = append(roles, m.Role+":"+m.Content)
		}
		if len(roles) != 3 || roles[1] != "assistant:"+partial.Content {
			t.Errorf("next request's messages = %q, want the partial answer in the history", roles)
		}
	})
}

// TestCancelDuringTools: the client goes away while a tool runs. The tool's
// context ends, the turn stores the assistant's tool call marked cancelled
// with a cancelled result, and the history stays valid for the next turn.
func TestCancelDuringTools(t *testing.T) {
	t.Parallel()
	gate := newGate()
	e := newEnv(t, envOptions{sim: providersim.Options{Flavor: providersim.DeepSeek}, tools: []tools.Tool{gate}})
	e.sim.When(providersim.Match{LastRole: "user", WithTools: true}).Text("Waiting.").ToolCall("gate", `{"n":1}`).Times(1)
	e.sim.When(providersim.Match{}).Text("Fresh start.")

	ctx, cancel := context.WithCancel(ctxTimeout(t, 30*time.Second))
	rec := &chattest.Recorder{OnEvent: func(ev *orchestratorv1.StreamMessageResponse) {
		if ev.GetToolCallStart() != nil {
			cancel()
		}
	}}
	_, err := e.loop.Send(ctx, chat.Request{Scope: testScope, ConversationID: e.conv, Content: "Wait for it"}, rec.Emit)
	if !errors.Is(err, chat.ErrCancelled) {
		t.Fatalf("Send: %v, want ErrCancelled", err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { started, running, _, _ := gate.stats(); return started == 1 && running == 0 }, "the running tool to be cancelled")

	msgs := e.messages(t)
	if len(msgs) != 3 {
		t.Fatalf("stored %d messages %+v, want user, cancelled tool call, its result", len(msgs), msgs)
	}
	if a := msgs[1]; !a.Cancelled || len(a.ToolCalls) != 1 || a.Content != "Waiting." {
		t.Errorf("assistant message = %+v, want the tool call marked cancelled", a)
	}
	if r := msgs[2]; r.Role != conversation.RoleTool || !r.ToolError || r.ToolCallID != msgs[1].ToolCalls[0].ID || !strings.Contains(r.Content, "cancelled") {
		t.Errorf("tool result = %+v, want a cancelled error answering the call", r)
	}
	if _, _, err := e.send(t, ctxTimeout(t, 30*time.Second), "Never mind"); err != nil {
		t.Fatalf("next message: %v", err)
	}
}

// replicas returns two stores sharing one backing store, as two replicas
// of the service would: for mongo, two clients on one database.
func replicas(t *testing.T, kind string) (conversation.Store, conversation.Store) {
	t.Helper()
	if kind == "memory" {
		s := memstore.New()
		return s, s
	}
	uri, dbName := testkit.MongoURI(t)
	open := func() conversation.Store {
		client, err := mongo.Connect(options.Client().ApplyURI(uri))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
		s, err := mongostore.New(context.Background(), client.Database(dbName))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return open(), open()
}

// TestSecondConcurrentMessageRejected: while one turn runs, a second
// message to the same conversation is rejected at once with ErrBusy, on
// the same replica and on another one, and emits nothing; once the first
// turn ends, messages go through again.
func TestSecondConcurrentMessageRejected(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"memory", "mongo"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			storeA, storeB := replicas(t, kind)
			a := newEnv(t, envOptions{store: storeA, sim: providersim.Options{Flavor: providersim.DeepSeek}, cfg: chat.Config{Holder: "replica-a"}})
			a.sim.When(providersim.Match{}).Text("A long answer that takes a while to stream.").Hang().Times(1)
			a.sim.When(providersim.Match{}).Text("ok")
			b := newEnv(t, envOptions{store: storeB, sim: providersim.Options{Flavor: providersim.DeepSeek}, cfg: chat.Config{Holder: "replica-b"}})
			b.conv = a.conv

			ctx, cancel := context.WithCancel(ctxTimeout(t, 30*time.Second))
			streaming := make(chan struct{})
			first := &chattest.Recorder{OnEvent: func(ev *orchestratorv1.StreamMessageResponse) {
				if ev.GetResponseChunk() != nil {
					select {
					case <-streaming:
					default:
						close(streaming)
					}
				}
			}}
			done := make(chan error, 1)
			go func() {
				_, err := a.loop.Send(ctx, chat.Request{Scope: testScope, ConversationID: a.conv, Content: "first"}, first.Emit)
				done <- err
			}()
			select {
			case <-streaming:
			case err := <-done:
				t.Fatalf("first turn ended early: %v", err)
			}

			for name, e := range map[string]*env{"same replica": a, "other replica": b} {
				out, rec, err := e.send(t, ctxTimeout(t, 10*time.Second), "second")
				var busy *conversation.BusyError
				if !errors.As(err, &busy) || busy.Holder != "replica-a" || out != nil {
					t.Errorf("%s: Send = %v, want ErrBusy naming replica-a", name, err)
				}
				if n := len(rec.Events()); n != 0 {
					t.Errorf("%s: the rejected message emitted %d events", name, n)
				}
			}
			if n := b.sim.Count(); n != 0 {
				t.Errorf("the rejected message reached the model (%d calls)", n)
			}

			cancel()
			if err := <-done; !errors.Is(err, chat.ErrCancelled) {
				t.Fatalf("first turn: %v", err)
			}
			b.sim.When(providersim.Match{}).Text("now it is my turn")
			if _, _, err := b.send(t, ctxTimeout(t, 30*time.Second), "third"); err != nil {
				t.Fatalf("message after the first turn ended: %v", err)
			}
			if users := b.userMessages(t); strings.Join(users, ",") != "first,third" {
				t.Errorf("stored user messages %v, want first and third only", users)
			}
		})
	}
}

// TestLeaseRenewedDuringLongTurn: a turn that outlasts its lease TTL keeps
// the conversation, because it renews the lease; another replica is still
// rejected after several TTLs.
func TestLeaseRenewedDuringLongTurn(t *testing.T) {
	t.Parallel()
	storeA, storeB := replicas(t, "mongo")
	const ttl = time.Second // renewals every third: one may be late by half a second on a loaded machine
	a := newEnv(t, envOptions{store: storeA, sim: providersim.Options{Flavor: providersim.DeepSeek}, cfg: chat.Config{LeaseTTL: ttl, Holder: "replica-a"}})
	a.sim.When(providersim.Match{}).Text("slow").Hang()
	b := newEnv(t, envOptions{store: storeB, sim: providersim.Options{Flavor: providersim.DeepSeek}, cfg: chat.Config{LeaseTTL: ttl, Holder: "replica-b"}})
	b.conv = a.conv

	ctx, cancel := context.WithCancel(ctxTimeout(t, 30*time.Second))
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, _, err := a.send(t, ctx, "long")
		done <- err
	}()
	testkit.Eventually(t, 10*time.Second, func() bool { return a.sim.Count() == 1 }, "the first turn to reach the model")
	testkit.Eventually(t, 10*time.Second, func() bool { return time.Since(start) > 4*ttl }, "four lease lifetimes to pass")
	if _, _, err := b.send(t, ctxTimeout(t, 10*time.Second), "intruder"); !errors.Is(err, conversation.ErrBusy) {
		t.Errorf("another replica after 4 TTLs: %v, want ErrBusy (the lease must have been renewed)", err)
	}
	cancel()
	<-done
}

// TestExpiredLeaseOfCrashedReplica: a replica that died mid-turn blocks
// the conversation only until its lease expires.
func TestExpiredLeaseOfCrashedReplica(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	clock := t0
	store := memstore.New()
	model := chattest.StartModel(t, providersim.Options{Flavor: providersim.DeepSeek})
	model.Sim.When(providersim.Match{}).Text("ok")
	reg, _ := tools.NewRegistry(tools.Options{})
	set, _ := strategy.NewSet("deepseek_single", strategy.Builtin()...)
	loop, err := chat.New(chat.Config{Model: chattest.ModelName, LeaseTTL: 30 * time.Second},
		chat.Deps{Store: store, Model: model.Client, Tools: reg, Strategies: set, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	scope := conversation.Scope{TenantID: testScope.TenantId, ProjectID: testScope.ProjectId}
	if err := store.Create(context.Background(), &conversation.Conversation{ID: "c1", Scope: scope, CreateTime: t0, UpdateTime: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.AcquireLease(context.Background(), scope, "c1", conversation.Lease{ID: "dead", Holder: "crashed-pod", Until: t0.Add(30 * time.Second)}, t0); err != nil {
		t.Fatal(err)
	}
	req := chat.Request{Scope: testScope, ConversationID: "c1", Content: "hello"}
	clock = t0.Add(10 * time.Second)
	if _, err := loop.Send(ctxTimeout(t, 10*time.Second), req, nil); !errors.Is(err, conversation.ErrBusy) {
		t.Fatalf("Send while the dead lease is live: %v, want ErrBusy", err)
	}
	clock = t0.Add(31 * time.Second)
	if _, err := loop.Send(ctxTimeout(t, 10*time.Second), req, nil); err != nil {
		t.Fatalf("Send after the dead lease expired: %v", err)
	}
}

// TestStrategiesShapeTheRequest checks what each strategy asks of the
// provider, through the real adapter of that provider family.
func TestStrategiesShapeTheRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		strategy string
		mode     strategy.Mode
		sim      providersim.Options
		check    func(t *testing.T, r providersim.Request, rec *chattest.Recorder)
	}{
		{"deepseek_single", strategy.Progressive, providersim.Preset(providersim.DeepSeek), func(t *testing.T, r providersim.Request, rec *chattest.Recorder) {
			if !r.Stream || r.Thinking || r.ToolChoice == nil {
				t.Errorf("stream %v thinking %v tool_choice %v; want a streamed call, no thinking override, tool_choice auto", r.Stream, r.Thinking, r.ToolChoice)
			}
			if n := countChunks(rec); n < 2 {
				t.Errorf("%d response chunks, want token deltas", n)
			}
		}},
		{"deepseek_single", strategy.FinalOnly, providersim.Preset(providersim.DeepSeek), func(t *testing.T, r providersim.Request, rec *chattest.Recorder) {
			if r.Stream {
				t.Errorf("FINAL_ONLY streamed upstream; want one unary call")
			}
			if n := countChunks(rec); n != 1 {
				t.Errorf("%d response chunks, want the whole answer once", n)
			}
		}},
		{"qwen_single_thinking", strategy.FinalOnly, providersim.Preset(providersim.Qwen), func(t *testing.T, r providersim.Request, rec *chattest.Recorder) {
			if !r.Stream || !r.Thinking || r.Body["enable_thinking"] != true {
				t.Errorf("stream %v enable_thinking %v; Qwen thinking must stream upstream even in FINAL_ONLY", r.Stream, r.Body["enable_thinking"])
			}
			if _, n := reasoningByIteration(rec); n != 1 || countChunks(rec) != 1 {
				t.Errorf("%d reasoning and %d response chunks, want each whole, once", n, countChunks(rec))
			}
		}},
		{"qwen_single_instruct", strategy.Progressive, providersim.Preset(providersim.Qwen), func(t *testing.T, r providersim.Request, _ *chattest.Recorder) {
			if r.Body["enable_thinking"] != false || r.Thinking {
				t.Errorf("enable_thinking = %v, want false", r.Body["enable_thinking"])
			}
		}},
		{"ollama_single", strategy.Progressive, providersim.Preset(providersim.Ollama), func(t *testing.T, r providersim.Request, _ *chattest.Recorder) {
			if !r.Native || r.ToolChoice != nil || !r.HasTool("lookup") {
				t.Errorf("native %v tool_choice %v tools %v; want Ollama's /api/chat with tools and no tool_choice", r.Native, r.ToolChoice, r.Tools)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.strategy+"/"+tc.mode.String(), func(t *testing.T) {
			t.Parallel()
			tc.sim.ChunkDelay = 2 * time.Millisecond // deltas arrive apart, so the gateway cannot merge them
			e := newEnv(t, envOptions{sim: tc.sim, strategy: tc.strategy, cfg: chat.Config{Mode: tc.mode}, tools: []tools.Tool{lookupTool{}}})
			e.sim.When(providersim.Match{}).Reasoning("Short thought, then the answer.").Text("A final answer long enough for several deltas.")
			out, rec, err := e.send(t, ctxTimeout(t, 30*time.Second), "hi")
			if err != nil {
				t.Fatalf("Send: %v", err)
			}
			if text(rec) != "A final answer long enough for several deltas." || out.Message.Reasoning != "Short thought, then the answer." {
				t.Errorf("answer %q reasoning %q", text(rec), out.Message.Reasoning)
			}
			r, _ := e.sim.LastRequest()
			tc.check(t, r, rec)
		})
	}
}

func countChunks(rec *chattest.Recorder) int {
	n := 0
	for _, e := range rec.Events() {
		if e.GetResponseChunk() != nil {
			n++
		}
	}
	return n
}

// TestStrategyModels: a strategy can be routed to its own logical model,
// so conversations on different strategies reach different providers.
func TestStrategyModels(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{
		sim: providersim.Options{Flavor: providersim.DeepSeek}, models: []string{"thinker"}, strategy: "qwen_single_thinking",
		cfg: chat.Config{Models: map[string]string{"qwen_single_thinking": "thinker"}},
	})
	e.sim.When(providersim.Match{}).Text("ok")
	if _, _, err := e.send(t, ctxTimeout(t, 30*time.Second), "hi"); err != nil {
		t.Fatal(err)
	}
	e.conv = e.newConversation(t, "deepseek_single")
	if _, _, err := e.send(t, ctxTimeout(t, 30*time.Second), "hi"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range e.sim.ChatRequests() {
		got = append(got, r.Model)
	}
	if strings.Join(got, ",") != "sim-thinker,sim-model" {
		t.Errorf("provider models requested = %v, want sim-thinker (qwen_single_thinking) then sim-model (the default)", got)
	}
}

// TestNextMessageAsSoonAsTheLastEventArrives: a turn frees its
// conversation before it sends its last event, so a client that sends the
// next message (or deletes the conversation) the moment it gets Completed
// is not refused as busy. The next message is sent from inside the
// Completed event's delivery, before the first turn returns.
func TestNextMessageAsSoonAsTheLastEventArrives(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.sim.When(providersim.Match{}).Text("done")
	var next error
	var sent bool
	first := &chattest.Recorder{OnEvent: func(ev *orchestratorv1.StreamMessageResponse) {
		if ev.GetCompleted() == nil || sent {
			return
		}
		sent = true
		_, _, next = e.send(t, ctxTimeout(t, 20*time.Second), "second")
	}}
	if _, err := e.loop.Send(ctxTimeout(t, 20*time.Second), chat.Request{Scope: testScope, ConversationID: e.conv, Content: "first"}, first.Emit); err != nil {
		t.Fatalf("first turn: %v", err)
	}
	if !sent || next != nil {
		t.Fatalf("the message sent on Completed: sent %v, %v; want it taken", sent, next)
	}
	if users := e.userMessages(t); strings.Join(users, ",") != "first,second" {
		t.Errorf("user messages %v, want first, second", users)
	}
}
