package contenttype

import (
	"strings"
	"testing"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
)

func TestDetect(t *testing.T) {
	t.Parallel()
	const (
		email  = indexerv1.SourceType_SOURCE_TYPE_EMAIL
		ticket = indexerv1.SourceType_SOURCE_TYPE_TICKET
		wiki   = indexerv1.SourceType_SOURCE_TYPE_WIKI
		other  = indexerv1.SourceType_SOURCE_TYPE_OTHER
		none   = indexerv1.SourceType_SOURCE_TYPE_UNSPECIFIED
	)
	tests := []struct {
		name, title, text string
		source            indexerv1.SourceType
		want              string
	}{
		{"e-mail by headers, whatever the source", "", "From: ana@example.com\nTo: ops@example.com\nSubject: ledger\n\nHi team,\nthe ledger is slow.\nThanks,\nAna", other, Email},
		{"ticket fields and key", "PAY-142 Ledger timeout", "Status: Open\nPriority: High\nAssignee: bo\n\nSteps to reproduce\n1. pay", none, Ticket},
		{"log lines beat the ticket source", "", strings.Repeat("2024-05-01T10:00:01Z INFO payment ok\n", 5) + "2024-05-01T10:00:02Z ERROR ledger timeout\n", ticket, Log},
		{"financial table in a wiki page", "BHP FY24", "| Metric | FY24 |\n|---|---|\n| Revenue | 55.7 |\n| Net income | 7.9 |\n", wiki, FinancialReport},
		{"meeting notes in a wiki page", "Weekly sync", "Attendees: Ana, Bo\n\n## Agenda\n- ledger\n\n## Action items\n- Ana to fix", wiki, MeetingNotes},
		{"api doc", "Payments", "# Payments API\nGET /v1/charges list\nPOST /v1/charges create\nAuthentication: bearer", none, APIDoc},
		{"the source type decides plain prose", "", "We moved the office to the third floor.", wiki, Wiki},
		{"nothing at all", "", "lorem ipsum", none, Generic},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Detect(tc.title, tc.text, tc.source)
			if got.Type != tc.want {
				t.Fatalf("Detect = %+v, want %s", got, tc.want)
			}
			if got.Reason == "" {
				t.Fatal("no reason")
			}
		})
	}
}
