package indexer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// TestImagesGoThroughTheVisionService: a ticket with a screenshot is
// ingested by the indexer, which asks the real vision service (in front of
// the real model gateway and a simulated vision model) for both stages;
// the summary and the ticket details read off the image are stored with
// the document and found by search.
func TestImagesGoThroughTheVisionService(t *testing.T) {
	t.Parallel()
	var stage1, stage2 *providersim.Rule
	m := startQualifierMesh(t, func(sim *providersim.Server) {
		stage2 = sim.When(providersim.Match{JSON: true, WithImages: true}).
			JSON(map[string]any{"key": "PAY-7", "status": "Blocked", "assignee": "Jan Novak", "title": "Ledger timeout"})
		stage1 = sim.When(providersim.Match{WithImages: true, LastUserContains: "ledger.png"}).
			Text("A Grafana panel: ledger write latency climbs to 30 seconds after the 2.4 deploy.")
	})
	docs, search := m.docs, m.search

	ctx := context.Background()
	sc := &commonv1.Scope{TenantId: "acme"}
	res, err := docs.IngestDocument(ctx, &indexerv1.IngestDocumentRequest{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_TICKET,
		SourceUrl: "https://jira.example.com/PAY-7", Title: "PAY-7 Ledger timeout",
		RawContent:  "Status: Open\nPriority: High\nIssue type: Bug\n\nCard payments fail; see the attached panel.",
		Attachments: []*indexerv1.Attachment{{Name: "ledger.png", MimeType: "image/png", Data: testkit.PNG(t, 7)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var doc *indexerv1.Document
	testkit.Eventually(t, 20*time.Second, func() bool {
		r, err := docs.GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: sc, DocumentId: res.GetDocument().GetId()})
		doc = r.GetDocument()
		return err == nil && doc.GetVisionSummary() != ""
	}, "vision summary on the document")
	if stage1.Hits() != 1 || stage2.Hits() != 1 {
		t.Fatalf("vision model calls: stage 1 %d, stage 2 %d; want 1 each", stage1.Hits(), stage2.Hits())
	}
	for _, want := range []string{"ledger write latency climbs to 30 seconds", "Ticket key: PAY-7", "Status: Blocked", "Assignee: Jan Novak"} {
		if !strings.Contains(doc.GetVisionSummary(), want) {
			t.Errorf("vision summary lacks %q:\n%s", want, doc.GetVisionSummary())
		}
	}
	// What was read off the image is searchable (the ticket's own text never
	// mentions latency or seconds).
	testkit.Eventually(t, 20*time.Second, func() bool {
		hits, err := search.Search(ctx, &indexerv1.SearchRequest{Scope: sc, Query: "ledger write latency 30 seconds", Mode: indexerv1.SearchMode_SEARCH_MODE_KEYWORD})
		return err == nil && len(hits.GetHits()) > 0 && hits.GetHits()[0].GetDocumentId() == doc.GetId() &&
			strings.Contains(hits.GetHits()[0].GetText(), "latency")
	}, "a search hit from the image's text")
}
