package sqlagent_test

import (
	"strings"
	"testing"

	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// routerPrompt is in the router's system message only (the SQL writer's
// begins "You write one read-only").
const routerPrompt = "You route a user's request"

// route scripts the router's answer to text.
func route(sim *providersim.Server, text string, answer any) *providersim.Rule {
	return sim.When(providersim.Match{SystemContains: routerPrompt, LastUserContains: text}).JSON(answer)
}

// TestDropdownFlowSkipsTheModel is the seed's dropdown flow: "read data
// from customers" → the router (one model call) → the validator finds no
// connection → FETCH_CONNECTIONS with the connection names as options →
// the selection is assigned without a model call → the method is asked
// (ASK) without one → "generate" writes SQL for the words the router kept
// (the second and last model call).
func TestDropdownFlowSkipsTheModel(t *testing.T) {
	t.Parallel()
	const request = "read data from customers"
	sim, modelAddr := startModel(t)
	router := route(sim, request, map[string]string{"job_kind": "READ_SQL", "connection": "", "question": request})
	writer := sim.When(providersim.Match{SystemContains: "You write one read-only", LastUserContains: "Question: " + request}).
		Text("```sql\nSELECT CustomerId, FirstName, LastName FROM Customer\n```")
	c := startAgent(t, modelAddr, "music=sqlite:"+chinookCopy(t)+"; spare=sqlite:"+chinookCopy(t), nil)

	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Text: request})
	if err != nil {
		t.Fatal(err)
	}
	wantStage(t, created, "NEED_CONNECTION")
	if got := optionValues(created.GetOptions()); created.GetAction() != sqlagentv1.Action_ACTION_FETCH_CONNECTIONS || strings.Join(got, ",") != "music,spare" {
		t.Fatalf("action %v, options %v; want FETCH_CONNECTIONS with music,spare", created.GetAction(), got)
	}
	if n := len(sim.ChatRequests()); n != 1 || router.Hits() != 1 {
		t.Fatalf("model calls after the request = %d (router hits %d), want 1", n, router.Hits())
	}
	if req := sim.ChatRequests()[0]; req.JSONMode == "" {
		t.Fatalf("the router's call asked for no JSON (mode %q)", req.JSONMode)
	}
	if created.GetSession().GetJobKind() != sqlagentv1.JobKind_JOB_KIND_READ_SQL {
		t.Fatalf("job kind = %v, want READ_SQL", created.GetSession().GetJobKind())
	}
	id := created.GetSession().GetId()

	r := send(t, c, id, "sel:music")
	wantStage(t, r, "ASK_SQL_METHOD")
	if r.GetAction() != sqlagentv1.Action_ACTION_ASK || r.GetSession().GetParameters().AsMap()["connection"] != "music" {
		t.Fatalf("after the selection: action %v, parameters %v", r.GetAction(), r.GetSession().GetParameters().AsMap())
	}
	if n := len(sim.ChatRequests()); n != 1 {
		t.Fatalf("model calls after the connection selection = %d, want still 1", n)
	}

	r = send(t, c, id, "sel:generate")
	wantStage(t, r, "CONFIRM_GENERATED_SQL")
	if r.GetSqlToConfirm() != "SELECT CustomerId, FirstName, LastName FROM Customer" {
		t.Fatalf("sql_to_confirm = %q", r.GetSqlToConfirm())
	}
	if n := len(sim.ChatRequests()); n != 2 || writer.Hits() != 1 {
		t.Fatalf("model calls after generate = %d (writer hits %d), want 2", n, writer.Hits())
	}
	t.Logf("model calls: request 1, connection selection 0, method selection 0, SQL 1: total %d", len(sim.ChatRequests()))

	// A selection that was not offered is refused, naming the field, and
	// changes nothing.
	other, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Text: request})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SendInput(ctxTimeout(t), &sqlagentv1.SendInputRequest{Scope: scopeA, SessionId: other.GetSession().GetId(), Selection: "ORACLE_10"})
	wantInvalid(t, err, "selection")
	got, err := c.GetSession(ctxTimeout(t), &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: other.GetSession().GetId()})
	if err != nil || got.GetSession().GetStage() != "NEED_CONNECTION" || len(got.GetSession().GetTurns()) != len(other.GetSession().GetTurns()) {
		t.Fatalf("session after a selection not offered: %v (%v)", got.GetSession(), err)
	}
}

