package sqlagent_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
)

// TestConnectionsAreScopedPerTenant: with SQLAGENT_CONNECTION_TENANTS,
// tenant acme sees and uses acme_db and the shared connection, globex
// globex_db and the shared one. Every way of naming the other tenant's
// connection — CreateSession's connection in any case or spacing, the
// connection dropdown, a typed name, a comparison's "connection:<name>",
// a comparison's target — fails exactly as a name nobody configured does
// (same code, same message but for the name), so nothing tells the other
// tenant's connection from none; its jobs are not listed or readable.
func TestConnectionsAreScopedPerTenant(t *testing.T) {
	t.Parallel()
	sim, modelAddr := startModel(t)
	route(sim, "read data from globex_db", map[string]string{"job_kind": "READ_SQL", "connection": "globex_db", "question": "read data"})
	c := startAgent(t, modelAddr, "acme_db=sqlite:"+chinookCopy(t)+"; globex_db=sqlite:"+chinookCopy(t)+"; shared=sqlite:"+chinookCopy(t),
		map[string]string{"SQLAGENT_CONNECTION_TENANTS": "acme_db=acme; globex_db = globex\nshared=*"})
	acme := &commonv1.Scope{TenantId: "acme", ProjectId: "p"}
	globex := &commonv1.Scope{TenantId: "globex", ProjectId: "p"}
	ctx := ctxTimeout(t)

	for _, tc := range []struct {
		scope *commonv1.Scope
		want  string
	}{{acme, "acme_db,shared"}, {globex, "globex_db,shared"}, {&commonv1.Scope{TenantId: "ACME"}, "shared"}, {&commonv1.Scope{TenantId: "initech"}, "shared"}} {
		l, err := c.ListConnections(ctx, &sqlagentv1.ListConnectionsRequest{Scope: tc.scope})
		var names []string
		for _, conn := range l.GetConnections() {
			names = append(names, conn.GetName())
		}
		if err != nil || strings.Join(names, ",") != tc.want {
			t.Errorf("ListConnections(%s) = %v, %v; want %s", tc.scope.GetTenantId(), names, err, tc.want)
		}
	}

	// By name at creation: NotFound, as for a name nobody configured.
	_, unknown := c.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{Scope: acme, Connection: "nosuch_db"})
	wantNotFound(t, unknown, "connection")
	for _, name := range []string{"globex_db", "GLOBEX_DB", "Globex_db", " globex_db ", "globex_db\t"} {
		_, err := c.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{Scope: acme, Connection: name})
		wantNotFound(t, err, "connection")
		if msg := status.Convert(err).Message(); msg != strings.Replace(status.Convert(unknown).Message(), "nosuch_db", strings.TrimSpace(name), 1) {
			t.Errorf("%q: message %q differs from an unknown name's %q", name, msg, status.Convert(unknown).Message())
		}
	}
	if _, err := c.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{Scope: globex, Connection: "globex_db"}); err != nil {
		t.Fatalf("globex on its own connection: %v", err)
	}

	// The dropdown offers acme's only; the other's name as a selection is
	// refused as one never offered, the session unchanged; typed, it is
	// a name the agent does not know.
	created, err := c.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{Scope: acme})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(optionValues(created.GetOptions()), ","); got != "acme_db,shared" {
		t.Fatalf("acme's connection dropdown = %s", got)
	}
	id := created.GetSession().GetId()
	sendAs := func(sel string) error {
		_, err := c.SendInput(ctx, &sqlagentv1.SendInputRequest{Scope: acme, SessionId: id, Selection: sel})
		return err
	}
	unknown = sendAs("nosuch_db")
	wantInvalid(t, unknown, "selection")
	for _, sel := range []string{"globex_db", "GLOBEX_DB"} {
		err := sendAs(sel)
		wantInvalid(t, err, "selection")
		if msg := status.Convert(err).Message(); msg != strings.Replace(status.Convert(unknown).Message(), "nosuch_db", sel, 1) {
			t.Errorf("selection %q: message %q differs from an unknown name's", sel, msg)
		}
	}
	got, err := c.GetSession(ctx, &sqlagentv1.GetSessionRequest{Scope: acme, SessionId: id})
	if err != nil || got.GetSession().GetStage() != "NEED_CONNECTION" || len(got.GetSession().GetTurns()) != len(created.GetSession().GetTurns()) {
		t.Fatalf("after refused selections: %v, %v", got.GetSession(), err)
	}
	r, err := c.SendInput(ctx, &sqlagentv1.SendInputRequest{Scope: acme, SessionId: id, Text: "Globex_DB"})
	if err != nil || r.GetSession().GetStage() != "NEED_CONNECTION" || r.GetSession().GetParameters().AsMap()["connection"] != nil ||
		!strings.Contains(r.GetReply(), "I don't know a database called") {
		t.Fatalf("typed Globex_DB: %v, %v", r, err)
	}

	// The router: the model is shown acme's names only, and a name of
	// globex's it answers is dropped.
	before := len(sim.ChatRequests())
	routed, err := c.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{Scope: acme, Text: "read data from globex_db"})
	if err != nil || routed.GetSession().GetStage() != "NEED_CONNECTION" || routed.GetSession().GetParameters().AsMap()["connection"] != nil {
		t.Fatalf("routed to globex_db: %v, %v", routed.GetSession(), err)
	}
	shown := false
	for _, req := range sim.ChatRequests()[before:] {
		for _, m := range req.Messages {
			if m.Role == "system" && strings.Contains(m.Content, "globex_db") {
				t.Fatalf("acme's router prompt names globex_db:\n%s", m.Content)
			}
			shown = shown || (m.Role == "system" && strings.Contains(m.Content, "acme_db"))
		}
	}
	if !shown {
		t.Fatal("acme's router prompt does not list acme's connection")
	}

	// A comparison: "connection:<name>" of globex's is refused as an
	// unknown one, and its target schemas are not offered or taken.
	cmp, err := c.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{Scope: acme, Connection: "acme_db", JobKind: sqlagentv1.JobKind_JOB_KIND_COMPARE_SQL})
	if err != nil {
		t.Fatal(err)
	}
	id = cmp.GetSession().GetId()
	if got := strings.Join(optionValues(cmp.GetOptions()), ","); strings.Contains(got, "globex") || !strings.Contains(got, "connection:shared") {
		t.Fatalf("comparison options = %s", got)
	}
	unknown = sendAs("connection:nosuch_db")
	wantInvalid(t, unknown, "selection")
	for _, sel := range []string{"connection:globex_db", "connection:GLOBEX_DB", "connection: globex_db"} {
		err := sendAs(sel)
		wantInvalid(t, err, "selection")
		name := strings.TrimPrefix(sel, "connection:")
		if msg := status.Convert(err).Message(); msg != strings.Replace(status.Convert(unknown).Message(), "nosuch_db", name, 1) {
			t.Errorf("%q: message %q differs from an unknown name's", sel, msg)
		}
	}
	for _, step := range []struct{ input, stage string }{
		{"sel:user_sql", "NEED_FIRST_USER_SQL"}, {"SELECT GenreId, Name FROM Genre", "CONFIRM_FIRST_USER_SQL"}, {"yes", "ASK_SECOND_SQL_METHOD"},
		{"sel:user_sql", "NEED_SECOND_USER_SQL"}, {"SELECT GenreId, Name FROM Genre WHERE GenreId > 1", "CONFIRM_SECOND_USER_SQL"}, {"yes", "ASK_AUTO_MATCH"},
		{"sel:auto", "ASK_COMPARE_KEY"}, {"sel:key:GenreId", "ASK_REPORTING_TYPE"},
	} {
		wantStage(t, sendScoped(t, c, acme, id, step.input), step.stage)
	}
	r = sendScoped(t, c, acme, id, "sel:summary")
	wantStage(t, r, "ASK_COMPARE_SCHEMA")
	if got := strings.Join(optionValues(r.GetOptions()), ","); got != "acme_db/main,shared/main" {
		t.Fatalf("comparison targets for acme = %s", got)
	}
	unknown = sendAs("nosuch_db/main")
	wantInvalid(t, unknown, "selection")
	err = sendAs("globex_db/main")
	wantInvalid(t, err, "selection")
	if msg := status.Convert(err).Message(); msg != strings.Replace(status.Convert(unknown).Message(), "nosuch_db", "globex_db", 1) {
		t.Errorf("target globex_db/main: message %q differs from an unknown name's", msg)
	}
	if r, err := c.SendInput(ctx, &sqlagentv1.SendInputRequest{Scope: acme, SessionId: id, Text: "globex_db/main"}); err != nil || r.GetSession().GetStage() != "ASK_COMPARE_SCHEMA" {
		t.Fatalf("typed target globex_db/main: %v, %v", r.GetSession().GetStage(), err)
	}

	// Jobs: acme's read is neither listed nor readable for globex.
	read, err := c.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{Scope: acme, Connection: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	id = read.GetSession().GetId()
	wantStage(t, sendScoped(t, c, acme, id, "sel:user_sql"), "NEED_USER_SQL")
	wantStage(t, sendScoped(t, c, acme, id, "SELECT count(*) AS n FROM Genre"), "CONFIRM_USER_SQL")
	wantStage(t, sendScoped(t, c, acme, id, "yes"), "EXECUTE_SQL")
	job := sendScoped(t, c, acme, id, "acme count").GetJob()
	if job == nil {
		t.Fatal("no job kept")
	}
	if l, err := c.ListSqlJobs(ctx, &sqlagentv1.ListSqlJobsRequest{Scope: globex}); err != nil || len(l.GetJobs()) != 0 {
		t.Fatalf("globex lists %v, %v", l.GetJobs(), err)
	}
	if l, err := c.ListSqlJobs(ctx, &sqlagentv1.ListSqlJobsRequest{Scope: globex, SessionId: id}); err != nil || len(l.GetJobs()) != 0 {
		t.Fatalf("globex lists acme's session's jobs: %v, %v", l.GetJobs(), err)
	}
	if _, err := c.GetSqlJob(ctx, &sqlagentv1.GetSqlJobRequest{Scope: globex, JobId: job.GetId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("globex reads acme's job: %v", err)
	}
	if _, err := c.SendInput(ctx, &sqlagentv1.SendInputRequest{Scope: globex, SessionId: id, Text: "sel:done"}); status.Code(err) != codes.NotFound {
		t.Fatalf("globex sends to acme's session: %v", err)
	}
	if l, err := c.ListSqlJobs(ctx, &sqlagentv1.ListSqlJobsRequest{Scope: acme}); err != nil || len(l.GetJobs()) != 1 || l.GetJobs()[0].GetName() != "acme count" {
		t.Fatalf("acme's jobs: %v, %v", l.GetJobs(), err)
	}
}
