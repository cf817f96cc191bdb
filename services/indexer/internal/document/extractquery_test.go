package document

import (
	"slices"
	"testing"

	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
)

func TestExtractTermsAndMatches(t *testing.T) {
	t.Parallel()
	fin := extract.Extract{Type: "financial", Data: map[string]any{"ticker": "BHP", "revenue": 55658e6, "report_date": "FY2024"}}
	meet := extract.Extract{Type: "meeting_notes", Data: map[string]any{
		"attendees":    []any{"Ana Silva", "Bo"},
		"action_items": []any{map[string]any{"description": "fix", "owner": "Ana"}, map[string]any{"description": "write", "owner": "Bo"}},
	}}
	terms := ExtractTerms([]extract.Extract{fin, meet})
	for _, want := range []string{
		TypeTerm("financial"), Term("financial", "ticker", "bhp"), Term("financial", "revenue", "55658000000"),
		Term("meeting_notes", "attendees", "ana silva"), Term("meeting_notes", "action_items.owner", "bo"),
	} {
		if !slices.Contains(terms, want) {
			t.Errorf("terms lack %q", want)
		}
	}
	tests := []struct {
		name   string
		e      extract.Extract
		typ    string
		fields map[string]string
		want   bool
	}{
		{"ticker, any case", fin, "financial", map[string]string{"ticker": "bhp"}, true},
		{"number written differently", fin, "financial", map[string]string{"revenue": "5.5658e10"}, true},
		{"number with separators", fin, "financial", map[string]string{"revenue": "55,658,000,000"}, true},
		{"one field wrong", fin, "financial", map[string]string{"ticker": "BHP", "report_date": "FY2023"}, false},
		{"other type", fin, "meeting_notes", nil, false},
		{"nested array path", meet, "meeting_notes", map[string]string{"action_items.owner": "ana"}, true},
		{"missing field", meet, "meeting_notes", map[string]string{"date": "2024"}, false},
	}
	for _, tc := range tests {
		if got := Matches(tc.e, tc.typ, tc.fields); got != tc.want {
			t.Errorf("%s: Matches = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestIDs(t *testing.T) {
	t.Parallel()
	a, b := Scope{Tenant: "acme"}, Scope{Tenant: "acme", Project: "p"}
	h1, h2 := Hash("one"), Hash("two")
	if ID(a, "https://x", h1) != ID(a, "https://x", h2) {
		t.Error("a URL's id depends on the content")
	}
	if ID(a, "https://x", h1) == ID(b, "https://x", h1) {
		t.Error("two projects share a document id")
	}
	if ID(a, "", h1) == ID(a, "", h2) || ID(a, "", h1) != ID(a, "", h1) {
		t.Error("without a URL, the content must decide the id")
	}
	if ChunkID("doc_1", h1, 3) == ChunkID("doc_1", h2, 3) {
		t.Error("chunks of two contents share an id")
	}
}