// TestRouterPicksTheJobKind scripts the router's answer for each job kind,
// a garbage answer and an unknown kind, and checks where each lands, that
// a job kind picked from the dropdown makes no model call, and that a
// change of job kind clears what was gathered.
func TestRouterPicksTheJobKind(t *testing.T) {
	t.Parallel()
	sim, modelAddr := startModel(t)
	c := startAgent(t, modelAddr, "music=sqlite:"+chinookCopy(t)+"; spare=sqlite:"+chinookCopy(t), nil)
	route(sim, "how many invoices in music", map[string]string{"job_kind": "READ_SQL", "connection": "music", "question": "how many invoices"})
	route(sim, "compare two queries on music", map[string]string{"job_kind": "COMPARE_SQL", "connection": "music"})
	route(sim, "write the top customers to a table", map[string]string{"job_kind": "WRITE_DATA"})
	route(sim, "email me the sales table", map[string]string{"job_kind": "SEND_EMAIL"})
	route(sim, "read it from oracle_prod", map[string]string{"job_kind": "READ_SQL", "connection": "oracle_prod"})
	route(sim, "make me a sandwich", map[string]string{"job_kind": "UNKNOWN"})
	sim.When(providersim.Match{SystemContains: routerPrompt, LastUserContains: "tell me a story"}).Text("Sure! Here is what I think you want: reading, maybe writing.")

	kinds := "READ_SQL,WRITE_DATA,SEND_EMAIL,COMPARE_SQL"
	cases := []struct {
		text, stage string
		kind        sqlagentv1.JobKind
		action      sqlagentv1.Action
		options     string
		conn        string
		calls       int // model calls the request makes
	}{
		{"how many invoices in music", "ASK_SQL_METHOD", sqlagentv1.JobKind_JOB_KIND_READ_SQL, sqlagentv1.Action_ACTION_ASK, "generate,user_sql,compare", "music", 1},
		{"compare two queries on music", "ASK_FIRST_SQL_METHOD", sqlagentv1.JobKind_JOB_KIND_COMPARE_SQL, sqlagentv1.Action_ACTION_TOOL, "", "music", 1},
		{"write the top customers to a table", "NEED_CONNECTION", sqlagentv1.JobKind_JOB_KIND_WRITE_DATA, sqlagentv1.Action_ACTION_FETCH_CONNECTIONS, "music,spare", "", 1},
		// Nothing was written yet: the agent says so and asks again.
		{"email me the sales table", "ASK_JOB_KIND", sqlagentv1.JobKind_JOB_KIND_UNSPECIFIED, sqlagentv1.Action_ACTION_ASK_JOB_KIND, kinds, "", 1},
		// A connection the model made up is not taken: the dropdown asks.
		{"read it from oracle_prod", "NEED_CONNECTION", sqlagentv1.JobKind_JOB_KIND_READ_SQL, sqlagentv1.Action_ACTION_FETCH_CONNECTIONS, "music,spare", "", 1},
		{"make me a sandwich", "ASK_JOB_KIND", sqlagentv1.JobKind_JOB_KIND_UNSPECIFIED, sqlagentv1.Action_ACTION_ASK_JOB_KIND, kinds, "", 1},
		// Not JSON: the gateway asks the model once more to repair it,
		// then gives up; the agent asks, no error.
		{"tell me a story", "ASK_JOB_KIND", sqlagentv1.JobKind_JOB_KIND_UNSPECIFIED, sqlagentv1.Action_ACTION_ASK_JOB_KIND, kinds, "", 2},
	}
	for _, tc := range cases {
		before := len(sim.ChatRequests())
		r, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Text: tc.text})
		if err != nil {
			t.Fatalf("%q: %v", tc.text, err)
		}
		s := r.GetSession()
		opts := strings.Join(optionValues(r.GetOptions()), ",")
		if s.GetStage() != tc.stage || s.GetJobKind() != tc.kind || r.GetAction() != tc.action || (tc.options != "" && opts != tc.options) ||
			s.GetParameters().AsMap()["connection"] != nilIfEmpty(tc.conn) {
			t.Errorf("%q: stage %s kind %v action %v options %s parameters %v (%q); want %s %v %v %s connection %q",
				tc.text, s.GetStage(), s.GetJobKind(), r.GetAction(), opts, s.GetParameters().AsMap(), r.GetReply(),
				tc.stage, tc.kind, tc.action, tc.options, tc.conn)
		}
		if n := len(sim.ChatRequests()) - before; n != tc.calls {
			t.Errorf("%q: %d model calls, want %d", tc.text, n, tc.calls)
		}
	}

	// From the router's question, the dropdown: no model call.
	asked, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Text: "make me a sandwich"})
	if err != nil {
		t.Fatal(err)
	}
	id := asked.GetSession().GetId()
	before := len(sim.ChatRequests())
	_, err = c.SendInput(ctxTimeout(t), &sqlagentv1.SendInputRequest{Scope: scopeA, SessionId: id, Selection: "JOB_KIND_READ_SQL"})
	wantInvalid(t, err, "selection")
	r := send(t, c, id, "sel:COMPARE_SQL")
	wantStage(t, r, "NEED_CONNECTION")
	r = send(t, c, id, "sel:spare")
	wantStage(t, r, "ASK_FIRST_SQL_METHOD")
	if n := len(sim.ChatRequests()) - before; n != 0 {
		t.Fatalf("the dropdown path made %d model calls, want 0", n)
	}
	// A job kind given at creation skips the router too.
	typed, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "music", JobKind: sqlagentv1.JobKind_JOB_KIND_COMPARE_SQL})
	if err != nil || typed.GetSession().GetStage() != "ASK_FIRST_SQL_METHOD" || len(sim.ChatRequests()) != before {
		t.Fatalf("typed job kind: %v, %v, %d model calls", typed.GetSession(), err, len(sim.ChatRequests())-before)
	}
	_, err = c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, JobKind: sqlagentv1.JobKind(42)})
	wantInvalid(t, err, "job_kind")

	// Switching job kind clears the gathered parameters: the connection
	// and the request the router read for READ_SQL are gone.
	read, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Text: "how many invoices in music"})
	if err != nil {
		t.Fatal(err)
	}
	if p := read.GetSession().GetParameters().AsMap(); p["connection"] != "music" || p["request"] != "how many invoices" {
		t.Fatalf("gathered = %v", p)
	}
	id = read.GetSession().GetId()
	wantStage(t, send(t, c, id, "sel:change_job"), "ASK_JOB_KIND")
	r = send(t, c, id, "compare two queries on music")
	wantStage(t, r, "ASK_FIRST_SQL_METHOD")
	p := r.GetSession().GetParameters().AsMap()
	if _, ok := p["request"]; ok || p["connection"] != "music" || r.GetSession().GetJobKind() != sqlagentv1.JobKind_JOB_KIND_COMPARE_SQL {
		t.Fatalf("after switching to COMPARE_SQL: kind %v, parameters %v", r.GetSession().GetJobKind(), p)
	}
	read, err = c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Text: "how many invoices in music"})
	if err != nil {
		t.Fatal(err)
	}
	id = read.GetSession().GetId()
	wantStage(t, send(t, c, id, "sel:change_job"), "ASK_JOB_KIND")
	r = send(t, c, id, "sel:WRITE_DATA")
	wantStage(t, r, "NEED_CONNECTION")
	if p := r.GetSession().GetParameters().AsMap(); len(p) != 0 {
		t.Fatalf("after switching to WRITE_DATA the parameters are %v, want none", p)
	}
}

