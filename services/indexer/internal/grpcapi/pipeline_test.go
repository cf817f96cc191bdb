package grpcapi_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
	"github.com/agentmesh/agentmesh/services/indexer/internal/graph"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
)

const (
	report     = indexerv1.SourceType_SOURCE_TYPE_REPORT
	wiki       = indexerv1.SourceType_SOURCE_TYPE_WIKI
	email      = indexerv1.SourceType_SOURCE_TYPE_EMAIL
	hybridMode = indexerv1.SearchMode_SEARCH_MODE_HYBRID
)

const bhpReport = `# BHP Group (ASX: BHP) — FY2024 annual results

Iron ore and copper volumes rose; the board declared a final dividend.

| Metric | FY2024 |
|---|---:|
| Revenue (US$m) | 55,658 |
| Net income (US$m) | 7,897 |
| EPS (US cents) | 155.8 |
| Dividend yield | 5.2% |
| P/E ratio | 12.4x |
| Market cap (US$bn) | 149.2 |
`

const rioReport = `# Rio Tinto (ASX: RIO) — H1 2024 results

Aluminium margins improved while iron ore shipments held steady.

| Metric | H1 FY2024 |
|---|---:|
| Revenue (US$m) | 26,802 |
| Net income (US$m) | 5,808 |
| EPS (US cents) | 357.6 |
`

// TestReingestIsNoOpAndChangeReplaces checks the content-hash rules:
// the same content again does nothing; new content replaces the chunks in
// the store, both indexes and the graph, and the extracts.
func TestReingestIsNoOpAndChangeReplaces(t *testing.T) {
	t.Parallel()
	eachMode(t, testReingestIsNoOpAndChangeReplaces)
}

func testReingestIsNoOpAndChangeReplaces(t *testing.T, in *infra) {
	ctx := context.Background()
	h := start(t, in, nil)
	sc := scope("acme", "")
	first := h.ingest(t, sc, report, "https://wiki.example.com/bhp", "BHP FY24", bhpReport)
	if first.GetUnchanged() || first.GetExtractionJobId() == "" {
		t.Fatalf("first ingest: %v", first)
	}
	id := first.GetDocument().GetId()
	doc := h.settled(t, sc, id)
	if doc.GetExtracts()[0].GetData().GetFields()["ticker"].GetStringValue() != "BHP" {
		t.Fatalf("extracts after first ingest: %v", doc.GetExtracts())
	}
	oldChunks, err := h.store.DocumentChunks(ctx, document.Scope{Tenant: "acme"}, id)
	if err != nil || len(oldChunks) < 2 {
		t.Fatalf("chunks: %d, %v", len(oldChunks), err)
	}

	again := h.ingest(t, sc, report, "https://wiki.example.com/bhp", "BHP FY24", bhpReport)
	if !again.GetUnchanged() || again.GetExtractionJobId() != "" || again.GetDocument().GetId() != id {
		t.Fatalf("re-ingest of the same content: unchanged=%v job=%q id=%s", again.GetUnchanged(), again.GetExtractionJobId(), again.GetDocument().GetId())
	}
	if d2 := h.settled(t, sc, id); d2.GetExtractionJobId() != doc.GetExtractionJobId() || !d2.GetUpdateTime().AsTime().Equal(doc.GetUpdateTime().AsTime()) {
		t.Fatal("re-ingesting the same content touched the document")
	}

	changed := h.ingest(t, sc, report, "https://wiki.example.com/bhp", "Rio H1", rioReport)
	if changed.GetUnchanged() || changed.GetDocument().GetId() != id || changed.GetExtractionJobId() == doc.GetExtractionJobId() {
		t.Fatalf("changed content: %v", changed)
	}
	doc = h.settled(t, sc, id)
	var tickers []string
	for _, e := range doc.GetExtracts() {
		tickers = append(tickers, e.GetData().GetFields()["ticker"].GetStringValue())
	}
	if !slices.Equal(tickers, []string{"RIO"}) {
		t.Fatalf("extracts after the change are for %v, want [RIO]", tickers)
	}
	newChunks, _ := h.store.DocumentChunks(ctx, document.Scope{Tenant: "acme"}, id)
	var kwKeys, vecKeys []string
	h.indexes.Read(hybrid.Scope{Tenant: "acme"}, func(sh *hybrid.Shard) (err error) {
		kwKeys, vecKeys, err = sh.DocKeys(ctx, id)
		return err
	})
	for _, c := range oldChunks {
		if slices.ContainsFunc(newChunks, func(n document.Chunk) bool { return n.ID == c.ID }) || contains(kwKeys, c.ID) || contains(vecKeys, c.ID) {
			t.Fatalf("old chunk %s survived the content change", c.ID)
		}
		if _, err := graph.GetNode(ctx, h.graphs, graph.Scope{Tenant: "acme"}, "chunk:"+c.ID); !errors.Is(err, graph.ErrNotFound) {
			t.Fatalf("old chunk node %s survived: %v", c.ID, err)
		}
	}
	if len(kwKeys) != len(newChunks) || len(vecKeys) != len(newChunks) {
		t.Fatalf("indexes hold %d/%d chunks, store %d", len(kwKeys), len(vecKeys), len(newChunks))
	}
	// The old company is no longer mentioned; the new one is.
	if _, err := h.graph.GetNode(ctx, &indexerv1.GetNodeRequest{Scope: sc, Key: "entity:ticker:bhp"}); status.Code(err) != codes.NotFound {
		t.Fatalf("BHP entity after the change: %v", err)
	}
	if _, err := h.graph.GetNode(ctx, &indexerv1.GetNodeRequest{Scope: sc, Key: "entity:ticker:rio"}); err != nil {
		t.Fatalf("RIO entity: %v", err)
	}
	if hits := h.query(t, sc, "board declared final", indexerv1.SearchMode_SEARCH_MODE_KEYWORD, 10); len(hits) != 0 {
		t.Fatalf("old content still found: %v", hits)
	}
}

