package retrieval_test

import (
	"strings"
	"testing"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/retrieval"
)

func TestContextMessage(t *testing.T) {
	t.Parallel()
	got := retrieval.ContextMessage([]*indexerv1.SearchHit{
		{ChunkId: "c1", DocumentId: "d1", Title: "Leave policy", SourceUrl: "https://wiki/leave", Text: "  Staff get 25 days.\n", Score: 0.91},
		{ChunkId: "c7", DocumentId: "d2", Title: "Handbook", Text: "Carry-over is capped at 5 days.", Score: 0.5},
	})
	for _, want := range []string{
		"[1] Leave policy (https://wiki/leave) document=d1 chunk=c1 score=0.910\nStaff get 25 days.\n",
		"[2] Handbook document=d2 chunk=c7 score=0.500\nCarry-over is capped at 5 days.",
		"cite sources by their number",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("context message lacks %q:\n%s", want, got)
		}
	}
}
