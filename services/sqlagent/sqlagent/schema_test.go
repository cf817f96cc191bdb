package sqlagent_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/config"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/indexer/indexer"
)

// fillerTables is how many unrelated tables the synthetic schemas carry:
// with the small budget below, far more than the prompt takes.
const fillerTables = 300

// wideSchema creates a SQLite database of fillerTables unrelated tables
// (audit_metric_NNN, sorting before the others) and a small billing
// schema: customers ← invoices ← invoice_lines, plus zz_attrition_evt
// whose name no question word matches, and a table whose name carries
// quotes and non-ASCII letters.
func wideSchema(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "wide.db")
	db := openSQLite(t, path)
	stmts := []string{
		`CREATE TABLE customers (customer_id INTEGER PRIMARY KEY, name TEXT, email TEXT)`,
		`CREATE TABLE invoices (invoice_id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(customer_id), total REAL, issued_on TEXT)`,
		`CREATE TABLE invoice_lines (line_id INTEGER PRIMARY KEY, invoice_id INTEGER REFERENCES invoices(invoice_id), amount REAL)`,
		`CREATE TABLE zz_attrition_evt (evt_id INTEGER PRIMARY KEY, subscriber_ref TEXT, happened_on TEXT)`,
		`CREATE TABLE "größe ""quoted"" maß" (wert REAL)`,
	}
	for i := range fillerTables {
		stmts = append(stmts, fmt.Sprintf(`CREATE TABLE audit_metric_%03d (metric_id INTEGER PRIMARY KEY, label TEXT, reading REAL, recorded_at TEXT)`, i))
	}
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return path
}

// systemPrompt is the system message of the simulator's last chat request.
func systemPrompt(t *testing.T, sim *providersim.Server) string {
	t.Helper()
	reqs := sim.ChatRequests()
	if len(reqs) == 0 {
		t.Fatal("the model was not asked")
	}
	var system string
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "system" {
			system += m.Content
		}
	}
	return system
}

// askGenerated starts a session on connection conn and sends question as a
// question to generate SQL for; it returns the reply at the confirmation.
func askGenerated(t *testing.T, c sqlagentv1.SqlAgentServiceClient, conn, question string) *sqlagentv1.SendInputResponse {
	t.Helper()
	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: conn})
	if err != nil {
		t.Fatal(err)
	}
	wantStage(t, send(t, c, created.GetSession().GetId(), "sel:generate"), "NEED_NATURAL_LANGUAGE")
	r := send(t, c, created.GetSession().GetId(), question)
	wantStage(t, r, "CONFIRM_GENERATED_SQL")
	return r
}