// TestFinancialTableBecomesExtractAndIsFound: the table becomes a correct
// financial extract, found by ticker; events announce the indexing.
func TestFinancialTableBecomesExtractAndIsFound(t *testing.T) {
	t.Parallel()
	eachMode(t, testFinancialTableBecomesExtractAndIsFound)
}

func testFinancialTableBecomesExtractAndIsFound(t *testing.T, in *infra) {
	ctx := context.Background()
	evs := watchEvents(t, in, "am.evt.acme.>")
	h := start(t, in, nil)
	sc := scope("acme", "research")
	bhp := h.ingest(t, sc, report, "https://wiki.example.com/bhp", "BHP FY24", bhpReport).GetDocument().GetId()
	rio := h.ingest(t, sc, report, "https://wiki.example.com/rio", "Rio H1", rioReport).GetDocument().GetId()
	doc := h.settled(t, sc, bhp)
	h.settled(t, sc, rio)

	if doc.GetContentType() != "financial_report" || doc.GetRouting() != indexerv1.Routing_ROUTING_DONE {
		t.Fatalf("content type %q routing %v", doc.GetContentType(), doc.GetRouting())
	}
	if len(doc.GetExtracts()) != 1 {
		t.Fatalf("extracts: %v", doc.GetExtracts())
	}
	e := doc.GetExtracts()[0]
	want := map[string]any{"ticker": "BHP", "report_date": "FY2024", "report_type": "annual", "currency": "USD", "revenue": 55658e6,
		"net_income": 7897e6, "eps": 1.558, "dividend_yield": 5.2, "pe_ratio": 12.4, "market_cap": 149.2e9, "table_index": 0.0}
	if diff := cmp.Diff(want, e.GetData().AsMap()); diff != "" {
		t.Fatalf("financial extract (-want +got):\n%s", diff)
	}
	if e.GetType() != "financial" || e.GetConfidence() != 1 || e.GetExtractor() != "financial_table" || e.GetSchemaVersion() != 1 ||
		!strings.HasPrefix(bhpReport[e.GetSpanStart():e.GetSpanEnd()], "| Metric") {
		t.Fatalf("extract metadata: %v", e)
	}

	find := func(fields map[string]string, size int32, token string) *indexerv1.FindDocumentsByExtractResponse {
		t.Helper()
		resp, err := h.docs.FindDocumentsByExtract(ctx, &indexerv1.FindDocumentsByExtractRequest{Scope: sc, ExtractType: "financial", FieldEquals: fields, PageSize: size, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	got := find(map[string]string{"ticker": "BHP"}, 0, "")
	if len(got.GetDocuments()) != 1 || got.GetDocuments()[0].GetId() != bhp || got.GetDocuments()[0].GetRawContent() != "" {
		t.Fatalf("find BHP: %v", got)
	}
	if got := find(map[string]string{"ticker": "bhp", "report_type": "annual", "revenue": "55658000000"}, 0, ""); len(got.GetDocuments()) != 1 {
		t.Fatalf("find by several fields: %v", got)
	}
	if got := find(map[string]string{"ticker": "BHP", "report_type": "half_year"}, 0, ""); len(got.GetDocuments()) != 0 {
		t.Fatalf("fields of different extracts matched: %v", got)
	}
	// Paging through both financial documents, one at a time.
	p1 := find(nil, 1, "")
	p2 := find(nil, 1, p1.GetNextPageToken())
	if len(p1.GetDocuments()) != 1 || len(p2.GetDocuments()) != 1 || p2.GetNextPageToken() != "" || p1.GetDocuments()[0].GetId() == p2.GetDocuments()[0].GetId() {
		t.Fatalf("pages: %v / %v", p1, p2)
	}

	// The indexed event carries the document with extracts and routing.
	testkit.Eventually(t, 10*time.Second, func() bool { return evs.last("document."+bhp+".indexed") != nil }, "indexed event")
	var payload indexerv1.DocumentIndexed
	if err := evs.last("document." + bhp + ".indexed").GetPayload().UnmarshalTo(&payload); err != nil {
		t.Fatal(err)
	}
	if payload.GetDocument().GetId() != bhp || len(payload.GetDocument().GetExtracts()) != 1 || payload.GetDocument().GetRouting() != indexerv1.Routing_ROUTING_DONE {
		t.Fatalf("indexed event payload: %v", payload.GetDocument())
	}
	jobID := doc.GetExtractionJobId()
	testkit.Eventually(t, 10*time.Second, func() bool {
		return len(evs.subjects("extraction_job."+jobID+".")) == 3
	}, "queued, started, succeeded events of %s; saw %v", jobID, evs.subjects(""))
	if diff := cmp.Diff([]string{"queued", "started", "succeeded"}, lastTokens(evs.subjects("extraction_job."+jobID+"."))); diff != "" {
		t.Fatalf("job events (-want +got):\n%s", diff)
	}
}

func lastTokens(subjects []string) []string {
	var out []string
	for _, s := range subjects {
		out = append(out, s[strings.LastIndex(s, ".")+1:])
	}
	return out
}

// TestDeleteLeavesNothingBehind: after a delete, no BM25 entry, vector,
// chunk, graph node or edge of the document remains.
func TestDeleteLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	eachMode(t, testDeleteLeavesNothingBehind)
}

func testDeleteLeavesNothingBehind(t *testing.T, in *infra) {
	ctx := context.Background()
	h := start(t, in, nil)
	sc := scope("acme", "")
	ds := document.Scope{Tenant: "acme"}
	id := h.ingest(t, sc, report, "https://wiki.example.com/bhp", "BHP FY24", bhpReport).GetDocument().GetId()
	keep := h.ingest(t, sc, report, "https://wiki.example.com/bhp-2", "BHP notes", "BHP (ASX: BHP) copper notes.\n\n| Metric | FY2024 |\n|---|---|\n| Revenue | 1 |\n| EPS | 2 |\n").GetDocument().GetId()
	h.settled(t, sc, id)
	h.settled(t, sc, keep)
	if hits := h.query(t, sc, "BHP dividend iron ore", hybridMode, 10); len(hits) == 0 {
		t.Fatal("nothing found before the delete")
	}
	if _, err := h.docs.DeleteDocument(ctx, &indexerv1.DeleteDocumentRequest{Scope: sc, DocumentId: id}); err != nil {
		t.Fatal(err)
	}
	err := h.indexes.Read(hybrid.Scope{Tenant: "acme"}, func(sh *hybrid.Shard) error {
		kw, vec, err := sh.DocKeys(ctx, id)
		if len(kw) != 0 || len(vec) != 0 {
			t.Errorf("after delete: %d BM25 entries, %d vectors", len(kw), len(vec))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if cs, _ := h.store.DocumentChunks(ctx, ds, id); len(cs) != 0 {
		t.Fatalf("%d chunks left in the store", len(cs))
	}
	if n, e, err := h.graphs.CountDocument(ctx, graph.Scope{Tenant: "acme"}, id); err != nil || n != 0 || e != 0 {
		t.Fatalf("graph after delete: %d nodes, %d edges, %v", n, e, err)
	}
	for _, mode := range []indexerv1.SearchMode{hybridMode, indexerv1.SearchMode_SEARCH_MODE_KEYWORD, indexerv1.SearchMode_SEARCH_MODE_VECTOR} {
		resp, err := h.search.Search(ctx, &indexerv1.SearchRequest{Scope: sc, Query: "BHP dividend iron ore copper", Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		for _, hit := range resp.GetHits() {
			if hit.GetDocumentId() == id {
				t.Fatalf("mode %v found the deleted document", mode)
			}
		}
	}
	// The shared entity stays for the document that still mentions it.
	if _, err := h.graph.GetNode(ctx, &indexerv1.GetNodeRequest{Scope: sc, Key: "entity:ticker:bhp"}); err != nil {
		t.Fatalf("BHP entity: %v", err)
	}
	if _, err := h.docs.GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: sc, DocumentId: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("get after delete: %v", err)
	}
	if _, err := h.docs.DeleteDocument(ctx, &indexerv1.DeleteDocumentRequest{Scope: sc, DocumentId: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("second delete: %v", err)
	}
	// Vectors are gone, not tombstoned: the shard counts only the survivor.
	h.indexes.Read(hybrid.Scope{Tenant: "acme"}, func(sh *hybrid.Shard) error {
		kw, vec, _ := sh.Counts()
		want, _ := h.store.CountChunks(ctx, ds)
		if int64(kw) != want || int64(vec) != want {
			t.Errorf("shard holds %d/%d chunks, store %d", kw, vec, want)
		}
		return nil
	})
}

// TestScopeIsolation: nothing of one scope is visible from another.
func TestScopeIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := start(t, newInfra(t), nil)
	acme, acmeOps, globex := scope("acme", ""), scope("acme", "ops"), scope("globex", "")
	a := h.ingest(t, acme, report, "https://x/bhp", "BHP FY24", bhpReport).GetDocument().GetId()
	o := h.ingest(t, acmeOps, report, "https://x/bhp", "BHP FY24", bhpReport).GetDocument().GetId()
	h.ingest(t, globex, wiki, "https://x/runbook", "Ledger runbook", "Restart the ledger when BHP dividend payments time out.")
	h.settled(t, acme, a)
	h.settled(t, acmeOps, o)
	if a == o {
		t.Fatal("the same URL in two projects is one document")
	}
	for _, mode := range []indexerv1.SearchMode{hybridMode, indexerv1.SearchMode_SEARCH_MODE_KEYWORD, indexerv1.SearchMode_SEARCH_MODE_VECTOR} {
		resp, err := h.search.Search(ctx, &indexerv1.SearchRequest{Scope: acme, Query: "BHP dividend ledger runbook", Mode: mode, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, hit := range resp.GetHits() {
			if hit.GetDocumentId() != a {
				t.Fatalf("mode %v: acme sees %s (%s)", mode, hit.GetDocumentId(), hit.GetTitle())
			}
		}
		if len(resp.GetHits()) == 0 {
			t.Fatalf("mode %v: acme sees nothing", mode)
		}
	}
	if _, err := h.docs.GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: globex, DocumentId: a}); status.Code(err) != codes.NotFound {
		t.Fatalf("globex reads acme's document: %v", err)
	}
	if _, err := h.docs.DeleteDocument(ctx, &indexerv1.DeleteDocumentRequest{Scope: globex, DocumentId: a}); status.Code(err) != codes.NotFound {
		t.Fatalf("globex deletes acme's document: %v", err)
	}
	list, err := h.docs.ListDocuments(ctx, &indexerv1.ListDocumentsRequest{Scope: acme})
	if err != nil || len(list.GetDocuments()) != 1 || list.GetDocuments()[0].GetId() != a {
		t.Fatalf("acme lists %v, %v", list, err)
	}
	found, err := h.docs.FindDocumentsByExtract(ctx, &indexerv1.FindDocumentsByExtractRequest{Scope: globex, ExtractType: "financial", FieldEquals: map[string]string{"ticker": "BHP"}})
	if err != nil || len(found.GetDocuments()) != 0 {
		t.Fatalf("globex finds acme's extracts: %v, %v", found, err)
	}
	if _, err := h.graph.GetNode(ctx, &indexerv1.GetNodeRequest{Scope: globex, Key: "doc:" + a}); status.Code(err) != codes.NotFound {
		t.Fatalf("globex reads acme's graph: %v", err)
	}
	// A caller the gateway scoped to globex cannot name acme in the body.
	md := metadata.NewOutgoingContext(ctx, metadata.Pairs(grpcx.TenantMetadataKey, "globex"))
	if _, err := h.docs.GetDocument(md, &indexerv1.GetDocumentRequest{Scope: acme, DocumentId: a}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("tenant mismatch: %v", err)
	}
}

// TestGraphNeighborsAndPath walks the graph built at ingestion.
func TestGraphNeighborsAndPath(t *testing.T) {
	t.Parallel()
	eachMode(t, testGraphNeighborsAndPath)
}

func testGraphNeighborsAndPath(t *testing.T, in *infra) {
	ctx := context.Background()
	h := start(t, in, nil)
	sc := scope("acme", "")
	bhp := h.ingest(t, sc, report, "https://x/bhp", "BHP FY24", bhpReport).GetDocument().GetId()
	notes := h.ingest(t, sc, wiki, "https://x/sync", "Investor sync", "Attendees: Ana, Bo\n\n## Decisions\n- Buy more BHP\n\n## Action items\n- Ana to model BHP (ASX: BHP) dividends by 2024-09-01\n\n| Metric | FY2024 |\n|---|---|\n| Revenue | 55658 |\n| EPS | 1.55 |\n").GetDocument().GetId()
	h.settled(t, sc, bhp)
	nd := h.settled(t, sc, notes)
	if nd.GetRouting() != indexerv1.Routing_ROUTING_LIFT_UP || !strings.Contains(nd.GetRoutingReason(), "action item") {
		t.Fatalf("meeting notes with action items: routing %v (%s)", nd.GetRouting(), nd.GetRoutingReason())
	}

	n, err := h.graph.ListNeighbors(ctx, &indexerv1.ListNeighborsRequest{Scope: sc, Key: "doc:" + bhp, EdgeTypes: []string{graph.PartOf}})
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range n.GetNodes() {
		if node.GetKind() != graph.KindChunk {
			t.Fatalf("PART_OF neighbour %s is a %s", node.GetKey(), node.GetKind())
		}
	}
	if int32(len(n.GetNodes())) != h.settled(t, sc, bhp).GetChunkCount() {
		t.Fatalf("%d chunk neighbours, %d chunks", len(n.GetNodes()), h.settled(t, sc, bhp).GetChunkCount())
	}
	n, err = h.graph.ListNeighbors(ctx, &indexerv1.ListNeighborsRequest{Scope: sc, Key: "entity:ticker:bhp", EdgeTypes: []string{graph.Mentions}})
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, node := range n.GetNodes() {
		docs = append(docs, node.GetKey())
	}
	slices.Sort(docs)
	want := []string{"doc:" + bhp, "doc:" + notes}
	slices.Sort(want)
	if !slices.Equal(docs, want) {
		t.Fatalf("documents mentioning BHP: %v, want %v", docs, want)
	}
	p, err := h.graph.FindPath(ctx, &indexerv1.FindPathRequest{Scope: sc, FromKey: "doc:" + bhp, ToKey: "entity:person:ana"})
	if err != nil {
		t.Fatal(err)
	}
	var path []string
	for _, node := range p.GetNodes() {
		path = append(path, node.GetKey())
	}
	if diff := cmp.Diff([]string{"doc:" + bhp, "entity:ticker:bhp", "doc:" + notes, "entity:person:ana"}, path); diff != "" {
		t.Fatalf("path (-want +got):\n%s", diff)
	}
	if len(p.GetEdges()) != 3 || p.GetEdges()[0].GetType() != graph.Mentions {
		t.Fatalf("path edges: %v", p.GetEdges())
	}
	if _, err := h.graph.GetNode(ctx, &indexerv1.GetNodeRequest{Scope: sc, Key: "doc:nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown node: %v", err)
	}
}

// corpus is a handful of documents for the rebuild test.
var corpus = []struct{ url, title, text string }{
	{"https://x/1", "Ledger timeouts", "The payment service timed out calling the ledger after the deploy. Retries were exhausted."},
	{"https://x/2", "Runbook: ledger", "## Restart\nRestart the ledger pods when payments time out.\n\n## Escalate\nPage the payments on-call."},
	{"https://x/3", "BHP FY24", bhpReport},
	{"https://x/4", "Rio H1", rioReport},
	{"https://x/5", "Office move", "Hi all,\nthe office moves to the third floor on Monday.\nThanks,\nFacilities"},
	{"https://x/6", "Kafka lag", "Consumer lag on the orders topic grew to 2 million messages; partitions were rebalanced."},
	{"https://x/7", "Postgres failover", "The primary database failed over to the replica at 03:12; writes paused for 40 seconds."},
	{"https://x/8", "Q3 planning", "Attendees: Ana, Bo\n\n## Agenda\n- ledger reliability\n- copper pricing\n\n## Decisions\n- hire two SREs"},
}

// TestRebuildGivesSameResults: RebuildIndexes, and the start-up repair of
// a lost index directory, give the same search results as the indexes
// built at ingestion.
func TestRebuildGivesSameResults(t *testing.T) {
	t.Parallel()
	eachMode(t, testRebuildGivesSameResults)
}

func testRebuildGivesSameResults(t *testing.T, in *infra) {
	ctx := context.Background()
	h := start(t, in, nil)
	sc := scope("acme", "")
	for _, d := range corpus {
		id := h.ingest(t, sc, wiki, d.url, d.title, d.text).GetDocument().GetId()
		h.settled(t, sc, id)
	}
	queries := []string{"ledger timeout", "BHP revenue dividend", "database failover replica", "office floor", "consumer lag partitions", "copper"}
	modes := []indexerv1.SearchMode{hybridMode, indexerv1.SearchMode_SEARCH_MODE_KEYWORD, indexerv1.SearchMode_SEARCH_MODE_VECTOR}
	results := func(h *harness) []string {
		var out []string
		for _, q := range queries {
			for _, m := range modes {
				resp, err := h.search.Search(ctx, &indexerv1.SearchRequest{Scope: sc, Query: q, Mode: m, Limit: 5})
				if err != nil {
					t.Fatal(err)
				}
				for _, hit := range resp.GetHits() {
					out = append(out, fmt.Sprintf("%s|%v|%s|%.4f", q, m, hit.GetChunkId(), hit.GetScore()))
				}
			}
		}
		return out
	}
	before := results(h)
	if len(before) == 0 {
		t.Fatal("no results")
	}
	resp, err := h.docs.RebuildIndexes(ctx, &indexerv1.RebuildIndexesRequest{Scope: sc})
	if err != nil {
		t.Fatal(err)
	}
	chunks, _ := h.store.CountChunks(ctx, document.Scope{Tenant: "acme"})
	if resp.GetDocuments() != int64(len(corpus)) || resp.GetChunks() != chunks {
		t.Fatalf("rebuild reports %d documents, %d chunks; want %d, %d", resp.GetDocuments(), resp.GetChunks(), len(corpus), chunks)
	}
	if diff := cmp.Diff(before, results(h)); diff != "" {
		t.Fatalf("results differ after RebuildIndexes (-before +after):\n%s", diff)
	}

	// The index directory is lost (a new pod without its volume): start-up
	// reconciliation notices and rebuilds from the store.
	h.stop()
	in.dir = t.TempDir()
	h2 := start(t, in, nil)
	if h2.follower != nil {
		// With replicas, the follower finds no position beside the
		// shards, and rebuilds them before it reports it caught up.
		h2.caughtUp(t)
		if st := h2.follower.Stats(); st.Rebuilds != 1 {
			t.Fatalf("follower stats %+v, want one rebuild", st)
		}
	} else {
		if got := h2.query(t, sc, "ledger timeout", hybridMode, 5); len(got) != 0 {
			t.Fatalf("a fresh directory already has results: %v", got)
		}
		if err := h2.svc.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(before, results(h2)); diff != "" {
		t.Fatalf("results differ after reconciliation (-before +after):\n%s", diff)
	}
}

// failing always fails.
type failing struct{}

func (failing) Name() string                     { return "always_failing" }
func (failing) SchemaVersion() int               { return 1 }
func (failing) CanHandle(*extract.Document) bool { return true }
func (failing) Extract(context.Context, *extract.Document) ([]extract.Extract, error) {
	return nil, errors.New("model quota exceeded")
}

// TestFailingExtractorIsLoggedOnJob: one extractor failing is recorded on
// the job, the others' extracts are stored.
func TestFailingExtractorIsLoggedOnJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in := newInfra(t)
	evs := watchEvents(t, in, "am.evt.acme.extraction_job.>")
	h := start(t, in, []extract.Extractor{failing{}, extract.Financial{}, extract.MeetingNotes{}})
	sc := scope("acme", "")
	res := h.ingest(t, sc, report, "https://x/bhp", "BHP", bhpReport)
	doc := h.settled(t, sc, res.GetDocument().GetId())
	if doc.GetExtractionStatus() != indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_PARTIALLY_FAILED || len(doc.GetExtracts()) != 1 {
		t.Fatalf("document: status %v, %d extracts", doc.GetExtractionStatus(), len(doc.GetExtracts()))
	}
	got := h.job(t, sc, res.GetExtractionJobId())
	type run struct {
		name   string
		status indexerv1.ExtractorRunStatus
		n      int32
		err    string
	}
	var runs []run
	for _, r := range got.GetExtractorRuns() {
		runs = append(runs, run{r.GetExtractor(), r.GetStatus(), r.GetExtractCount(), r.GetError()})
	}
	want := []run{
		{"always_failing", indexerv1.ExtractorRunStatus_EXTRACTOR_RUN_STATUS_FAILED, 0, "model quota exceeded"},
		{"financial_table", indexerv1.ExtractorRunStatus_EXTRACTOR_RUN_STATUS_SUCCEEDED, 1, ""},
		{"meeting_notes", indexerv1.ExtractorRunStatus_EXTRACTOR_RUN_STATUS_SKIPPED, 0, ""},
	}
	if diff := cmp.Diff(want, runs, cmp.AllowUnexported(run{})); diff != "" {
		t.Fatalf("extractor runs (-want +got):\n%s", diff)
	}
	if got.GetStatus() != indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_PARTIALLY_FAILED || got.GetReason() != "ingest" ||
		got.GetAttempts() != 1 || got.GetEndTime() == nil || !strings.Contains(got.GetError(), "1 of 3") {
		t.Fatalf("job: %v", got)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		return evs.last(got.GetId()+".partially_failed") != nil
	}, "partially_failed event")
	var ev indexerv1.ExtractionJobEvent
	if err := evs.last(got.GetId() + ".partially_failed").GetPayload().UnmarshalTo(&ev); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, ev.GetJob(), protocmp.Transform()); diff != "" {
		t.Fatalf("event payload differs from the job (-job +event):\n%s", diff)
	}
	if _, err := h.docs.GetExtractionJob(ctx, &indexerv1.GetExtractionJobRequest{Scope: scope("globex", ""), JobId: got.GetId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("another tenant reads the job: %v", err)
	}
}

// versioned is the financial extractor with a chosen schema version.
type versioned struct {
	extract.Financial
	v int
}

func (e versioned) SchemaVersion() int { return e.v }

// TestSchemaVersionBumpReextracts: restarting with a newer extractor
// schema re-extracts the documents that extractor handled, and only those.
func TestSchemaVersionBumpReextracts(t *testing.T) {
	t.Parallel()
	eachMode(t, testSchemaVersionBumpReextracts)
}

func testSchemaVersionBumpReextracts(t *testing.T, in *infra) {
	ctx := context.Background()
	h := start(t, in, []extract.Extractor{versioned{v: 1}, extract.MeetingNotes{}})
	sc := scope("acme", "")
	fin := h.ingest(t, sc, report, "https://x/bhp", "BHP", bhpReport).GetDocument().GetId()
	other := h.ingest(t, sc, email, "https://x/mail", "Office", "Hi all,\nthe office moves on Monday.\nThanks").GetDocument().GetId()
	first := h.settled(t, sc, fin)
	otherDoc := h.settled(t, sc, other)
	if first.GetExtracts()[0].GetSchemaVersion() != 1 {
		t.Fatalf("first extract: %v", first.GetExtracts()[0])
	}
	h.stop()

	h2 := start(t, in, []extract.Extractor{versioned{v: 2}, extract.MeetingNotes{}})
	if err := h2.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	var doc *indexerv1.Document
	testkit.Eventually(t, 20*time.Second, func() bool {
		doc = h2.settled(t, sc, fin)
		return doc.GetExtractionJobId() != first.GetExtractionJobId() && document.Terminal(doc.GetExtractionStatus())
	}, "re-extraction")
	if len(doc.GetExtracts()) != 1 || doc.GetExtracts()[0].GetSchemaVersion() != 2 || doc.GetContentHash() != first.GetContentHash() {
		t.Fatalf("after the bump: %v", doc.GetExtracts())
	}
	if job := h2.job(t, sc, doc.GetExtractionJobId()); job.GetReason() != "schema_upgrade" {
		t.Fatalf("job: %v", job)
	}
	if d := h2.settled(t, sc, other); d.GetExtractionJobId() != otherDoc.GetExtractionJobId() {
		t.Fatal("a document the extractor never handled was re-extracted")
	}
}

// TestInvalidArgumentNamesTheField: bad input is InvalidArgument with the
// field in a BadRequest detail.
func TestInvalidArgumentNamesTheField(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := start(t, newInfra(t), nil)
	sc := scope("acme", "")
	ok := func() *indexerv1.IngestDocumentRequest {
		return &indexerv1.IngestDocumentRequest{Scope: sc, SourceType: wiki, SourceUrl: "https://x/1", RawContent: "text"}
	}
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"ingest without tenant", func() error {
			r := ok()
			r.Scope = nil
			_, err := h.docs.IngestDocument(ctx, r)
			return err
		}, "scope.tenant_id"},
		{"ingest without source type", func() error {
			r := ok()
			r.SourceType = 0
			_, err := h.docs.IngestDocument(ctx, r)
			return err
		}, "source_type"},
		{"ingest with an unknown source type", func() error {
			r := ok()
			r.SourceType = 99
			_, err := h.docs.IngestDocument(ctx, r)
			return err
		}, "source_type"},
		{"ingest blank content", func() error { r := ok(); r.RawContent = " \n"; _, err := h.docs.IngestDocument(ctx, r); return err }, "raw_content"},
		{"ingest too much content", func() error {
			r := ok()
			r.RawContent = strings.Repeat("x", 1<<20+1)
			_, err := h.docs.IngestDocument(ctx, r)
			return err
		}, "raw_content"},
		{"ingest a relative URL", func() error {
			r := ok()
			r.SourceUrl = "wiki/page 1"
			_, err := h.docs.IngestDocument(ctx, r)
			return err
		}, "source_url"},
		{"attachment without type", func() error {
			r := ok()
			r.Attachments = []*indexerv1.Attachment{{Name: "a.png", Data: []byte{1}}}
			_, err := h.docs.IngestDocument(ctx, r)
			return err
		}, "attachments[0].mime_type"},
		{"too many attachments", func() error {
			r := ok()
			for range 3 {
				r.Attachments = append(r.Attachments, &indexerv1.Attachment{Name: "a.png", MimeType: "image/png", Data: []byte{1}})
			}
			_, err := h.docs.IngestDocument(ctx, r)
			return err
		}, "attachments"},
		{"an image that is not one", func() error {
			r := ok()
			r.Attachments = []*indexerv1.Attachment{{Name: "shot.png", MimeType: "image/png", Data: []byte("<html>not a picture</html>")}}
			_, err := h.docs.IngestDocument(ctx, r)
			return err
		}, "attachments[0].data"},
		{"a PDF that is not one", func() error {
			r := ok()
			r.Attachments = []*indexerv1.Attachment{{Name: "report.pdf", MimeType: "application/pdf", Data: []byte("PK\x03\x04 a zip")}}
			_, err := h.docs.IngestDocument(ctx, r)
			return err
		}, "attachments[0].data"},
		{"a broken e-mail", func() error {
			r := ok()
			r.SourceType = email
			r.RawContent = "From: ana@example.com\nTo: ops@example.com\nContent-Type: multipart/mixed; boundary=b1\n\nno part starts here\n"
			_, err := h.docs.IngestDocument(ctx, r)
			return err
		}, "raw_content"},
		{"get without id", func() error {
			_, err := h.docs.GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: sc})
			return err
		}, "document_id"},
		{"list with a negative page size", func() error {
			_, err := h.docs.ListDocuments(ctx, &indexerv1.ListDocumentsRequest{Scope: sc, PageSize: -1})
			return err
		}, "page_size"},
		{"list with a forged token", func() error {
			_, err := h.docs.ListDocuments(ctx, &indexerv1.ListDocumentsRequest{Scope: sc, PageToken: "not-a-token"})
			return err
		}, "page_token"},
		{"find without type", func() error {
			_, err := h.docs.FindDocumentsByExtract(ctx, &indexerv1.FindDocumentsByExtractRequest{Scope: sc})
			return err
		}, "extract_type"},
		{"search without query", func() error {
			_, err := h.search.Search(ctx, &indexerv1.SearchRequest{Scope: sc})
			return err
		}, "query"},
		{"search with a bad source type", func() error {
			_, err := h.search.Search(ctx, &indexerv1.SearchRequest{Scope: sc, Query: "x", SourceTypes: []indexerv1.SourceType{0}})
			return err
		}, "source_types[0]"},
		{"neighbours too deep", func() error {
			_, err := h.graph.ListNeighbors(ctx, &indexerv1.ListNeighborsRequest{Scope: sc, Key: "doc:x", Depth: 9})
			return err
		}, "depth"},
		{"neighbours over an edge type the graph has not", func() error {
			_, err := h.graph.ListNeighbors(ctx, &indexerv1.ListNeighborsRequest{Scope: sc, Key: "doc:x", EdgeTypes: []string{graph.Mentions, "part_of"}})
			return err
		}, "edge_types[1]"},
		{"path without target", func() error {
			_, err := h.graph.FindPath(ctx, &indexerv1.FindPathRequest{Scope: sc, FromKey: "doc:x"})
			return err
		}, "to_key"},
		{"job without id", func() error {
			_, err := h.docs.GetExtractionJob(ctx, &indexerv1.GetExtractionJobRequest{Scope: sc})
			return err
		}, "job_id"},
		{"list with an upside-down time range", func() error {
			_, err := h.docs.ListDocuments(ctx, &indexerv1.ListDocumentsRequest{Scope: sc,
				CreateTimeFrom: timestamppb.New(time.Now()), CreateTimeTo: timestamppb.New(time.Now().Add(-time.Hour))})
			return err
		}, "create_time_from"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("code = %v (%v), want InvalidArgument", st.Code(), err)
			}
			var field string
			for _, d := range st.Details() {
				if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
					field = br.GetFieldViolations()[0].GetField()
				}
			}
			if field != tc.field {
				t.Fatalf("field = %q, want %q (%v)", field, tc.field, err)
			}
		})
	}
	// Refused input left nothing behind.
	if l, err := h.docs.ListDocuments(ctx, &indexerv1.ListDocumentsRequest{Scope: sc}); err != nil || len(l.GetDocuments()) != 0 {
		t.Fatalf("after refused ingests: %d documents, %v", len(l.GetDocuments()), err)
	}
	// A token from another filter is refused too.
	for range 2 {
		h.ingest(t, sc, wiki, fmt.Sprintf("https://x/%d", time.Now().UnixNano()), "t", "some text")
	}
	p, err := h.docs.ListDocuments(ctx, &indexerv1.ListDocumentsRequest{Scope: sc, PageSize: 1})
	if err != nil || p.GetNextPageToken() == "" {
		t.Fatalf("page: %v, %v", p, err)
	}
	_, err = h.docs.ListDocuments(ctx, &indexerv1.ListDocumentsRequest{Scope: sc, PageSize: 1, SourceType: email, PageToken: p.GetNextPageToken()})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("token reused with another filter: %v", err)
	}
	// A creation-time range: from inclusive, to exclusive; a token is bound
	// to its range.
	both, err := h.docs.ListDocuments(ctx, &indexerv1.ListDocumentsRequest{Scope: sc})
	if err != nil || len(both.GetDocuments()) != 2 {
		t.Fatalf("list: %v, %v", both, err)
	}
	first := both.GetDocuments()[0].GetCreateTime() // the earlier stored (the list is in id order)
	if c := both.GetDocuments()[1].GetCreateTime(); c.AsTime().Before(first.AsTime()) {
		first = c
	}
	for _, tc := range []struct {
		name     string
		from, to *timestamppb.Timestamp
		want     int
	}{
		{"from the earlier document", first, nil, 2},
		{"to the earlier document", nil, first, 0},
		{"from a minute ahead", timestamppb.New(time.Now().Add(time.Minute)), nil, 0},
		{"the last hour", timestamppb.New(time.Now().Add(-time.Hour)), timestamppb.New(time.Now().Add(time.Minute)), 2},
	} {
		l, err := h.docs.ListDocuments(ctx, &indexerv1.ListDocumentsRequest{Scope: sc, CreateTimeFrom: tc.from, CreateTimeTo: tc.to})
		if err != nil || len(l.GetDocuments()) != tc.want {
			t.Errorf("%s: %d documents, %v; want %d", tc.name, len(l.GetDocuments()), err, tc.want)
		}
	}
	_, err = h.docs.ListDocuments(ctx, &indexerv1.ListDocumentsRequest{Scope: sc, PageSize: 1, CreateTimeFrom: first, PageToken: p.GetNextPageToken()})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("token reused with a time range: %v", err)
	}
}
