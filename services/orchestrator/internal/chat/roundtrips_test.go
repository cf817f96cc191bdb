package chat_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"google.golang.org/grpc"

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
// itself: 8 writes.
func TestChatTurnRoundTrips(t *testing.T) {
	t.Parallel()
	budgets := map[bool]int{false: 15, true: 8} // many writers, single writer
	for _, single := range []bool{false, true} {
		name := map[bool]string{false: "many writers", true: "single writer"}[single]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, rt := testkit.MongoDBCounted(t)
			if single {
				mongox.MarkSingleWriter(db.Client())
			}
			client := startTurns(t, db)
			ctx := context.Background()
			conv, err := client.CreateConversation(ctx, &orchestratorv1.CreateConversationRequest{Scope: testScope})
			if err != nil {
				t.Fatal(err)
			}
			id := conv.GetConversation().GetId()
			runTurn(t, client, id) // the first turn of a conversation differs
			rt.Reset()
			runTurn(t, client, id)
			t.Logf("%s: one chat turn made %d round trips: %s", name, rt.Total(), rt)
			if rt.Total() > budgets[single] {
				t.Errorf("a chat turn made %d round trips, budget %d: %s", rt.Total(), budgets[single], rt)
			}
		})
	}
}

func startTurns(t *testing.T, db *mongo.Database) orchestratorv1.ConversationServiceClient {
	t.Helper()
	model := chattest.StartModel(t, providersim.Options{Flavor: providersim.DeepSeek, NoRecord: true})
	model.Sim.When(providersim.Match{}).Text("Here is the answer.")
	store, err := mongostore.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := tools.NewRegistry(tools.Options{})
	set, _ := strategy.NewSet("deepseek_single", strategy.Builtin()...)
	loop, err := chat.New(chat.Config{Model: chattest.ModelName}, chat.Deps{Store: store, Model: model.Client, Tools: reg, Strategies: set})
	if err != nil {
		t.Fatal(err)
	}
	conn := testkit.StartGRPC(t, func(s *grpc.Server) {
		orchestratorv1.RegisterConversationServiceServer(s, grpcapi.NewConversations(store, loop, set))
	})
	return orchestratorv1.NewConversationServiceClient(conn)
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