// wantShown fails unless the reply and the stored session list exactly
// want (in any order) as shown to the model, and the prompt has each.
func wantShown(t *testing.T, c sqlagentv1.SqlAgentServiceClient, r *sqlagentv1.SendInputResponse, system string, want ...string) {
	t.Helper()
	got := slices.Sorted(slices.Values(r.GetSchemaTablesShown()))
	if w := slices.Sorted(slices.Values(want)); !slices.Equal(got, w) {
		t.Fatalf("schema_tables_shown = %q, want %q\nprompt:\n%s", got, w, system)
	}
	for _, name := range want {
		if !strings.Contains(system, "\n"+name+"(") && !strings.Contains(system, ":\n"+name+"(") {
			t.Errorf("the prompt lacks table %q:\n%s", name, system)
		}
	}
	stored, err := c.GetSession(ctxTimeout(t), &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: r.GetSession().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if s := stored.GetSession(); !slices.Equal(s.GetSchemaTablesShown(), r.GetSchemaTablesShown()) || s.GetSchemaNote() != r.GetSchemaNote() {
		t.Fatalf("GetSession: tables %q note %q; the reply said %q, %q", s.GetSchemaTablesShown(), s.GetSchemaNote(), r.GetSchemaTablesShown(), r.GetSchemaNote())
	}
}

// TestSchemaTooLongShowsTheQuestionsTables: with a schema of 305 tables
// and a budget of 2,000 characters, a question about invoices shows the
// model the invoice tables and, one foreign-key hop away, customers, and
// none of the unrelated tables; the reply and the session say which were
// shown. A question matching nothing shows the first tables by name and
// says so; a question typed as SQL, huge, or in non-ASCII words is matched
// by its words; a schema that fits is shown whole with no sentence.
func TestSchemaTooLongShowsTheQuestionsTables(t *testing.T) {
	t.Parallel()
	sim, modelAddr := startModel(t)
	sim.When(providersim.Match{}).Text("```sql\nSELECT 1\n```")
	c := startAgent(t, modelAddr, "wide=sqlite:"+wideSchema(t)+"; small=sqlite:"+chinookCopy(t), map[string]string{"SQLAGENT_SCHEMA_CHARS": "2000"})
	total := fillerTables + 5

	t.Run("question", func(t *testing.T) {
		r := askGenerated(t, c, "wide", "What was the total of the invoices last month?")
		system := systemPrompt(t, sim)
		wantShown(t, c, r, system, "invoices", "invoice_lines", "customers")
		if strings.Contains(system, "audit_metric_") || strings.Contains(system, "zz_attrition_evt") {
			t.Fatalf("the prompt shows unrelated tables:\n%s", system)
		}
		if !strings.Contains(system, fmt.Sprintf("-- (only 3 of %d tables are shown", total)) {
			t.Errorf("the prompt does not tell the model that tables are left out:\n%s", system)
		}
		note := r.GetSchemaNote()
		if !strings.HasPrefix(note, "Shown to the model: invoices, ") || !strings.Contains(note, fmt.Sprintf("(3 of %d tables, picked by the question)", total)) {
			t.Fatalf("schema_note = %q", note)
		}
		if !strings.Contains(r.GetReply(), note) {
			t.Fatalf("reply %q lacks the note %q", r.GetReply(), note)
		}
	})

	t.Run("no word matches", func(t *testing.T) {
		r := askGenerated(t, c, "wide", "Anything interesting happening lately?")
		system := systemPrompt(t, sim)
		shown := r.GetSchemaTablesShown()
		if len(shown) < 2 || len(shown) >= total || shown[0] != "audit_metric_000" || !slices.IsSorted(shown) {
			t.Fatalf("schema_tables_shown = %q, want the first tables by name", shown)
		}
		if !strings.Contains(r.GetSchemaNote(), "none matched the question, so the first by name") ||
			!strings.Contains(system, "none matched the question") || strings.Contains(system, "invoices(") {
			t.Fatalf("note %q, prompt:\n%s", r.GetSchemaNote(), system)
		}
		if len(strings.Join(strings.Split(system, "Schema (table(column TYPE, ...)):\n")[1:], "")) > 2000+200 {
			t.Fatalf("the schema in the prompt exceeds the budget:\n%s", system)
		}
	})

	t.Run("SQL typed as the question, 50 KB", func(t *testing.T) {
		q := "SELECT * FROM invoice_lines WHERE " + strings.Repeat("amount > 1 OR ", 3500) + "1 = 1"
		r := askGenerated(t, c, "wide", q)
		system := systemPrompt(t, sim)
		// invoice_lines by name and column, invoices by the word invoice,
		// customers one foreign-key hop from invoices; the SQL words
		// (SELECT, FROM, WHERE, OR) name nothing.
		wantShown(t, c, r, system, "invoice_lines", "invoices", "customers")
	})

	t.Run("quotes and non-ASCII letters", func(t *testing.T) {
		r := askGenerated(t, c, "wide", "Wie groß ist die Größe?")
		system := systemPrompt(t, sim)
		wantShown(t, c, r, system, `größe "quoted" maß`)
	})

	t.Run("fits", func(t *testing.T) {
		r := askGenerated(t, c, "small", "Which albums did AC/DC make?")
		system := systemPrompt(t, sim)
		if n := len(r.GetSchemaTablesShown()); n != 11 {
			t.Fatalf("schema_tables_shown = %q, want Chinook's 11 tables", r.GetSchemaTablesShown())
		}
		if r.GetSchemaNote() != "" || strings.Contains(r.GetReply(), "Shown to the model") || strings.Contains(system, "tables are shown") {
			t.Fatalf("a schema that fits got a selection note %q (reply %q)", r.GetSchemaNote(), r.GetReply())
		}
		wantShown(t, c, r, system, r.GetSchemaTablesShown()...)
	})
}

// knowledgeBase is a SearchService on loopback: the indexer's contract,
// answering each query with the passages set for it. It shows what the
// real indexer (TestIndexerPicksTables) cannot be made to do on cue: fail,
// and refuse a query too long.
type knowledgeBase struct {
	indexerv1.UnimplementedSearchServiceServer
	mu       sync.Mutex
	requests []*indexerv1.SearchRequest
	// answer gives the hits for a request, or an error.
	answer func(ctx context.Context, req *indexerv1.SearchRequest) ([]*indexerv1.SearchHit, error)
}

func (k *knowledgeBase) Search(ctx context.Context, req *indexerv1.SearchRequest) (*indexerv1.SearchResponse, error) {
	k.mu.Lock()
	k.requests = append(k.requests, req)
	k.mu.Unlock()
	if len([]rune(req.GetQuery())) > 2000 {
		return nil, status.Error(codes.InvalidArgument, "query: longer than 2000 characters")
	}
	hits, err := k.answer(ctx, req)
	return &indexerv1.SearchResponse{Hits: hits}, err
}

func (k *knowledgeBase) seen() []*indexerv1.SearchRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.requests)
}

