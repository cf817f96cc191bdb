package sqlagent_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

const (
	acdcQuestion = "How many albums does AC/DC have?"
	acdcSQL      = "SELECT count(*) AS albums FROM Album JOIN Artist ON Artist.ArtistId = Album.ArtistId WHERE Artist.Name = 'AC/DC'"
	acdcTitleSQL = "SELECT Album.Title FROM Album JOIN Artist ON Artist.ArtistId = Album.ArtistId WHERE Artist.Name = 'AC/DC' ORDER BY Album.Title"
)

// TestGeneratedReadSQL walks a whole READ_SQL session with generated SQL:
// connection from the dropdown, the model (through the real gateway) writes
// SQL from the question and the live schema, a correction, confirmation,
// and a result read at confirmation time.
func TestGeneratedReadSQL(t *testing.T) {
	t.Parallel()
	dbPath := chinookCopy(t)
	sim, modelAddr := startModel(t)
	correction := sim.When(providersim.Match{LastUserContains: "Correction:"}).Text("```sql\n" + acdcTitleSQL + ";\n```")
	first := sim.When(providersim.Match{LastUserContains: acdcQuestion}).Text("```sql\n" + acdcSQL + ";\n```")
	c := startAgent(t, modelAddr, "music=sqlite:"+dbPath+"; spare=sqlite:"+chinookCopy(t), nil)
	ctx := ctxTimeout(t)

	created, err := c.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{Scope: scopeA})
	if err != nil {
		t.Fatal(err)
	}
	wantStage(t, created, "NEED_CONNECTION")
	if got := optionValues(created.GetOptions()); strings.Join(got, ",") != "music,spare" {
		t.Fatalf("connection options = %v, want [music spare]", got)
	}
	if created.GetSession().GetJobKind() != sqlagentv1.JobKind_JOB_KIND_READ_SQL {
		t.Fatalf("job kind = %v", created.GetSession().GetJobKind())
	}
	id := created.GetSession().GetId()

	r := send(t, c, id, "sel:music")
	wantStage(t, r, "ASK_SQL_METHOD")
	if got := optionValues(r.GetOptions()); strings.Join(got, ",") != "generate,user_sql,compare" {
		t.Fatalf("method options = %v", got)
	}
	r = send(t, c, id, "sel:generate")
	wantStage(t, r, "NEED_NATURAL_LANGUAGE")

	r = send(t, c, id, acdcQuestion)
	wantStage(t, r, "CONFIRM_GENERATED_SQL")
	if r.GetSqlToConfirm() != acdcSQL || r.GetSession().GetPendingSql() != acdcSQL {
		t.Fatalf("sql_to_confirm = %q, pending = %q, want %q", r.GetSqlToConfirm(), r.GetSession().GetPendingSql(), acdcSQL)
	}
	if r.GetResult() != nil {
		t.Fatal("a result came back before confirmation")
	}
	if first.Hits() != 1 {
		t.Fatalf("question rule hits = %d, want 1", first.Hits())
	}
	// The live schema and the question reached the model named "sql".
	req := sim.ChatRequests()[0]
	if req.Model != "sim-sql" {
		t.Fatalf("model = %q, want the sql route's sim-sql", req.Model)
	}
	var system, user string
	for _, m := range req.Messages {
		switch m.Role {
		case "system":
			system += m.Content
		case "user":
			user += m.Content
		}
	}
	for _, want := range []string{"SQLite", "Album(AlbumId INTEGER, Title NVARCHAR(160), ArtistId INTEGER)", "Artist(ArtistId INTEGER, Name NVARCHAR(120))", "InvoiceLine("} {
		if !strings.Contains(system, want) {
			t.Errorf("system prompt lacks %q", want)
		}
	}
	if !strings.Contains(user, acdcQuestion) {
		t.Errorf("user prompt %q lacks the question", user)
	}

	// A correction goes back to the model with the previous SQL.
	r = send(t, c, id, "list the album titles instead")
	wantStage(t, r, "CONFIRM_GENERATED_SQL")
	if r.GetSqlToConfirm() != acdcTitleSQL || correction.Hits() != 1 {
		t.Fatalf("after correction sql_to_confirm = %q (correction hits %d)", r.GetSqlToConfirm(), correction.Hits())
	}
	last := sim.ChatRequests()[1].Messages
	if lastUser := last[len(last)-1].Content; !strings.Contains(lastUser, acdcSQL) || !strings.Contains(lastUser, "list the album titles instead") {
		t.Fatalf("correction prompt = %q, want previous SQL and the correction", lastUser)
	}

	// Change the data after the proposal: the result must show the change,
	// so the query ran at confirmation and not before.
	own := openSQLite(t, dbPath)
	if _, err := own.Exec(`INSERT INTO Album (AlbumId, Title, ArtistId) VALUES (9001, 'Added After Proposal', 1)`); err != nil {
		t.Fatal(err)
	}
	r = runRead(t, c, id, "yes, run it")
	wantStage(t, r, "SHOW_RESULTS")
	res := r.GetResult()
	if res == nil || strings.Join(res.GetColumns(), ",") != "Title" {
		t.Fatalf("result = %v, want one Title column", res)
	}
	var titles []string
	for _, row := range res.GetRows() {
		titles = append(titles, row.GetValues()[0].GetStringValue())
	}
	if want := "Added After Proposal,For Those About To Rock We Salute You,Let There Be Rock"; strings.Join(titles, ",") != want {
		t.Fatalf("titles = %v, want %s", titles, want)
	}
	if r.GetSession().GetPendingSql() != "" || r.GetSqlToConfirm() != "" {
		t.Fatal("pending SQL left after execution")
	}

	// The session is persisted with its parameters and history.
	got, err := c.GetSession(ctx, &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	s := got.GetSession()
	params := s.GetParameters().AsMap()
	if s.GetStage() != "SHOW_RESULTS" || params["connection"] != "music" || params["executed_sql"] != acdcTitleSQL || params["row_count"] != "3" || params["sql_method"] != "generate" {
		t.Fatalf("stored session = %s / %v", s.GetStage(), params)
	}
	if n := len(s.GetTurns()); n != 13 { // agent greeting + 6 user/agent pairs
		t.Fatalf("turns = %d, want 13", n)
	}
	if s.GetTurns()[len(s.GetTurns())-4].GetText() != "yes, run it" || s.GetTurns()[len(s.GetTurns())-2].GetText() != "default" {
		t.Fatalf("turns end with %q, %q", s.GetTurns()[len(s.GetTurns())-4].GetText(), s.GetTurns()[len(s.GetTurns())-2].GetText())
	}
}

