package orchestrator_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentmesh/agentmesh/libs/config"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat/chattest"
	"github.com/agentmesh/agentmesh/services/orchestrator/orchestrator"
)

// runOrchestrator starts the whole service with Run, as the binary and
// `agentmesh up` do, and returns a connection to it.
func runOrchestrator(t *testing.T, env map[string]string) (*grpc.ClientConn, error) {
	t.Helper()
	var cfg orchestrator.Config
	if err := config.Load("", &cfg, config.Map(env)); err != nil {
		t.Fatalf("config: %v", err)
	}
	svc, err := testkit.TryStartService(t, "orchestrator", func(ctx context.Context, rt service.Runtime) error {
		return orchestrator.Run(ctx, &cfg, rt)
	})
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(svc.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, nil
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
			client := orchestratorv1.NewConversationServiceClient(conn)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			scope := &commonv1.Scope{TenantId: "acme"}
			c, err := client.CreateConversation(ctx, &orchestratorv1.CreateConversationRequest{Scope: scope})
			if err != nil {
				t.Fatal(err)
			}
			st, err := client.StreamMessage(ctx, &orchestratorv1.StreamMessageRequest{Scope: scope, ConversationId: c.GetConversation().GetId(), Content: "How much leave?"})
			if err != nil {
				t.Fatal(err)
			}
			var last *orchestratorv1.StreamMessageResponse
			for {
				ev, err := st.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("stream: %v", err)
				}
				last = ev
			}
			if last.GetCompleted().GetIterations() != 2 {
				t.Fatalf("last event %v, want Completed after 2 iterations", last)
			}
			tools, err := orchestratorv1.NewToolServiceClient(conn).ListTools(ctx, &orchestratorv1.ListToolsRequest{})
			if err != nil || len(tools.GetTools()) != 1 {
				t.Errorf("ListTools = %v, %v", tools, err)
			}
		})
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