// startKnowledgeBase serves k on 127.0.0.1:0 and returns its address.
func startKnowledgeBase(t *testing.T, k *knowledgeBase) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	indexerv1.RegisterSearchServiceServer(srv, k)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestKnowledgeBasePicksTables: a passage of the tenant's knowledge base
// naming zz_attrition_evt puts that table in front of the model for a
// question none of whose words it matches (without the passage, nothing
// matches and the first tables by name are shown); a search that fails
// does not fail the job, and is logged.
func TestKnowledgeBasePicksTables(t *testing.T) {
	t.Parallel()
	const question = "How many subscriptions were cancelled in March?"
	sim, modelAddr := startModel(t)
	sim.When(providersim.Match{}).Text("```sql\nSELECT 1\n```")
	kb := &knowledgeBase{answer: func(_ context.Context, req *indexerv1.SearchRequest) ([]*indexerv1.SearchHit, error) {
		if strings.Contains(req.GetQuery(), "down") {
			return nil, grpcx.Errorf(codes.Unavailable, "DEPENDENCY_UNAVAILABLE", "the index is rebuilding")
		}
		return []*indexerv1.SearchHit{
			{Title: "Data dictionary: churn", Text: "Cancellations are recorded in zz_attrition_evt, one row per cancelled subscription."},
			{Title: "Runbook", Text: "Restart the exporter; the metrics are not affected."},
		}, nil
	}}
	var logs testkit.Buffer
	c, _ := startAgentLogged(t, modelAddr, "wide=sqlite:"+wideSchema(t), map[string]string{
		"SQLAGENT_SCHEMA_CHARS": "2000", "INDEXER_ADDR": startKnowledgeBase(t, kb),
	}, &logs)
	without, _ := startAgentLogged(t, modelAddr, "wide=sqlite:"+wideSchema(t), map[string]string{"SQLAGENT_SCHEMA_CHARS": "2000"}, nil)

	r := askGenerated(t, without, "wide", question)
	if slices.Contains(r.GetSchemaTablesShown(), "zz_attrition_evt") || !strings.Contains(r.GetSchemaNote(), "none matched") {
		t.Fatalf("without the knowledge base: shown %q, note %q; want the first tables by name", r.GetSchemaTablesShown(), r.GetSchemaNote())
	}

	r = askGenerated(t, c, "wide", question)
	wantShown(t, c, r, systemPrompt(t, sim), "zz_attrition_evt")
	if !strings.Contains(r.GetSchemaNote(), "(1 of 305 tables, picked by the knowledge base)") {
		t.Fatalf("schema_note = %q", r.GetSchemaNote())
	}
	reqs := kb.seen()
	if len(reqs) != 1 || reqs[0].GetQuery() != question ||
		reqs[0].GetScope().GetTenantId() != scopeA.GetTenantId() || reqs[0].GetScope().GetProjectId() != scopeA.GetProjectId() {
		t.Fatalf("search requests = %v, want one for the question in scope %v", reqs, scopeA)
	}

	// The knowledge base fails: the job goes on, picked by the question.
	r = askGenerated(t, c, "wide", "Invoices while the index is down?")
	wantShown(t, c, r, systemPrompt(t, sim), "invoices", "invoice_lines", "customers")
	if !strings.Contains(logs.String(), "knowledge base search failed") || !strings.Contains(logs.String(), "the index is rebuilding") {
		t.Fatalf("the failed search was not logged:\n%s", logs.String())
	}

	// A question longer than a search takes is cut for the search, not
	// refused by it.
	askGenerated(t, c, "wide", strings.Repeat("cancelled ", 500))
	last := kb.seen()[len(kb.seen())-1]
	if n := len([]rune(last.GetQuery())); n != 2000 {
		t.Fatalf("search query of %d characters, want cut to 2000", n)
	}

	// A schema that fits is not narrowed: no search.
	small := startKnowledgeBaseAgent(t, modelAddr, kb)
	before := len(kb.seen())
	askGenerated(t, small, "small", question)
	if len(kb.seen()) != before {
		t.Fatal("the knowledge base was searched for a schema that fits")
	}
}

