package extract

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
)

func readDoc(t *testing.T, file, title string) *Document {
	t.Helper()
	b, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return &Document{ID: "d", Title: title, Text: string(b)}
}

func TestFinancialMarkdownTable(t *testing.T) {
	t.Parallel()
	doc := readDoc(t, "bhp_fy24.md", "BHP results")
	ex := Financial{}
	if !ex.CanHandle(doc) {
		t.Fatal("CanHandle = false for a document with a table")
	}
	got, err := ex.Extract(context.Background(), doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d extracts, want one per period column (2): %+v", len(got), got)
	}
	want := map[string]any{
		"ticker": "BHP", "report_date": "FY2024", "report_type": "annual", "currency": "USD",
		"revenue": 55658e6, "net_income": 7897e6, "eps": 1.558, "dividend_yield": 5.2, "pe_ratio": 12.4, "market_cap": 149.2e9,
		"table_index": 0.0,
	}
	if diff := cmp.Diff(want, got[0].Data); diff != "" {
		t.Fatalf("FY2024 extract (-want +got):\n%s", diff)
	}
	if got[1].Data["report_date"] != "FY2023" || got[1].Data["net_income"] != 12921e6 {
		t.Fatalf("FY2023 extract = %v", got[1].Data)
	}
	e := got[0]
	if e.Type != TypeFinancial || e.Confidence != 1 {
		t.Fatalf("type %q confidence %v", e.Type, e.Confidence)
	}
	if span := doc.Text[e.SpanStart:e.SpanEnd]; !strings.HasPrefix(span, "| Metric") || !strings.HasSuffix(span, "| 80,000 |") {
		t.Fatalf("span = %q", span)
	}
}

func TestFinancialHTMLTableOneRowPerCompany(t *testing.T) {
	t.Parallel()
	doc := readDoc(t, "peers.html", "Peers")
	got, err := Financial{}.Extract(context.Background(), doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d extracts, want 2: %+v", len(got), got)
	}
	want := []map[string]any{
		{"ticker": "RIO", "company": "Rio Tinto", "revenue": 14.2e9, "net_income": 3.1e9, "eps": 1.92, "dividend_yield": 5.8,
			"report_date": "Q3 2024", "report_type": "quarterly", "currency": "AUD", "table_index": 0.0},
		{"ticker": "FMG", "company": "Fortescue", "revenue": 5.6e9, "net_income": -0.4e9, "eps": -0.13,
			"report_date": "Q3 2024", "report_type": "quarterly", "currency": "AUD", "table_index": 0.0},
	}
	for i := range want {
		if diff := cmp.Diff(want[i], got[i].Data); diff != "" {
			t.Fatalf("row %d (-want +got):\n%s", i, diff)
		}
	}
}

func TestFinancialIgnoresOtherTables(t *testing.T) {
	t.Parallel()
	doc := &Document{Text: "| Name | Role |\n|---|---|\n| Ana | SRE |\n\n| Service | Revenue impact |\n|---|---|\n| ledger | high |\n"}
	got, err := Financial{}.Extract(context.Background(), doc)
	if err != nil || len(got) != 0 {
		t.Fatalf("non-financial tables gave %v, %v", got, err)
	}
}

func TestMeetingNotes(t *testing.T) {
	t.Parallel()
	doc := &Document{Title: "Payments weekly sync", Text: `# Payments weekly sync
Date: 2024-05-02
Attendees: Ana Silva, Bo Chen and Priya (PM)

## Agenda
- Ledger timeouts
- Q3 roadmap

## Decisions
- Roll back ledger client to v2.3
Decision: freeze deploys until Monday

## Action items
- Ana to add retries to the ledger client by 2024-05-06
- [ ] Write the incident report @bo due Friday
- Update the runbook (Priya)
`}
	ex := MeetingNotes{}
	if !ex.CanHandle(doc) {
		t.Fatal("CanHandle = false")
	}
	got, err := ex.Extract(context.Background(), doc)
	if err != nil || len(got) != 1 {
		t.Fatalf("extracts %v, %v", got, err)
	}
	want := map[string]any{
		"date":      "2024-05-02",
		"attendees": []any{"Ana Silva", "Bo Chen", "Priya"},
		"topics":    []any{"Ledger timeouts", "Q3 roadmap"},
		"decisions": []any{"Roll back ledger client to v2.3", "freeze deploys until Monday"},
		"action_items": []any{
			map[string]any{"description": "Ana to add retries to the ledger client by 2024-05-06", "owner": "Ana", "due_date": "2024-05-06"},
			map[string]any{"description": "Write the incident report @bo due Friday", "owner": "bo", "due_date": "Friday"},
			map[string]any{"description": "Update the runbook (Priya)", "owner": "Priya"},
		},
	}
	if diff := cmp.Diff(want, got[0].Data); diff != "" {
		t.Fatalf("meeting extract (-want +got):\n%s", diff)
	}
	var keys []string
	for _, e := range Entities(got[0]) {
		keys = append(keys, e.Key())
	}
	// Attendees, then owners not already listed (names are not resolved:
	// "Ana" and "Ana Silva" stay two people).
	wantKeys := []string{"entity:person:ana_silva", "entity:person:bo_chen", "entity:person:priya", "entity:person:ana", "entity:person:bo"}
	if diff := cmp.Diff(wantKeys, keys); diff != "" {
		t.Fatalf("entities (-want +got):\n%s", diff)
	}
	if (MeetingNotes{}).CanHandle(&Document{Title: "Release notes", Text: "Fixed a bug.\nAdded a flag."}) {
		t.Fatal("CanHandle = true for release notes")
	}
}

