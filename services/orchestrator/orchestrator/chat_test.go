package orchestrator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentmesh/agentmesh/libs/config"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat/chattest"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/mongostore"
	"github.com/agentmesh/agentmesh/services/orchestrator/orchestrator"
)

// runOrchestrator starts the whole service with Run, as the binary and
// `agentmesh up` do, and returns a connection to it.
func runOrchestrator(t *testing.T, env map[string]string) (*grpc.ClientConn, error) {
	t.Helper()
	conn, _, err := runOrchestratorService(t, env)
	return conn, err
}

// runOrchestratorService is runOrchestrator that also returns the running
// service, to stop it.
func runOrchestratorService(t *testing.T, env map[string]string) (*grpc.ClientConn, *testkit.Running, error) {
	t.Helper()
	var cfg orchestrator.Config
	if err := config.Load("", &cfg, config.Map(env)); err != nil {
		t.Fatalf("config: %v", err)
	}
	svc, err := testkit.TryStartService(t, "orchestrator", func(ctx context.Context, rt service.Runtime) error {
		return orchestrator.Run(ctx, &cfg, rt)
	})
	if err != nil {
		return nil, nil, err
	}
	conn, err := grpc.NewClient(svc.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, svc, nil
}

// TestChatThroughRun runs a tool-using turn through the service as
// deployed, once per CONVERSATION_STORE mode, with the real model gateway
// and an indexer that is down.
func TestChatThroughRun(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"memory", "mongo"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			model := chattest.StartModel(t, providersim.Options{Flavor: providersim.DeepSeek})
			model.Sim.When(providersim.Match{LastRole: "user"}).ToolCall("rag_search", map[string]any{"query": "leave"})
			model.Sim.When(providersim.Match{LastRole: "tool"}).Text("Done.")
			uri, db := testkit.MongoURI(t)
			conn, err := runOrchestrator(t, map[string]string{
				"MONGO_URI": uri, "MONGO_DATABASE": db, "NATS_URL": testkit.NewNATS(t).URL(),
				"MODELGATEWAY_ADDR": model.Conn.Target(), "INDEXER_ADDR": chattest.UnreachableAddr(t),
				"CONVERSATION_STORE": store, "ORCHESTRATOR_MAX_ITERATIONS": "4", "ORCHESTRATOR_MODEL": chattest.ModelName,
			})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			_, events := turn(t, conn, "acme", "How much leave?")
			if last := events[len(events)-1]; last.GetCompleted().GetIterations() != 2 {
				t.Fatalf("last event %v, want Completed after 2 iterations", last)
			}
			tools, err := orchestratorv1.NewToolServiceClient(conn).ListTools(t.Context(), &orchestratorv1.ListToolsRequest{})
			if err != nil || len(tools.GetTools()) != 1 {
				t.Errorf("ListTools = %v, %v", tools, err)
			}
		})
	}
}

// TestStopWritesHeldUpdateTimes: the database's single writer holds a
// conversation's update time back for up to a second after a turn (see
// mongostore.touchEvery); a graceful stop writes it before it closes the
// database.
func TestStopWritesHeldUpdateTimes(t *testing.T) {
	t.Parallel()
	model := chattest.StartModel(t, providersim.Options{Flavor: providersim.DeepSeek})
	model.Sim.When(providersim.Match{}).Text("Done.")
	uri, dbName := testkit.MongoURI(t)
	conn, svc, err := runOrchestratorService(t, map[string]string{
		"MONGO_URI": uri, "MONGO_DATABASE": dbName, "MONGO_SINGLE_WRITER": "true", "NATS_URL": testkit.NewNATS(t).URL(),
		"MODELGATEWAY_ADDR": model.Conn.Target(), "INDEXER_ADDR": chattest.UnreachableAddr(t), "ORCHESTRATOR_MODEL": chattest.ModelName,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	id, _ := turn(t, conn, "acme", "Hello?")
	client := orchestratorv1.NewConversationServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	scope := &commonv1.Scope{TenantId: "acme"}
	got, err := client.GetConversation(ctx, &orchestratorv1.GetConversationRequest{Scope: scope, ConversationId: id})
	if err != nil {
		t.Fatal(err)
	}
	want := got.GetConversation().GetUpdateTime().AsTime()
	if created := got.GetConversation().GetCreateTime().AsTime(); !want.After(created) {
		t.Fatalf("update time after the turn %v; want later than the creation's %v", want, created)
	}
	svc.Stop()
	client2, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client2.Disconnect(ctx) }()
	var d struct {
		UpdateTime time.Time `bson:"update_time"`
	}
	if err := client2.Database(dbName).Collection(mongostore.ConversationsCollection).FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d); err != nil {
		t.Fatal(err)
	}
	if !d.UpdateTime.Equal(want) {
		t.Errorf("stored update time after a graceful stop %v; want the turn's %v", d.UpdateTime.UTC(), want)
	}
}

// TestChatConfigRejected: an invalid chat setting stops the start with a
// message naming the variable.
func TestChatConfigRejected(t *testing.T) {
	t.Parallel()
	uri, db := testkit.MongoURI(t)
	base := map[string]string{"MONGO_URI": uri, "MONGO_DATABASE": db, "NATS_URL": testkit.NewNATS(t).URL()}
	for name, bad := range map[string]map[string]string{
		"CONVERSATION_STORE":           {"CONVERSATION_STORE": "redis"},
		"ORCHESTRATOR_STRATEGY":        {"ORCHESTRATOR_STRATEGY": "gpt_magic"},
		"ORCHESTRATOR_STREAMING_MODE":  {"ORCHESTRATOR_STREAMING_MODE": "SOMETIMES"},
		"ORCHESTRATOR_MAX_ITERATIONS":  {"ORCHESTRATOR_MAX_ITERATIONS": "0"},
		"ORCHESTRATOR_STRATEGY_MODELS": {"ORCHESTRATOR_STRATEGY_MODELS": "gpt_magic=chat"},
	} {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range bad {
				env[k] = v
			}
			_, err := runOrchestrator(t, env)
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("Run with %v: %v, want an error naming %s", bad, err, name)
			}
		})
	}
}
