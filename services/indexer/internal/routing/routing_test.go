package routing

import (
	"testing"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	done, lift := indexerv1.Routing_ROUTING_DONE, indexerv1.Routing_ROUTING_LIFT_UP
	tests := []struct {
		name string
		in   Input
		want indexerv1.Routing
	}{
		{"financial report is informational", Input{ContentType: "financial_report", Extracts: []extract.Extract{{Type: extract.TypeFinancial, Data: map[string]any{"ticker": "BHP"}}}}, done},
		{"meeting with action items", Input{ContentType: "meeting_notes", Extracts: []extract.Extract{{Type: extract.TypeMeetingNotes, Data: map[string]any{"action_items": []any{map[string]any{"description": "fix"}}}}}}, lift},
		{"meeting without action items", Input{ContentType: "meeting_notes", Extracts: []extract.Extract{{Type: extract.TypeMeetingNotes, Data: map[string]any{"decisions": []any{"ship"}}}}}, done},
		{"open urgent ticket", Input{ContentType: "ticket", Text: "Status: Open\nPriority: P1"}, lift},
		{"closed ticket", Input{ContentType: "ticket", Text: "Status: Closed\nPriority: P1"}, done},
		{"log with errors", Input{ContentType: "log", Text: "INFO ok\nERROR ledger timeout"}, lift},
		{"clean log", Input{ContentType: "log", Text: "INFO ok\nINFO ok"}, done},
		{"e-mail asking for approval", Input{ContentType: "email", Text: "Hi,\ncould you approve the budget?\nThanks"}, lift},
		{"newsletter e-mail", Input{ContentType: "email", Text: "Hi all,\nthe office moves on Monday.\nThanks"}, done},
		{"LLM says action required", Input{ContentType: "wiki", Extracts: []extract.Extract{{Type: extract.TypeProse, Data: map[string]any{"action_required": true}}}}, lift},
	}
	for _, tc := range tests {
		got := Decide(tc.in)
		if got.Routing != tc.want || got.Reason == "" {
			t.Errorf("%s: Decide = %+v, want %v", tc.name, got, tc.want)
		}
	}
}