// TestUserSQLAndWriteData runs the user's own SQL with a row limit, then
// writes the full result to a new table (WRITE_DATA).
func TestUserSQLAndWriteData(t *testing.T) {
	t.Parallel()
	dbPath := chinookCopy(t)
	_, modelAddr := startModel(t)
	c := startAgent(t, modelAddr, "music=sqlite:"+dbPath, map[string]string{"SQLAGENT_ROW_LIMIT": "5"})
	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "music"})
	if err != nil {
		t.Fatal(err)
	}
	wantStage(t, created, "ASK_SQL_METHOD")
	id := created.GetSession().GetId()

	wantStage(t, send(t, c, id, "write my own"), "NEED_USER_SQL")
	r := send(t, c, id, "SELECT Name FROM Genre ORDER BY GenreId LIMIT 3; -- first three")
	wantStage(t, r, "CONFIRM_USER_SQL")
	if r.GetSqlToConfirm() != "SELECT Name FROM Genre ORDER BY GenreId LIMIT 3" || r.GetResult() != nil {
		t.Fatalf("sql_to_confirm = %q, result %v", r.GetSqlToConfirm(), r.GetResult())
	}
	r = runRead(t, c, id, "sel:confirm")
	wantStage(t, r, "SHOW_RESULTS")
	if rows := r.GetResult().GetRows(); len(rows) != 3 || rows[2].GetValues()[0].GetStringValue() != "Metal" || r.GetResult().GetTruncated() {
		t.Fatalf("rows = %v", rows)
	}

	// From the results, straight to another query; the row limit cuts it.
	r = send(t, c, id, "SELECT TrackId, Name FROM Track ORDER BY TrackId")
	wantStage(t, r, "CONFIRM_USER_SQL")
	r = runRead(t, c, id, "ok")
	if res := r.GetResult(); !res.GetTruncated() || len(res.GetRows()) != 5 || res.GetRows()[0].GetValues()[0].GetNumberValue() != 1 {
		t.Fatalf("limited result = %v", res)
	}

	// WRITE_DATA: table name, drop-or-truncate, confirmation, write.
	r = send(t, c, id, "sel:write")
	wantStage(t, r, "NEED_TABLE_NAME")
	if r.GetSession().GetJobKind() != sqlagentv1.JobKind_JOB_KIND_WRITE_DATA {
		t.Fatalf("job kind = %v", r.GetSession().GetJobKind())
	}
	r = send(t, c, id, "all tracks!")
	wantStage(t, r, "NEED_TABLE_NAME")
	r = send(t, c, id, "all_tracks")
	wantStage(t, r, "ASK_WRITE_MODE")
	if got := optionValues(r.GetOptions()); strings.Join(got, ",") != "create,drop,truncate" {
		t.Fatalf("write options = %v", got)
	}
	own := openSQLite(t, dbPath)
	if _, err := own.Exec(`CREATE TABLE all_tracks (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	r = send(t, c, id, "sel:drop")
	wantStage(t, r, "CONFIRM_WRITE")
	var n int
	if err := own.QueryRow(`SELECT count(*) FROM all_tracks`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("table written before confirmation: %d, %v", n, err)
	}
	r = send(t, c, id, "yes")
	wantStage(t, r, "NEED_WRITE_OR_EMAIL")
	if !strings.Contains(r.GetReply(), "Wrote 3503 rows to all_tracks") {
		t.Fatalf("reply = %q", r.GetReply())
	}
	var name string
	if err := own.QueryRow(`SELECT count(*), max(Name) FROM all_tracks`).Scan(&n, &name); err != nil || n != 3503 || name == "" {
		t.Fatalf("all_tracks has %d rows (%q), %v; want 3503 tracks", n, name, err)
	}

	// E-mail is not configured on this server: SEND_EMAIL says so and
	// changes nothing.
	_, err = c.SendInput(ctxTimeout(t), &sqlagentv1.SendInputRequest{Scope: scopeA, SessionId: id, Selection: "email"})
	if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "SQLAGENT_SMTP_ADDR") {
		t.Fatalf("email without SMTP: %v, want FailedPrecondition naming SQLAGENT_SMTP_ADDR", err)
	}
	if got, err := c.GetSession(ctxTimeout(t), &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: id}); err != nil || got.GetSession().GetStage() != "NEED_WRITE_OR_EMAIL" {
		t.Fatalf("session after the refused e-mail = %v, %v", got, err)
	}
	wantStage(t, send(t, c, id, "sel:done"), "DONE")
	_, err = c.SendInput(ctxTimeout(t), &sqlagentv1.SendInputRequest{Scope: scopeA, SessionId: id, Text: "more"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("input after DONE: %v, want FailedPrecondition", err)
	}
}

// TestUnsafeSQLIsRefused checks that unsafe SQL, typed or generated, is
// refused with the reason and never runs.
func TestUnsafeSQLIsRefused(t *testing.T) {
	t.Parallel()
	dbPath := chinookCopy(t)
	sim, modelAddr := startModel(t)
	sim.When(providersim.Match{LastUserContains: "clean up"}).Text("```sql\nDELETE FROM Track WHERE Milliseconds < 1000;\n```")
	c := startAgent(t, modelAddr, "music=sqlite:"+dbPath, nil)
	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "music"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()

	cases := []struct{ input, stage, reason string }{
		{"DELETE FROM Track", "NEED_USER_SQL", "DELETE"},
		{"SELECT 1; DROP TABLE Artist", "NEED_USER_SQL", "one statement"},
		{"WITH x AS (SELECT 1) INSERT INTO Genre (Name) SELECT 'x' FROM x", "NEED_USER_SQL", "only SELECT"},
		{"SELECT load_extension('/tmp/x.so')", "NEED_USER_SQL", "load_extension"},
	}
	for _, tc := range cases {
		r := send(t, c, id, tc.input)
		wantStage(t, r, tc.stage)
		if r.GetSqlToConfirm() != "" || r.GetSession().GetPendingSql() != "" || !strings.Contains(r.GetReply(), tc.reason) {
			t.Fatalf("%q: reply %q, sql_to_confirm %q; want a refusal naming %q", tc.input, r.GetReply(), r.GetSqlToConfirm(), tc.reason)
		}
	}
	// Generated SQL is checked the same way.
	wantStage(t, send(t, c, id, "sel:generate"), "NEED_NATURAL_LANGUAGE")
	r := send(t, c, id, "clean up the short tracks")
	wantStage(t, r, "NEED_NATURAL_LANGUAGE")
	if r.GetSqlToConfirm() != "" || !strings.Contains(r.GetReply(), "DELETE") {
		t.Fatalf("generated DELETE: reply %q, sql_to_confirm %q", r.GetReply(), r.GetSqlToConfirm())
	}
	// The refusal offers the way to write the SQL instead, and takes it.
	if got := optionValues(r.GetOptions()); strings.Join(got, ",") != "user_sql" {
		t.Fatalf("options after a refused generated query: %v, want user_sql", got)
	}
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_USER_SQL")
	own := openSQLite(t, dbPath)
	var tracks, artists int
	if err := own.QueryRow(`SELECT (SELECT count(*) FROM Track), (SELECT count(*) FROM Artist)`).Scan(&tracks, &artists); err != nil || tracks != 3503 || artists != 275 {
		t.Fatalf("tracks %d, artists %d, %v; want the database untouched (3503, 275)", tracks, artists, err)
	}
}

// TestScopeIsolation checks that a session is invisible outside its tenant
// and project.
func TestScopeIsolation(t *testing.T) {
	t.Parallel()
	_, modelAddr := startModel(t)
	c := startAgent(t, modelAddr, "music=sqlite:"+chinookCopy(t), nil)
	ctx := ctxTimeout(t)
	created, err := c.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "music"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	for _, other := range []*commonv1.Scope{{TenantId: "globex", ProjectId: "music"}, {TenantId: "acme", ProjectId: "other"}} {
		_, err := c.GetSession(ctx, &sqlagentv1.GetSessionRequest{Scope: other, SessionId: id})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("GetSession from %v: %v, want NotFound", other, err)
		}
		_, err = c.SendInput(ctx, &sqlagentv1.SendInputRequest{Scope: other, SessionId: id, Text: "sel:user_sql"})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("SendInput from %v: %v, want NotFound", other, err)
		}
	}
	got, err := c.GetSession(ctx, &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: id})
	if err != nil || got.GetSession().GetStage() != "ASK_SQL_METHOD" || len(got.GetSession().GetTurns()) != 1 {
		t.Fatalf("own session = %v, %v; want it unchanged", got, err)
	}
}

// TestBadInputAndListConnections checks field-naming errors and that
// ListConnections shows names, dialects and schemas but never a DSN.
func TestBadInputAndListConnections(t *testing.T) {
	t.Parallel()
	dbPath := chinookCopy(t)
	_, modelAddr := startModel(t)
	c := startAgent(t, modelAddr, "music=sqlite:"+dbPath+"\narchive=sqlite:"+chinookCopy(t), nil)
	ctx := ctxTimeout(t)

	lc, err := c.ListConnections(ctx, &sqlagentv1.ListConnectionsRequest{Scope: scopeA})
	if err != nil {
		t.Fatal(err)
	}
	if len(lc.GetConnections()) != 2 || lc.GetConnections()[0].GetName() != "archive" || lc.GetConnections()[1].GetName() != "music" ||
		lc.GetConnections()[1].GetDialect() != "sqlite" || strings.Join(lc.GetConnections()[1].GetSchemas(), ",") != "main" {
		t.Fatalf("connections = %v", lc.GetConnections())
	}
	if raw, _ := protojson.Marshal(lc); strings.Contains(string(raw), "chinook") || strings.Contains(string(raw), ".sqlite") || strings.Contains(string(raw), "/") {
		t.Fatalf("ListConnections leaks a DSN: %s", raw)
	}

	_, err = c.ListConnections(ctx, &sqlagentv1.ListConnectionsRequest{})
	wantInvalid(t, err, "scope.tenant_id")
	_, err = c.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{})
	wantInvalid(t, err, "scope.tenant_id")
	_, err = c.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "nope"})
	wantNotFound(t, err, "connection")
	_, err = c.GetSession(ctx, &sqlagentv1.GetSessionRequest{Scope: scopeA})
	wantInvalid(t, err, "session_id")
	_, err = c.SendInput(ctx, &sqlagentv1.SendInputRequest{Scope: scopeA, Text: "hi"})
	wantInvalid(t, err, "session_id")
	_, err = c.GetSession(ctx, &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: "missing"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("missing session: %v", err)
	}

	created, err := c.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{Scope: scopeA})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	_, err = c.SendInput(ctx, &sqlagentv1.SendInputRequest{Scope: scopeA, SessionId: id, Text: "  "})
	wantInvalid(t, err, "text")
	_, err = c.SendInput(ctx, &sqlagentv1.SendInputRequest{Scope: scopeA, SessionId: id, Selection: "oracle_10"})
	wantInvalid(t, err, "selection")
	// A bad input changes nothing.
	got, err := c.GetSession(ctx, &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: id})
	if err != nil || got.GetSession().GetStage() != "NEED_CONNECTION" || len(got.GetSession().GetTurns()) != 1 {
		t.Fatalf("session after bad input = %v, %v", got, err)
	}
	// A typed connection name works like the selection.
	wantStage(t, send(t, c, id, "Music"), "ASK_SQL_METHOD")
}

// TestSampleDatabase: with SQLAGENT_SAMPLE_DB (as `agentmesh up` sets it)
// and no connections configured, the sample shop database is made and
// offered as "sample", and a job runs on it; a configured connection
// called "sample" wins over it.
func TestSampleDatabase(t *testing.T) {
	t.Parallel()
	_, modelAddr := startModel(t)
	path := filepath.Join(t.TempDir(), "sqlagent", "sample.db")
	c := startAgent(t, modelAddr, "", map[string]string{"SQLAGENT_SAMPLE_DB": path})
	list, err := c.ListConnections(ctxTimeout(t), &sqlagentv1.ListConnectionsRequest{Scope: scopeA})
	if err != nil || len(list.GetConnections()) != 1 || list.GetConnections()[0].GetName() != "sample" {
		t.Fatalf("connections = %v, %v; want the sample", list.GetConnections(), err)
	}
	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "sample"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	wantStage(t, send(t, c, id, "write my own"), "NEED_USER_SQL")
	wantStage(t, send(t, c, id, "SELECT count(*) AS customers FROM customers"), "CONFIRM_USER_SQL")
	r := runRead(t, c, id, "sel:confirm")
	wantStage(t, r, "SHOW_RESULTS")
	if rows := r.GetResult().GetRows(); len(rows) != 1 || rows[0].GetValues()[0].GetNumberValue() != 10 {
		t.Fatalf("customers in the sample = %v, want 10", rows)
	}

	own := chinookCopy(t)
	other := filepath.Join(t.TempDir(), "unused.db")
	c = startAgent(t, modelAddr, "sample=sqlite:"+own, map[string]string{"SQLAGENT_SAMPLE_DB": other})
	list, err = c.ListConnections(ctxTimeout(t), &sqlagentv1.ListConnectionsRequest{Scope: scopeA})
	if err != nil || len(list.GetConnections()) != 1 {
		t.Fatalf("connections = %v, %v; want only the configured one", list.GetConnections(), err)
	}
	if _, err := os.Stat(other); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sample database made though a connection called sample is configured: %v", err)
	}
}
