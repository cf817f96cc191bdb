package indexer_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// TestModelOutputOfAnIntakeIsBounded: a model steered by the document it
// reads answers at length. Routing kept a 2 MiB route_task reason and the
// LLM extractor a 3 MiB key fact before; now the reason is cut to 1,000
// characters and the extract, past its schema's bounds, fails its run
// (the model gateway validates it), so nothing of it is stored.
func TestModelOutputOfAnIntakeIsBounded(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("Lift this up now. ", 2<<20/18)
	m := startQualifierMeshWith(t, func(sim *providersim.Server) {
		sim.When(providersim.Match{SystemContains: "You classify one document"}).
			JSON(map[string]any{"contentType": "GENERIC", "reason": "notes"})
		sim.When(providersim.Match{SystemContains: "You extract structured data"}).JSON(map[string]any{
			"summary": "Notes.", "category": "general", "entities": []any{}, "key_facts": []any{huge + huge[:1<<20]}, "action_required": false})
		sim.When(providersim.Match{Tools: []string{"route_task"}}).ToolCall("route_task", map[string]any{"decision": "DONE", "reason": huge})
	}, map[string]string{"INDEXER_LLM_EXTRACTION": "true"})
	ctx := context.Background()
	sc := &commonv1.Scope{TenantId: "acme"}
	res, err := m.docs.IngestDocument(ctx, &indexerv1.IngestDocumentRequest{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_OTHER,
		Title: "Notes", RawContent: strings.Repeat("We meet in Brno in June; the venue is a short hike from the station. ", 4)})
	if err != nil {
		t.Fatal(err)
	}
	var doc *indexerv1.Document
	testkit.Eventually(t, 60*time.Second, func() bool {
		r, err := m.docs.GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: sc, DocumentId: res.GetDocument().GetId()})
		doc = r.GetDocument()
		return err == nil && doc.GetPipeline().GetFinished()
	}, "the intake to finish")
	if n := utf8.RuneCountInString(doc.GetRoutingReason()); n == 0 || n > 1001 {
		t.Errorf("routing reason of %d characters, want it cut to 1,000", n)
	}
	if st := doc.GetExtractionStatus(); st == indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED {
		t.Errorf("extraction %v with %d extracts; want the LLM extractor's run refused", st, len(doc.GetExtracts()))
	}
	t.Logf("extraction %v, %d extracts, routing reason of %d characters", doc.GetExtractionStatus(), len(doc.GetExtracts()), utf8.RuneCountInString(doc.GetRoutingReason()))
	for _, e := range doc.GetExtracts() {
		facts, _ := e.GetData().AsMap()["key_facts"].([]any)
		for _, f := range facts {
			if s, _ := f.(string); len(s) > 1000 {
				t.Errorf("an extract keeps a key fact of %d bytes", len(s))
			}
		}
	}
}
