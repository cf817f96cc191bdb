package grpcapi_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/embed"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgatewaytest"
)

// startGateway runs the real model gateway in-process with its built-in
// simulator provider and returns a client.
func startGateway(t *testing.T) modelv1.ModelServiceClient {
	t.Helper()
	addr := modelgatewaytest.Start(t, "", map[string]string{"MODELGATEWAY_PROVIDER": "sim", "METRICS_ADDR": ""})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return modelv1.NewModelServiceClient(conn)
}

const incidentMail = `From: ana@example.com
To: payments-oncall@example.com
Subject: Ledger timeouts after the 2.4 deploy

Hi team,

Since this morning's deploy of payments 2.4 the ledger service has been timing out
for roughly one request in twenty. Customers in Europe see failed card payments.
Rolling back did not help, so the cause may be the new connection pool settings.

Thanks,
Ana`

// TestLLMProseExtractorThroughModelGateway runs the LLM extractor against
// the real model gateway (simulated provider): the answer conforms to the
// schema, becomes a "prose" extract, and its entities enter the graph.
// With the gateway unreachable, the extractor fails on the job and the
// rule-based extractors' results are kept.
func TestLLMProseExtractorThroughModelGateway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	models := startGateway(t)
	prose, err := extract.NewProse(models, "chat", 4000)
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, newInfra(t), []extract.Extractor{extract.Financial{}, prose})
	sc := scope("acme", "")
	res := h.ingest(t, sc, email, "mailto:ana@example.com/ledger", "Ledger timeouts", incidentMail)
	doc := h.settled(t, sc, res.GetDocument().GetId())
	if doc.GetExtractionStatus() != indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED || len(doc.GetExtracts()) != 1 {
		t.Fatalf("status %v, extracts %v", doc.GetExtractionStatus(), doc.GetExtracts())
	}
	e := doc.GetExtracts()[0]
	data := e.GetData().AsMap()
	if e.GetType() != extract.TypeProse || e.GetExtractor() != "llm_prose" || e.GetConfidence() != extract.ProseConfidence {
		t.Fatalf("extract %v", e)
	}
	summary, _ := data["summary"].(string)
	ents, _ := data["entities"].([]any)
	if !strings.HasPrefix(summary, "[simulated]") || len(ents) == 0 {
		t.Fatalf("extract data %v", data)
	}
	name := ents[0].(map[string]any)["name"].(string)
	kind := ents[0].(map[string]any)["kind"].(string)
	key := extract.Entity{Kind: kind, Name: name}.Key()
	if _, err := h.graph.GetNode(ctx, &indexerv1.GetNodeRequest{Scope: sc, Key: key}); err != nil {
		t.Fatalf("entity %s from the LLM extract is not in the graph: %v", key, err)
	}
	if doc.GetContentType() != "email" || doc.GetRouting() != indexerv1.Routing_ROUTING_DONE {
		// The simulated answer says action_required=false and the mail
		// asks for nothing explicitly.
		t.Fatalf("content type %q, routing %v (%s)", doc.GetContentType(), doc.GetRouting(), doc.GetRoutingReason())
	}

	// The gateway is down: the LLM extractor fails on the job, the
	// financial extractor still runs.
	down, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	broken, _ := extract.NewProse(modelv1.NewModelServiceClient(down), "chat", 4000)
	h2 := start(t, newInfra(t), []extract.Extractor{extract.Financial{}, broken})
	r2 := h2.ingest(t, sc, report, "https://x/bhp", "BHP FY24", bhpReport+"\n"+incidentMail)
	d2 := h2.settled(t, sc, r2.GetDocument().GetId())
	runs := h2.job(t, sc, r2.GetExtractionJobId()).GetExtractorRuns()
	if d2.GetExtractionStatus() != indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_PARTIALLY_FAILED || len(d2.GetExtracts()) != 1 ||
		runs[1].GetStatus() != indexerv1.ExtractorRunStatus_EXTRACTOR_RUN_STATUS_FAILED || !strings.Contains(runs[1].GetError(), "model gateway") {
		t.Fatalf("with the gateway down: status %v, %d extracts, runs %v", d2.GetExtractionStatus(), len(d2.GetExtracts()), runs)
	}
}

// TestModelGatewayEmbedder embeds through the real gateway's Embed.
func TestModelGatewayEmbedder(t *testing.T) {
	t.Parallel()
	models := startGateway(t)
	e, err := embed.NewModelGateway(models, "embed", 64, 2)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := e.Embed(context.Background(), []string{"ledger timeout", "copper price", "dividend"})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 3 || len(vs[0]) != 64 || len(vs[2]) != 64 {
		t.Fatalf("got %d vectors of %d", len(vs), len(vs[0]))
	}
	if e.Name() != "modelgateway/embed/64" {
		t.Fatalf("name %q", e.Name())
	}
}
