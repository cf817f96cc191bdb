package sqlagent_test

import (
	"strings"
	"testing"

	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// TestAcknowledgementsAreNotParameters: after the SQL ran, "okay" is no
// question for the model and no parameter; "okay" is no table name; the
// list of such words is configurable (here "vale" joins it and "ok" leaves
// it, and "ok" then goes to the model as a question). Model calls are
// counted on the simulator.
func TestAcknowledgementsAreNotParameters(t *testing.T) {
	t.Parallel()
	dbPath := chinookCopy(t)
	sim, modelAddr := startModel(t)
	sim.When(providersim.Match{LastUserContains: "How many genres"}).Text("```sql\nSELECT COUNT(*) AS genres FROM Genre\n```")
	sim.When(providersim.Match{LastUserContains: "Question: ok"}).Text("CANNOT: that is not a question")
	c := startAgent(t, modelAddr, "music=sqlite:"+dbPath, map[string]string{"SQLAGENT_CONFIRMATION_WORDS": "yes, okay, vale"})
	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "music"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	wantStage(t, send(t, c, id, "How many genres are there?"), "CONFIRM_GENERATED_SQL")
	r := runRead(t, c, id, "yes")
	wantStage(t, r, "SHOW_RESULTS")
	calls := len(sim.ChatRequests())
	params := r.GetSession().GetParameters().AsMap()

	for _, ack := range []string{"okay", "Okay!", "vale"} {
		r = send(t, c, id, ack)
		wantStage(t, r, "SHOW_RESULTS")
		if n := len(sim.ChatRequests()); n != calls {
			t.Fatalf("%q after the result made %d model calls, want none", ack, n-calls)
		}
		if got := r.GetSession().GetParameters().AsMap(); len(got) != len(params) || got["question"] != params["question"] {
			t.Fatalf("%q changed the parameters: %v → %v", ack, params, got)
		}
		if !strings.Contains(strings.Join(optionValues(r.GetOptions()), ","), "write") {
			t.Fatalf("%q: options %v, want the next steps again", ack, optionValues(r.GetOptions()))
		}
	}
	// "ok" is not on this server's list: it is taken as a question.
	r = send(t, c, id, "ok")
	if n := len(sim.ChatRequests()); n != calls+1 {
		t.Fatalf("\"ok\" made %d model calls, want 1 (it is not a confirmation word here)", n-calls)
	}
	wantStage(t, r, "NEED_NATURAL_LANGUAGE")
	// Nor is "okay" a table name.
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_USER_SQL")
	wantStage(t, send(t, c, id, "SELECT Name FROM Genre"), "CONFIRM_USER_SQL")
	wantStage(t, runRead(t, c, id, "okay"), "SHOW_RESULTS")
	wantStage(t, send(t, c, id, "sel:write"), "NEED_TABLE_NAME")
	r = send(t, c, id, "okay")
	wantStage(t, r, "NEED_TABLE_NAME")
	if _, ok := r.GetSession().GetParameters().AsMap()["table_name"]; ok || !strings.Contains(r.GetReply(), "not a table name") {
		t.Fatalf("\"okay\" as a table name: reply %q, parameters %v", r.GetReply(), r.GetSession().GetParameters().AsMap())
	}
	wantStage(t, send(t, c, id, "genres"), "ASK_WRITE_MODE")
}

// TestOkayIsNotAJobName is the seed's "okay after Executing SQL…": the
// confirmed read asks for its job name (EXECUTE_SQL), and a confirmation
// word of this server's list (SQLAGENT_CONFIRMATION_WORDS) sent then is no
// name: the question comes again, nothing is set, no model is called and
// nothing runs. A name typed next is the kept job's name; a word the list
// does not hold is a name like any other.
func TestOkayIsNotAJobName(t *testing.T) {
	t.Parallel()
	sim, modelAddr := startModel(t)
	writer := sim.When(providersim.Match{LastUserContains: "How many genres"}).Text("```sql\nSELECT COUNT(*) AS genres FROM Genre\n```")
	c := startAgent(t, modelAddr, "music=sqlite:"+chinookCopy(t), map[string]string{"SQLAGENT_CONFIRMATION_WORDS": "yes, okay, vale"})
	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "music"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	wantStage(t, send(t, c, id, "How many genres are there?"), "CONFIRM_GENERATED_SQL")
	r := send(t, c, id, "yes")
	wantStage(t, r, "EXECUTE_SQL")
	if !strings.HasPrefix(r.GetReply(), "Great! Executing SQL") || r.GetAction() != sqlagentv1.Action_ACTION_ASK ||
		strings.Join(optionValues(r.GetOptions()), ",") != "default,cancel" || r.GetOptions()[0].GetLabel() != "How many genres are there?" {
		t.Fatalf("the job-name question: %q, action %v, options %v", r.GetReply(), r.GetAction(), r.GetOptions())
	}
	calls := len(sim.ChatRequests())
	if calls != 1 || writer.Hits() != 1 {
		t.Fatalf("model calls before the name = %d, want 1 (the SQL)", calls)
	}
	for _, ack := range []string{"okay", "Okay!", " OKAY ", "vale", "yes"} {
		r = send(t, c, id, ack)
		wantStage(t, r, "EXECUTE_SQL")
		if _, named := r.GetSession().GetParameters().AsMap()["job_name"]; named || r.GetResult() != nil || r.GetJob() != nil {
			t.Fatalf("%q after the job-name question: parameters %v, result %v, job %v", ack, r.GetSession().GetParameters().AsMap(), r.GetResult(), r.GetJob())
		}
		if !strings.Contains(r.GetReply(), "What should this job be called?") {
			t.Fatalf("%q: reply %q, want the question again", ack, r.GetReply())
		}
	}
	r = send(t, c, id, "genre count")
	wantStage(t, r, "SHOW_RESULTS")
	if r.GetJob().GetName() != "genre count" || len(r.GetResult().GetRows()) != 1 {
		t.Fatalf("job %v, result %v; want job \"genre count\" with one row", r.GetJob(), r.GetResult())
	}
	if n := len(sim.ChatRequests()); n != calls {
		t.Fatalf("the acknowledgements and the name made %d model calls, want none", n-calls)
	}
	jobs, err := c.ListSqlJobs(ctxTimeout(t), &sqlagentv1.ListSqlJobsRequest{Scope: scopeA, SessionId: id})
	if err != nil || len(jobs.GetJobs()) != 1 || jobs.GetJobs()[0].GetName() != "genre count" {
		t.Fatalf("ListSqlJobs = %v, %v", jobs.GetJobs(), err)
	}

	// "ok" is not on this server's list: here it is a name.
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_USER_SQL")
	wantStage(t, send(t, c, id, "SELECT Name FROM Genre"), "CONFIRM_USER_SQL")
	wantStage(t, send(t, c, id, "okay"), "EXECUTE_SQL")
	if r = send(t, c, id, "ok"); r.GetJob().GetName() != "ok" {
		t.Fatalf("\"ok\" (not a confirmation word here) gave job %v", r.GetJob())
	}
	// A selection not offered, and a name over 100 bytes, set nothing.
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_USER_SQL")
	wantStage(t, send(t, c, id, "SELECT Name FROM Genre"), "CONFIRM_USER_SQL")
	before := send(t, c, id, "yes")
	_, err = c.SendInput(ctxTimeout(t), &sqlagentv1.SendInputRequest{Scope: scopeA, SessionId: id, Selection: "job_name:okay"})
	wantInvalid(t, err, "selection")
	wantStage(t, send(t, c, id, strings.Repeat("n", 101)), "EXECUTE_SQL")
	if r = send(t, c, id, "SELECT GenreId FROM Genre"); r.GetSession().GetStage() != "EXECUTE_SQL" || r.GetJob() != nil || !strings.Contains(r.GetReply(), "looks like SQL") {
		t.Fatalf("SQL typed as the job name: %q, job %v", r.GetReply(), r.GetJob())
	}
	if r = send(t, c, id, "sel:default"); r.GetJob().GetName() != "query on music" || before.GetSession().GetStage() != "EXECUTE_SQL" {
		t.Fatalf("the default name for typed SQL: job %v", r.GetJob())
	}
}

// TestBadInputLeavesTheSessionUnchanged: a selection the stage did not
// offer (one of another stage, or none at all) and SQL over 64 KiB are
// refused as InvalidArgument naming the field, and the session is as it
// was; an unknown connection is NotFound naming the field.
func TestBadInputLeavesTheSessionUnchanged(t *testing.T) {
	t.Parallel()
	dbPath := chinookCopy(t)
	_, modelAddr := startModel(t)
	c := startAgent(t, modelAddr, "music=sqlite:"+dbPath, nil)
	ctx := ctxTimeout(t)
	_, err := c.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "oracle_10"})
	wantNotFound(t, err, "connection")
	created, err := c.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "music"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_USER_SQL")
	wantStage(t, send(t, c, id, "SELECT Name FROM Genre"), "CONFIRM_USER_SQL")
	wantStage(t, runRead(t, c, id, "yes"), "SHOW_RESULTS")
	before, err := c.GetSession(ctx, &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		req   *sqlagentv1.SendInputRequest
		field string
	}{
		{"selection of another stage", &sqlagentv1.SendInputRequest{Selection: "truncate"}, "selection"},
		{"selection never offered", &sqlagentv1.SendInputRequest{Selection: "__CONNECTION_SELECTED__:ORACLE_10"}, "selection"},
		{"SQL over 64 KiB", &sqlagentv1.SendInputRequest{Text: "SELECT '" + strings.Repeat("x", 64<<10) + "'"}, "text"},
	}
	for _, tc := range cases {
		tc.req.Scope, tc.req.SessionId = scopeA, id
		_, err := c.SendInput(ctx, tc.req)
		wantInvalid(t, err, tc.field)
		after, err := c.GetSession(ctx, &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: id})
		if err != nil || after.GetSession().GetStage() != before.GetSession().GetStage() ||
			len(after.GetSession().GetTurns()) != len(before.GetSession().GetTurns()) || !after.GetSession().GetUpdateTime().AsTime().Equal(before.GetSession().GetUpdateTime().AsTime()) {
			t.Fatalf("%s changed the session: %v → %v (%v)", tc.name, before.GetSession(), after.GetSession(), err)
		}
	}
}
