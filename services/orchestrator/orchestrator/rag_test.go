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
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/indexer/indexer"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat/chattest"
)

// startIndexer runs the real indexer in-process and returns its address.
func startIndexer(t *testing.T, env map[string]string) string {
	t.Helper()
	var cfg indexer.Config
	if err := config.Load("", &cfg, config.Map(env)); err != nil {
		t.Fatal(err)
	}
	return testkit.RunService(t, "indexer", func(ctx context.Context, rt service.Runtime) error {
		return indexer.Run(ctx, &cfg, rt)
	})
}

// TestRetrievalWithTheIndexer: with the real indexer holding a document,
// the turn opens with the retrieved passage as a system message, and the
// model's rag_search call returns the passage as its tool result.
func TestRetrievalWithTheIndexer(t *testing.T) {
	t.Parallel()
	model := chattest.StartModel(t, providersim.Options{Flavor: providersim.DeepSeek})
	// Only a request whose system message carries the ticket gets the tool
	// call; without retrieval the simulator's default answer would end the turn.
	model.Sim.When(providersim.Match{LastRole: "user", SystemContains: "ledger times out"}).
		ToolCall("rag_search", map[string]any{"query": "ledger timeout card payments", "limit": 3})
	model.Sim.When(providersim.Match{LastRole: "tool"}).Text("Since the 2.4 deploy, per PAY-7.")

	uri, db := testkit.MongoURI(t)
	nats := testkit.NewNATS(t).URL()
	idxAddr := startIndexer(t, map[string]string{
		"MONGO_URI": uri, "MONGO_DATABASE": db, "NATS_URL": nats, "INDEXER_DATA_DIR": t.TempDir(),
		"INDEXER_LLM_EXTRACTION": "false", "MODELGATEWAY_ADDR": model.Conn.Target(), "VISION_ADDR": chattest.UnreachableAddr(t),
	})
	idxConn, err := grpc.NewClient(idxAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer idxConn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	scope := &commonv1.Scope{TenantId: "acme"}
	if _, err := indexerv1.NewDocumentServiceClient(idxConn).IngestDocument(ctx, &indexerv1.IngestDocumentRequest{
		Scope: scope, SourceType: indexerv1.SourceType_SOURCE_TYPE_TICKET, SourceUrl: "https://jira.example.com/PAY-7",
		Title: "PAY-7 Ledger timeout", RawContent: "Status: Open\nPriority: High\n\nThe ledger times out for card payments since the 2.4 deploy.",
	}); err != nil {
		t.Fatalf("IngestDocument: %v", err)
	}
	search := indexerv1.NewSearchServiceClient(idxConn)
	testkit.Eventually(t, 20*time.Second, func() bool {
		r, err := search.Search(ctx, &indexerv1.SearchRequest{Scope: scope, Query: "card payments time out"})
		return err == nil && len(r.GetHits()) > 0
	}, "the document to be searchable")

	conn, err := runOrchestrator(t, map[string]string{
		"MONGO_URI": uri, "MONGO_DATABASE": db, "NATS_URL": nats,
		"MODELGATEWAY_ADDR": model.Conn.Target(), "INDEXER_ADDR": idxAddr, "ORCHESTRATOR_MODEL": chattest.ModelName,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	client := orchestratorv1.NewConversationServiceClient(conn)
	c, err := client.CreateConversation(ctx, &orchestratorv1.CreateConversationRequest{Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	st, err := client.StreamMessage(ctx, &orchestratorv1.StreamMessageRequest{Scope: scope, ConversationId: c.GetConversation().GetId(), Content: "Why do card payments time out?"})
	if err != nil {
		t.Fatal(err)
	}
	var status *orchestratorv1.StatusUpdate
	var result *orchestratorv1.ToolCallResult
	var done *orchestratorv1.Completed
	for {
		ev, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		switch {
		case ev.GetStatusUpdate() != nil:
			status = ev.GetStatusUpdate()
		case ev.GetToolCallResult() != nil:
			result = ev.GetToolCallResult()
		case ev.GetCompleted() != nil:
			done = ev.GetCompleted()
		}
	}
	if status.GetKind() != "retrieval" || !strings.Contains(status.GetMessage(), "Found") {
		t.Errorf("status update %v, want the passages found", status)
	}
	// The passages the model was given are in the turn's events, numbered
	// alike, so a client can show what the answer drew on.
	if ps := status.GetPassages(); len(ps) == 0 || ps[0].GetTitle() != "PAY-7 Ledger timeout" ||
		ps[0].GetSourceUrl() != "https://jira.example.com/PAY-7" || ps[0].GetDocumentId() == "" || ps[0].GetChunkId() == "" ||
		!strings.Contains(ps[0].GetText(), "since the 2.4 deploy") || ps[0].GetScore() <= 0 {
		t.Errorf("retrieved passages %v, want the ticket's passage first", ps)
	}
	if result.GetIsError() || !strings.Contains(result.GetResult(), "PAY-7 Ledger timeout") || !strings.Contains(result.GetResult(), "since the 2.4 deploy") {
		t.Errorf("rag_search result %v, want the ticket's passage", result)
	}
	if done.GetIterations() != 2 {
		t.Errorf("completed %v, want 2 iterations", done)
	}
	first := model.Sim.ChatRequests()[0]
	if first.Messages[0].Role != "system" || !strings.Contains(first.Messages[0].Content, "[1] PAY-7 Ledger timeout (https://jira.example.com/PAY-7)") {
		t.Errorf("first model request opens with %+v, want the retrieved context", first.Messages[0])
	}
}
