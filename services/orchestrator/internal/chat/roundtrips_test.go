package chat_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"google.golang.org/grpc"

	"github.com/agentmesh/agentmesh/libs/events"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat/chattest"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/mongostore"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/grpcapi"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/strategy"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

// TestChatTurnRoundTrips holds a chat turn (no tools) to its budget of
// database round trips, so a regression in the hot path is caught without
// timing anything: every one of them is a lookup or write by _id (the only
// kind the embedded FerretDB does not answer by parsing a whole
// collection), and their number does not depend on how many conversations
// are stored. With many writers: take the lease (read the conversation,
// the lease and the next generation, insert it), read the window, append
// the question and the answer (insert, update the window, twice), release
// (two reads, three writes): 15. A single writer reads nothing it wrote
// itself, keeps its leases in memory and writes the window only every 16
// messages: the question, the answer and the conversation's update time,
// 3 writes (6 while it wrote its leases), 4 in a turn that stores the
// window. The update time is written up to a second later, once for all
// the conversation's turns in that second (see mongostore.touchEvery):
// counted here once per turn, as a turn alone makes it. A resumable turn
// (an event bus) makes the same round trips: its events go to JetStream,
// one publish each, never to the database.
func TestChatTurnRoundTrips(t *testing.T) {
	t.Parallel()
	budgets := map[bool]int{false: 15, true: 4} // many writers, single writer
	for _, tc := range []struct {
		single, resumable bool
	}{{false, false}, {true, false}, {false, true}, {true, true}} {
		single := tc.single
		name := map[bool]string{false: "many writers", true: "single writer"}[single]
		var bus *events.Bus
		if tc.resumable {
			name += ", resumable"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, rt := testkit.MongoDBCounted(t)
			if single {
				mongox.MarkSingleWriter(db.Client())
			}
			if tc.resumable {
				bus = newBus(t)
			}
			client, store := startTurns(t, db, bus)
			ctx := context.Background()
			conv, err := client.CreateConversation(ctx, &orchestratorv1.CreateConversationRequest{Scope: testScope})
			if err != nil {
				t.Fatal(err)
			}
			id := conv.GetConversation().GetId()
			runTurn(t, client, id) // the first turn of a conversation differs
			rt.Reset()
			before := streamLastSeq(t, bus)
			runTurn(t, client, id)
			if err := store.Close(ctx); err != nil { // writes what a single writer holds back
				t.Fatal(err)
			}
			t.Logf("%s: one chat turn made %d round trips: %s", name, rt.Total(), rt)
			if bus != nil {
				t.Logf("%s: one chat turn made %d JetStream publishes", name, streamLastSeq(t, bus)-before)
			}
			if rt.Total() > budgets[single] {
				t.Errorf("a chat turn made %d round trips, budget %d: %s", rt.Total(), budgets[single], rt)
			}
		})
	}
}

// streamLastSeq is the last sequence of AM_EVENTS, 0 without a bus.
func streamLastSeq(t *testing.T, bus *events.Bus) uint64 {
	t.Helper()
	if bus == nil {
		return 0
	}
	s, err := bus.JetStream().Stream(context.Background(), events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

func startTurns(t *testing.T, db *mongo.Database, bus *events.Bus) (orchestratorv1.ConversationServiceClient, *mongostore.Store) {
	t.Helper()
	model := chattest.StartModel(t, providersim.Options{Flavor: providersim.DeepSeek, NoRecord: true})
	model.Sim.When(providersim.Match{}).Text("Here is the answer.")
	store, err := mongostore.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := tools.NewRegistry(tools.Options{})
	set, _ := strategy.NewSet("deepseek_single", strategy.Builtin()...)
	loop, err := chat.New(chat.Config{Model: chattest.ModelName}, chat.Deps{Store: store, Model: model.Client, Tools: reg, Strategies: set, Events: bus})
	if err != nil {
		t.Fatal(err)
	}
	conn := testkit.StartGRPC(t, func(s *grpc.Server) {
		orchestratorv1.RegisterConversationServiceServer(s, grpcapi.NewConversations(store, loop, set))
	})
	return orchestratorv1.NewConversationServiceClient(conn), store
}

func runTurn(t *testing.T, client orchestratorv1.ConversationServiceClient, id string) {
	t.Helper()
	st, err := client.StreamMessage(context.Background(), &orchestratorv1.StreamMessageRequest{Scope: testScope, ConversationId: id, Content: "Hello?"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if e := ev.GetError(); e != nil {
			t.Fatalf("turn failed: %v", e)
		}
	}
}