// nilIfEmpty is how a parameter that is absent reads from the Struct.
func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// TestTableDropdownSkipsTheModel: WRITE_DATA's table is offered as a
// dropdown of the target schema's tables (FETCH_TABLES): base tables a
// table may be named, no views, no internal tables. A pick is taken as
// is, with no model call; a table not offered (another case, qualified,
// a view, a name no table may have) is InvalidArgument naming
// selection, and the session is unchanged. The one model call of the
// whole flow is the router's.
func TestTableDropdownSkipsTheModel(t *testing.T) {
	t.Parallel()
	const request = "write the genres to a table"
	sim, modelAddr := startModel(t)
	route(sim, request, map[string]string{"job_kind": "WRITE_DATA"})
	path := chinookCopy(t)
	own := openSQLite(t, path)
	if _, err := own.Exec(`CREATE VIEW genre_view AS SELECT * FROM Genre; CREATE TABLE "bad name" (x)`); err != nil {
		t.Fatal(err)
	}
	c := startAgent(t, modelAddr, "music=sqlite:"+path, nil)
	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Text: request})
	if err != nil {
		t.Fatal(err)
	}
	wantStage(t, created, "NEED_CONNECTION")
	id := created.GetSession().GetId()
	wantStage(t, send(t, c, id, "sel:music"), "ASK_SQL_METHOD")
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_USER_SQL")
	wantStage(t, send(t, c, id, "SELECT GenreId, Name FROM Genre"), "CONFIRM_USER_SQL")
	wantStage(t, runRead(t, c, id, "yes"), "SHOW_RESULTS")
	r := send(t, c, id, "sel:write")
	wantStage(t, r, "NEED_TABLE_NAME")
	chinook := "Album,Artist,Customer,Employee,Genre,Invoice,InvoiceLine,MediaType,Playlist,PlaylistTrack,Track"
	if got := strings.Join(optionValues(r.GetOptions()), ","); r.GetAction() != sqlagentv1.Action_ACTION_FETCH_TABLES || got != chinook {
		t.Fatalf("action %v, table options %s; want FETCH_TABLES with %s", r.GetAction(), got, chinook)
	}
	wantStage(t, send(t, c, id, "genre_copy"), "ASK_WRITE_MODE")
	wantStage(t, send(t, c, id, "sel:create"), "CONFIRM_WRITE")
	wantStage(t, send(t, c, id, "yes"), "NEED_WRITE_OR_EMAIL")

	// Again, into the table just written, picked from the dropdown.
	r = send(t, c, id, "sel:write")
	if got := strings.Join(optionValues(r.GetOptions()), ","); r.GetAction() != sqlagentv1.Action_ACTION_FETCH_TABLES || got != chinook+",genre_copy" {
		t.Fatalf("after the write: action %v, table options %s", r.GetAction(), got)
	}
	before, err := c.GetSession(ctxTimeout(t), &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	for _, sel := range []string{"GENRE_COPY", "main.genre_copy", "genre_view", "bad name", "sqlite_master", "no_such_table"} {
		_, err := c.SendInput(ctxTimeout(t), &sqlagentv1.SendInputRequest{Scope: scopeA, SessionId: id, Selection: sel})
		wantInvalid(t, err, "selection")
		after, err := c.GetSession(ctxTimeout(t), &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: id})
		if err != nil || after.GetSession().GetStage() != "NEED_TABLE_NAME" || len(after.GetSession().GetTurns()) != len(before.GetSession().GetTurns()) ||
			!after.GetSession().GetUpdateTime().AsTime().Equal(before.GetSession().GetUpdateTime().AsTime()) {
			t.Fatalf("selection %q changed the session: %v (%v)", sel, after.GetSession(), err)
		}
	}
	r = send(t, c, id, "sel:genre_copy")
	wantStage(t, r, "ASK_WRITE_MODE")
	if r.GetSession().GetParameters().AsMap()["table_name"] != "genre_copy" {
		t.Fatalf("parameters after the pick: %v", r.GetSession().GetParameters().AsMap())
	}
	wantStage(t, send(t, c, id, "sel:truncate"), "CONFIRM_WRITE")
	wantStage(t, send(t, c, id, "yes"), "NEED_WRITE_OR_EMAIL")
	var n int
	if err := own.QueryRow(`SELECT count(*) FROM genre_copy`).Scan(&n); err != nil || n != 25 {
		t.Fatalf("genre_copy refilled holds %d rows (%v), want Chinook's 25 genres once", n, err)
	}
	if n := len(sim.ChatRequests()); n != 1 {
		t.Fatalf("model calls = %d, want 1 (the router's); every dropdown pick bypasses the model", n)
	}
}