func TestAPIDoc(t *testing.T) {
	t.Parallel()
	doc := &Document{Title: "payments", Text: "# Payments API\n\nBase URL: https://api.example.com/payments/v2\n\n## Authentication\nSend an OAuth 2.0 bearer token.\n\n" +
		"## Endpoints\n- `GET /charges` — list charges\n- `POST /charges`: create a charge\n\n| Method | Path | Description |\n|---|---|---|\n| DELETE | /charges/{id} | cancel a charge |\n\n### GET /charges/{id}\nFetch one charge.\n"}
	ex := APIDoc{}
	if !ex.CanHandle(doc) {
		t.Fatal("CanHandle = false")
	}
	got, err := ex.Extract(context.Background(), doc)
	if err != nil || len(got) != 1 {
		t.Fatalf("extracts %v, %v", got, err)
	}
	want := map[string]any{
		"service_name": "Payments API",
		"base_url":     "https://api.example.com/payments/v2",
		"auth_method":  "oauth2",
		"endpoints": []any{
			map[string]any{"method": "GET", "path": "/charges", "description": "list charges"},
			map[string]any{"method": "POST", "path": "/charges", "description": "create a charge"},
			map[string]any{"method": "DELETE", "path": "/charges/{id}", "description": "cancel a charge"},
			map[string]any{"method": "GET", "path": "/charges/{id}", "description": "Fetch one charge."},
		},
	}
	if diff := cmp.Diff(want, got[0].Data); diff != "" {
		t.Fatalf("api extract (-want +got):\n%s", diff)
	}
	if ents := Entities(got[0]); len(ents) != 1 || ents[0].Key() != "entity:service:payments_api" {
		t.Fatalf("entities = %v", ents)
	}
}

// failing is an extractor that always fails; panicking panics.
type failing struct{ panics bool }

func (failing) Name() string             { return "failing" }
func (failing) SchemaVersion() int       { return 3 }
func (failing) CanHandle(*Document) bool { return true }
func (f failing) Extract(context.Context, *Document) ([]Extract, error) {
	if f.panics {
		panic("boom")
	}
	return nil, errors.New("upstream said no")
}

// slow blocks until its context ends.
type slow struct{}

func (slow) Name() string             { return "slow" }
func (slow) SchemaVersion() int       { return 1 }
func (slow) CanHandle(*Document) bool { return true }
func (slow) Extract(ctx context.Context, _ *Document) ([]Extract, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestRunIsolatesFailures(t *testing.T) {
	t.Parallel()
	doc := readDoc(t, "bhp_fy24.md", "BHP")
	outs := Run(context.Background(), doc, []Extractor{failing{}, Financial{}, failing{panics: true}, slow{}, APIDoc{}}, 50*time.Millisecond)
	type row struct {
		name   string
		status indexerv1.ExtractorRunStatus
		n      int
	}
	var got []row
	for _, o := range outs {
		got = append(got, row{o.Extractor, o.Status, len(o.Extracts)})
	}
	want := []row{
		{"failing", indexerv1.ExtractorRunStatus_EXTRACTOR_RUN_STATUS_FAILED, 0},
		{"financial_table", indexerv1.ExtractorRunStatus_EXTRACTOR_RUN_STATUS_SUCCEEDED, 2},
		{"failing", indexerv1.ExtractorRunStatus_EXTRACTOR_RUN_STATUS_FAILED, 0},
		{"slow", indexerv1.ExtractorRunStatus_EXTRACTOR_RUN_STATUS_FAILED, 0},
		{"api_doc", indexerv1.ExtractorRunStatus_EXTRACTOR_RUN_STATUS_SKIPPED, 0},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(row{})); diff != "" {
		t.Fatalf("outcomes (-want +got):\n%s", diff)
	}
	if !strings.Contains(outs[0].Err.Error(), "upstream said no") || !strings.Contains(outs[2].Err.Error(), "panicked: boom") ||
		!errors.Is(outs[3].Err, context.DeadlineExceeded) {
		t.Fatalf("errors: %v / %v / %v", outs[0].Err, outs[2].Err, outs[3].Err)
	}
	if e := outs[1].Extracts[0]; e.Extractor != "financial_table" || e.SchemaVersion != 1 {
		t.Fatalf("extract not stamped: %+v", e)
	}
}

// A document of many small tables is read in time linear in its size: the
// context of each HTML table was read from all the text before it, and
// 20,000 of them after 20,000 markdown ones (957 KB) took 4.5 minutes.
func TestManyTablesTakeLinearTime(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("<p>filler paragraph of the report</p>\n", 200) // past the window read for context
	text := long + "<h2>Quarterly revenue</h2>\n<div class=\"note\" data-x=\"" + strings.Repeat("y", 1100) + "\">Q3 figures</div>\n" +
		"<table><tr><th>Quarter</th><th>Revenue</th></tr><tr><td>Q3</td><td>4.2</td></tr></table>\n" +
		strings.Repeat("<table><tr><td>a</td></tr></table>\n", 20000) + strings.Repeat("|a|\n|--|\n|b|\n\n", 20000)
	start := time.Now()
	ts := Tables(text)
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("%d KB of tables read in %v", len(text)>>10, d)
	}
	if len(ts) != 40001 {
		t.Fatalf("%d tables, want 40001", len(ts))
	}
	for i := 1; i < len(ts); i++ {
		if ts[i].Start < ts[i-1].Start {
			t.Fatalf("table %d starts at %d, before table %d at %d", i, ts[i].Start, i-1, ts[i-1].Start)
		}
	}
	// The context of the first: the line just above, though the window
	// read for it starts inside a tag.
	if got := ts[0].Context; got != "Q3 figures" {
		t.Errorf("context %q, want %q", got, "Q3 figures")
	}
}