// startKnowledgeBaseAgent is an agent with the Chinook copy as "small" and
// the knowledge base kb, at the default schema budget.
func startKnowledgeBaseAgent(t *testing.T, modelAddr string, kb *knowledgeBase) sqlagentv1.SqlAgentServiceClient {
	t.Helper()
	return startAgent(t, modelAddr, "small=sqlite:"+chinookCopy(t), map[string]string{"INDEXER_ADDR": startKnowledgeBase(t, kb)})
}

// TestPostgresSchemaComments: on PostgreSQL, a table whose name and
// columns say nothing of the question is picked by its COMMENT ON words,
// its foreign-key neighbour in another schema comes with it, and the model
// is shown both comments.
func TestPostgresSchemaComments(t *testing.T) {
	t.Parallel()
	dsn := testkit.Postgres(t,
		`CREATE SCHEMA billing`,
		`CREATE TABLE billing.parties (party_id int PRIMARY KEY, display_name text)`,
		`CREATE TABLE acct_ledger (entry_id int PRIMARY KEY, party_id int REFERENCES billing.parties, amt numeric)`,
		`COMMENT ON TABLE acct_ledger IS 'Customer invoices: one row per invoice issued'`,
		`COMMENT ON COLUMN acct_ledger.amt IS 'Invoice total in EUR'`,
		`DO $$ BEGIN FOR i IN 1..80 LOOP
			EXECUTE format('CREATE TABLE audit_metric_%s (metric_id int, label text, reading real)', i);
		END LOOP; END $$`,
	)
	sim, modelAddr := startModel(t)
	sim.When(providersim.Match{}).Text("```sql\nSELECT 1\n```")
	c := startAgent(t, modelAddr, "wh=postgres:"+dsn, map[string]string{"SQLAGENT_SCHEMA_CHARS": "1500"})
	r := askGenerated(t, c, "wh", "What is the invoice total per customer?")
	system := systemPrompt(t, sim)
	wantShown(t, c, r, system, "acct_ledger", "billing.parties")
	if want := "acct_ledger(entry_id integer, party_id integer, amt numeric /* Invoice total in EUR */) -- Customer invoices: one row per invoice issued"; !strings.Contains(system, want) {
		t.Fatalf("the prompt lacks %q:\n%s", want, system)
	}
	if strings.Contains(system, "audit_metric_") || !strings.Contains(r.GetSchemaNote(), "(2 of 82 tables, picked by the question)") {
		t.Fatalf("note %q, prompt:\n%s", r.GetSchemaNote(), system)
	}
}

