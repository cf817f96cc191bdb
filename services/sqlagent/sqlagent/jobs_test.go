package sqlagent_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
)

// TestJobsAreKept runs a read (its SQL corrected once before it was
// approved), a query the database rejects, and a write, and reads the jobs
// back: only what ran is kept, with the SQL exactly as approved, which is
// the SQL whose result came back; other scopes see none of it.
func TestJobsAreKept(t *testing.T) {
	t.Parallel()
	_, modelAddr := startModel(t)
	c := startAgent(t, modelAddr, "music=sqlite:"+chinookCopy(t), nil)
	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "music"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_USER_SQL")
	wantStage(t, send(t, c, id, "SELECT 'first-draft' AS marker FROM Artist"), "CONFIRM_USER_SQL")
	// Corrected before approval: the correction is what is approved.
	r := send(t, c, id, "SELECT 'kept-7' AS marker,  count(*) AS artists\n  FROM Artist WHERE ArtistId <= 3; -- three")
	wantStage(t, r, "CONFIRM_USER_SQL")
	approved := r.GetSqlToConfirm()
	if approved == "" || strings.Contains(approved, "first-draft") {
		t.Fatalf("sql_to_confirm = %q", approved)
	}
	wantStage(t, send(t, c, id, "yes"), "EXECUTE_SQL")
	r = send(t, c, id, "  artist marker  ")
	wantStage(t, r, "SHOW_RESULTS")
	read := r.GetJob()
	if row := r.GetResult().GetRows(); len(row) != 1 || row[0].GetValues()[0].GetStringValue() != "kept-7" || row[0].GetValues()[1].GetNumberValue() != 3 {
		t.Fatalf("result = %v, want kept-7, 3", r.GetResult())
	}
	if read == nil || read.GetSql() != approved || read.GetKind() != sqlagentv1.JobKind_JOB_KIND_READ_SQL || read.GetRowCount() != 1 ||
		read.GetDestination() != "shown" || read.GetConnection() != "music" || read.GetName() != "artist marker" || read.GetSessionId() != id ||
		read.GetParameters().AsMap()["executed_sql"] != approved || read.GetDuration() == nil || read.GetStartTime() == nil {
		t.Fatalf("read job = %v, want the approved SQL %q", read, approved)
	}

	// The database rejects this one: nothing ran, nothing is kept.
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_USER_SQL")
	wantStage(t, send(t, c, id, "SELECT no_such_column FROM Artist"), "CONFIRM_USER_SQL")
	if r = runRead(t, c, id, "yes"); r.GetJob() != nil || r.GetResult() != nil || r.GetSession().GetStage() != "CONFIRM_USER_SQL" {
		t.Fatalf("a rejected query gave job %v, result %v", r.GetJob(), r.GetResult())
	}
	wantStage(t, send(t, c, id, "sel:cancel"), "ASK_SQL_METHOD")
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_USER_SQL")
	wantStage(t, send(t, c, id, approved), "CONFIRM_USER_SQL")
	wantStage(t, runRead(t, c, id, "yes"), "SHOW_RESULTS")

	wantStage(t, send(t, c, id, "sel:write"), "NEED_TABLE_NAME")
	wantStage(t, send(t, c, id, "kept_artists"), "ASK_WRITE_MODE")
	r = send(t, c, id, "sel:create")
	wantStage(t, r, "CONFIRM_WRITE")
	if r.GetSqlToConfirm() != approved {
		t.Fatalf("write confirmation shows %q, want %q", r.GetSqlToConfirm(), approved)
	}
	r = send(t, c, id, "yes")
	wantStage(t, r, "NEED_WRITE_OR_EMAIL")
	write := r.GetJob()
	if write == nil || write.GetKind() != sqlagentv1.JobKind_JOB_KIND_WRITE_DATA || write.GetSql() != approved || write.GetRowCount() != 1 ||
		write.GetDestination() != "table main.kept_artists on music" {
		t.Fatalf("write job = %v", write)
	}

	list, err := c.ListSqlJobs(ctxTimeout(t), &sqlagentv1.ListSqlJobsRequest{Scope: scopeA, SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, j := range list.GetJobs() {
		kinds = append(kinds, j.GetKind().String())
		if j.GetSql() != approved {
			t.Errorf("kept job %s has SQL %q, want %q", j.GetId(), j.GetSql(), approved)
		}
	}
	if got := strings.Join(kinds, ","); got != "JOB_KIND_WRITE_DATA,JOB_KIND_READ_SQL,JOB_KIND_READ_SQL" || list.GetJobs()[2].GetId() != read.GetId() {
		t.Fatalf("jobs of the session, newest first = %s (%v)", got, list.GetJobs())
	}
	// The names: typed (trimmed), the default offered, none for a write.
	if n0, n1, n2 := list.GetJobs()[0].GetName(), list.GetJobs()[1].GetName(), list.GetJobs()[2].GetName(); n0 != "" || n1 != "query on music" || n2 != "artist marker" {
		t.Fatalf("job names, newest first = %q, %q, %q; want \"\", \"query on music\", \"artist marker\"", n0, n1, n2)
	}
	if _, ok := list.GetJobs()[0].GetParameters().AsMap()["job_name"]; ok {
		t.Fatalf("the write job carries the read's name: %v", list.GetJobs()[0].GetParameters().AsMap())
	}
	got, err := c.GetSqlJob(ctxTimeout(t), &sqlagentv1.GetSqlJobRequest{Scope: scopeA, JobId: write.GetId()})
	if err != nil || got.GetJob().GetSql() != approved || got.GetJob().GetDestination() != write.GetDestination() {
		t.Fatalf("GetSqlJob = %v, %v", got, err)
	}

	other := &commonv1.Scope{TenantId: "globex", ProjectId: "music"}
	if _, err := c.GetSqlJob(ctxTimeout(t), &sqlagentv1.GetSqlJobRequest{Scope: other, JobId: write.GetId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetSqlJob from another scope: %v, want NotFound", err)
	}
	if l, err := c.ListSqlJobs(ctxTimeout(t), &sqlagentv1.ListSqlJobsRequest{Scope: other}); err != nil || len(l.GetJobs()) != 0 {
		t.Fatalf("ListSqlJobs from another scope = %v, %v; want none", l.GetJobs(), err)
	}
	// Pages of one walk the three jobs, newest first, and end.
	var paged []string
	tok := ""
	for range 4 {
		l, err := c.ListSqlJobs(ctxTimeout(t), &sqlagentv1.ListSqlJobsRequest{Scope: scopeA, PageSize: 1, PageToken: tok})
		if err != nil || len(l.GetJobs()) != 1 {
			t.Fatalf("ListSqlJobs page %d of 1 = %v, %v", len(paged)+1, l.GetJobs(), err)
		}
		paged = append(paged, l.GetJobs()[0].GetId())
		if tok = l.GetNextPageToken(); tok == "" {
			break
		}
	}
	if want := []string{write.GetId(), list.GetJobs()[1].GetId(), read.GetId()}; strings.Join(paged, ",") != strings.Join(want, ",") {
		t.Fatalf("pages of one = %v, want %v", paged, want)
	}
	if l, err := c.ListSqlJobs(ctxTimeout(t), &sqlagentv1.ListSqlJobsRequest{Scope: scopeA, PageSize: 3}); err != nil || len(l.GetJobs()) != 3 || l.GetNextPageToken() != "" {
		t.Fatalf("a page holding every job = %d jobs, next %q, %v; want 3 and no next page", len(l.GetJobs()), l.GetNextPageToken(), err)
	}
	// A token is for its listing only: not another session's, scope's, or
	// a made-up one.
	first, err := c.ListSqlJobs(ctxTimeout(t), &sqlagentv1.ListSqlJobsRequest{Scope: scopeA, PageSize: 1})
	if err != nil || first.GetNextPageToken() == "" {
		t.Fatalf("first page: %v, %v", first, err)
	}
	for name, req := range map[string]*sqlagentv1.ListSqlJobsRequest{
		"another session": {Scope: scopeA, SessionId: "other", PageToken: first.GetNextPageToken()},
		"another scope":   {Scope: other, PageToken: first.GetNextPageToken()},
		"made up":         {Scope: scopeA, PageToken: "AAAA"},
	} {
		if _, err := c.ListSqlJobs(ctxTimeout(t), req); status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "page_token") {
			t.Errorf("token of %s: %v, want InvalidArgument naming page_token", name, err)
		}
	}
	if _, err := c.ListSqlJobs(ctxTimeout(t), &sqlagentv1.ListSqlJobsRequest{Scope: scopeA, PageSize: 501}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("page_size 501: %v, want InvalidArgument", err)
	}
}
