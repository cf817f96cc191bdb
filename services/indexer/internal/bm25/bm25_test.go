package bm25

import (
	"context"
	"slices"
	"testing"
)

func docs() []Doc {
	return []Doc{
		{Key: "c1", Doc: "d1", Title: "Payment outage", Text: "The payment service timed out calling the ledger.", SourceType: 2, ContentType: "ticket"},
		{Key: "c2", Doc: "d1", Title: "Payment outage", Text: "Retries were exhausted after three attempts.", SourceType: 2, ContentType: "ticket"},
		{Key: "c3", Doc: "d2", Title: "BHP annual report", Text: "Revenue rose to 55.7 billion; the dividend was raised.", SourceType: 5, ContentType: "financial_report"},
		{Key: "c4", Doc: "d3", Title: "Ledger runbook", Text: "Restart the ledger pods when payments are timing out.", SourceType: 3, ContentType: "wiki"},
	}
}

func keys(hits []Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Key
	}
	return out
}

func TestSearchFilterDeleteReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir() + "/bm25"
	ix, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Add(docs()); err != nil {
		t.Fatal(err)
	}
	hits, err := ix.Search(ctx, "ledger timeouts", 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Stemming: "timeouts"/"timed out"/"timing out" share "time"; both
	// ledger chunks match, the dividend chunk does not.
	got := keys(hits)
	if len(got) < 2 || !slices.Contains(got, "c1") || !slices.Contains(got, "c4") || slices.Contains(got, "c3") {
		t.Fatalf("hits = %v", got)
	}
	for i := 1; i < len(hits); i++ {
		if hits[i].Score > hits[i-1].Score {
			t.Fatal("hits not sorted by score")
		}
	}

	tests := []struct {
		name string
		q    string
		f    Filter
		want []string
	}{
		{"by document", "ledger", Filter{Docs: []string{"d3"}}, []string{"c4"}},
		{"by source type", "ledger", Filter{SourceTypes: []int32{2}}, []string{"c1"}},
		{"by content type", "dividend revenue", Filter{ContentTypes: []string{"financial_report", "wiki"}}, []string{"c3"}},
		{"fields combine with AND", "ledger", Filter{Docs: []string{"d1"}, SourceTypes: []int32{3}}, nil},
	}
	for _, tc := range tests {
		hits, err := ix.Search(ctx, tc.q, 10, &tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if got := keys(hits); !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("%s: hits = %v, want %v", tc.name, got, tc.want)
		}
	}

	removed, err := ix.DeleteDocument(ctx, "d1")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if !slices.Equal(removed, []string{"c1", "c2"}) {
		t.Fatalf("DeleteDocument removed %v", removed)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}

	ix, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if n, _ := ix.Count(); n != 2 {
		t.Fatalf("Count after reopen = %d, want 2", n)
	}
	hits, _ = ix.Search(ctx, "payment ledger", 10, nil)
	if got := keys(hits); !slices.Equal(got, []string{"c4"}) {
		t.Fatalf("after delete and reopen, hits = %v, want [c4]", got)
	}
}

// TestTokenTotalsTrackLiveChunks: the token total behind BM25's average
// document length follows adds, replacements and deletes, and survives a
// reopen.
func TestTokenTotalsTrackLiveChunks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/ix"
	ix, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	add := func(docs ...Doc) {
		t.Helper()
		if err := ix.Add(docs); err != nil {
			t.Fatal(err)
		}
	}
	add(Doc{Key: "a", Text: "ledger timeout payments"}, Doc{Key: "b", Text: "copper iron"}, Doc{Key: "a", Text: "ledger timeout"})
	if got := ix.totalTokens(); got != 4 {
		t.Fatalf("total after adding = %d, want 4 (a replaced in the same batch)", got)
	}
	add(Doc{Key: "b", Text: "copper iron ore prices"})
	if err := ix.Delete([]string{"a", "missing"}); err != nil {
		t.Fatal(err)
	}
	if got := ix.totalTokens(); got != 4 {
		t.Fatalf("total after replace and delete = %d, want 4", got)
	}
	ix.Close()
	ix, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if got := ix.totalTokens(); got != 4 {
		t.Fatalf("total after reopen = %d, want 4", got)
	}
}