// TestIndexerPicksTables runs the real indexer in-process: a data
// dictionary ingested into the session's tenant and project, naming
// zz_attrition_evt, puts that table in front of the model for a question
// none of whose words it matches; the same dictionary in another tenant
// does not.
func TestIndexerPicksTables(t *testing.T) {
	t.Parallel()
	const question = "How many subscriptions were cancelled in March?"
	sim, modelAddr := startModel(t)
	sim.When(providersim.Match{}).Text("```sql\nSELECT 1\n```")
	uri, db := testkit.MongoURI(t)
	var cfg indexer.Config
	if err := config.Load("", &cfg, config.Map(map[string]string{
		"MONGO_URI": uri, "MONGO_DATABASE": db, "NATS_URL": testkit.NewNATS(t).URL(), "INDEXER_DATA_DIR": t.TempDir(),
		"INDEXER_LLM_EXTRACTION": "false", "MODELGATEWAY_ADDR": modelAddr, "VISION_ADDR": unreachable(t),
	})); err != nil {
		t.Fatal(err)
	}
	idxAddr := testkit.RunService(t, "indexer", func(ctx context.Context, rt service.Runtime) error { return indexer.Run(ctx, &cfg, rt) })
	conn, err := grpc.NewClient(idxAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := ctxTimeout(t)
	ingest := func(scope *commonv1.Scope, text string) {
		t.Helper()
		if _, err := indexerv1.NewDocumentServiceClient(conn).IngestDocument(ctx, &indexerv1.IngestDocumentRequest{
			Scope: scope, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, Title: "Data dictionary: churn", RawContent: text,
		}); err != nil {
			t.Fatalf("IngestDocument: %v", err)
		}
		testkit.Eventually(t, 20*time.Second, func() bool {
			r, err := indexerv1.NewSearchServiceClient(conn).Search(ctx, &indexerv1.SearchRequest{Scope: scope, Query: question})
			return err == nil && len(r.GetHits()) > 0
		}, "the dictionary to be searchable")
	}
	ingest(&commonv1.Scope{TenantId: "globex", ProjectId: scopeA.GetProjectId()},
		"Subscriptions cancelled are recorded in audit_metric_299, one row per cancelled subscription.")
	c := startAgent(t, modelAddr, "wide=sqlite:"+wideSchema(t), map[string]string{"SQLAGENT_SCHEMA_CHARS": "2000", "INDEXER_ADDR": idxAddr})

	// Only another tenant's dictionary: nothing picks a table.
	r := askGenerated(t, c, "wide", question)
	if slices.Contains(r.GetSchemaTablesShown(), "audit_metric_299") || !strings.Contains(r.GetSchemaNote(), "none matched") {
		t.Fatalf("another tenant's dictionary picked tables: shown %q, note %q", r.GetSchemaTablesShown(), r.GetSchemaNote())
	}

	ingest(scopeA, "Subscriptions cancelled are recorded in zz_attrition_evt, one row per cancelled subscription.")
	r = askGenerated(t, c, "wide", question)
	wantShown(t, c, r, systemPrompt(t, sim), "zz_attrition_evt")
	if !strings.Contains(r.GetSchemaNote(), "picked by the knowledge base") {
		t.Fatalf("schema_note = %q", r.GetSchemaNote())
	}
}

// unreachable is a loopback address nobody listens on.
func unreachable(t *testing.T) string {
	t.Helper()
	lis := testkit.Listen(t)
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}
