package mongostore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session/mongostore"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/sqlgen"
)

// A session reads back as written, only in its scope; a write at a stale
// version or of a missing session changes nothing; an execution is kept
// while set and cleared with the next write, and can be claimed once.
func TestStore(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testStore)
}

func testStore(t *testing.T, db *mongo.Database) {
	ctx := context.Background()
	st, err := mongostore.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	scope := session.Scope{TenantID: "acme", ProjectID: "music"}
	s := &session.Session{
		ID: "s1", Scope: scope, JobKind: session.JobWriteData, Stage: session.StageConfirmWrite,
		Params: map[string]string{"connection": "shop", "executed_sql": "SELECT 1", "table_name": "t"},
		Turns:  []session.Turn{{Role: "agent", Text: "hi", Time: now}}, Created: now, Updated: now,
	}
	if err := st.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	got, err := st.Get(ctx, scope, "s1")
	if err != nil || got.Stage != session.StageConfirmWrite || got.Params["table_name"] != "t" || len(got.Turns) != 1 || got.Version != 0 || got.Execution != nil {
		t.Fatalf("Get: %+v (%v)", got, err)
	}
	for _, other := range []session.Scope{{TenantID: "globex", ProjectID: "music"}, {TenantID: "acme"}} {
		if _, err := st.Get(ctx, other, "s1"); !errors.Is(err, session.ErrNotFound) {
			t.Errorf("Get from %+v: %v, want ErrNotFound", other, err)
		}
	}

	stale := *got
	got.Stage = session.StageExecuting
	got.Execution = &session.Execution{ID: "s1/1", From: session.StageConfirmWrite, Started: now, Deadline: now.Add(time.Minute)}
	if err := st.Update(ctx, got); err != nil || got.Version != 1 {
		t.Fatalf("Update: %v (version %d)", err, got.Version)
	}
	if err := st.Update(ctx, &stale); !errors.Is(err, session.ErrConflict) {
		t.Errorf("Update at a stale version: %v, want ErrConflict", err)
	}
	wrongScope := *got
	wrongScope.Scope = session.Scope{TenantID: "globex", ProjectID: "music"}
	if err := st.Update(ctx, &wrongScope); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("Update in another scope: %v, want ErrNotFound", err)
	}
	ghost := *got
	ghost.ID = "nope"
	if err := st.Update(ctx, &ghost); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("Update of a missing session: %v, want ErrNotFound", err)
	}
	executing, err := st.Get(ctx, scope, "s1")
	if err != nil || executing.Stage != session.StageExecuting || executing.Execution == nil ||
		*executing.Execution != *got.Execution || executing.Version != 1 {
		t.Fatalf("executing session: %+v (%v)", executing, err)
	}

	if err := st.ClaimExecution(ctx, executing); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if err := st.ClaimExecution(ctx, executing); !errors.Is(err, session.ErrExecuting) {
		t.Errorf("second claim of one execution: %v, want ErrExecuting", err)
	}
	next := *executing
	next.Execution = &session.Execution{ID: "s1/3", From: session.StageConfirmWrite, Started: now, Deadline: now, Until: now.Add(6 * time.Second)}
	if err := st.ClaimExecution(ctx, &next); err != nil {
		t.Errorf("claim of a later execution: %v", err)
	}
	// The claim's expiry: as claimed, as renewed; none recorded, or no
	// claim at all.
	for _, step := range []struct {
		renew     time.Time
		id        string
		wantUntil time.Time
		wantFound bool
	}{
		{id: "s1/3", wantUntil: now.Add(6 * time.Second), wantFound: true},
		{renew: now.Add(8 * time.Second), id: "s1/3", wantUntil: now.Add(8 * time.Second), wantFound: true},
		{id: "s1/1", wantFound: true},
		{id: "s1/2"},
	} {
		if !step.renew.IsZero() {
			if err := st.RenewExecution(ctx, step.id, step.renew); err != nil {
				t.Fatalf("RenewExecution %s: %v", step.id, err)
			}
		}
		until, found, err := st.ExecutionUntil(ctx, step.id)
		if err != nil || found != step.wantFound || !until.Equal(step.wantUntil) {
			t.Errorf("ExecutionUntil %s = %v, %v, %v; want %v, %v", step.id, until, found, err, step.wantUntil, step.wantFound)
		}
	}

	executing.Stage, executing.Execution = session.StageDone, nil
	if err := st.Update(ctx, executing); err != nil {
		t.Fatal(err)
	}
	if done, err := st.Get(ctx, scope, "s1"); err != nil || done.Stage != session.StageDone || done.Execution != nil || done.Version != 2 {
		t.Errorf("after the result: %+v (%v)", done, err)
	}
	testJobs(t, st, scope, now)
	testPrompts(t, st, scope, now)
}

// testPrompts logs two prompts of a session and one of another scope, and
// lists them back in time order, never across scopes.
func testPrompts(t *testing.T, st *mongostore.Store, scope session.Scope, now time.Time) {
	ctx := context.Background()
	for _, p := range []session.PromptRecord{
		{Scope: scope, SessionID: "s1", Prompt: sqlgen.Prompt{Agent: sqlgen.AgentSQL, Time: now.Add(time.Second), Answer: "SELECT 1",
			Messages: []sqlgen.PromptMessage{{Role: "system", Content: "rules"}, {Role: "user", Content: "Question: one"}}}},
		{Scope: scope, SessionID: "s1", Prompt: sqlgen.Prompt{Agent: sqlgen.AgentJob, Time: now, Error: "model down"}},
		{Scope: session.Scope{TenantID: "globex", ProjectID: "music"}, SessionID: "s1", Prompt: sqlgen.Prompt{Agent: sqlgen.AgentJob, Time: now}},
	} {
		if err := st.AddPrompt(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.ListPrompts(ctx, scope, "s1", nil, 10)
	if err != nil || len(got) != 2 || got[0].Agent != sqlgen.AgentJob || got[0].Error != "model down" || got[1].Answer != "SELECT 1" ||
		len(got[1].Messages) != 2 || got[1].Messages[1].Content != "Question: one" || !got[1].Time.Equal(now.Add(time.Second)) {
		t.Fatalf("ListPrompts = %+v, %v", got, err)
	}
	// Pages: three more in the same millisecond as the second, which a
	// page may end among (their order is by id).
	for range 3 {
		p := session.PromptRecord{Scope: scope, SessionID: "s1", Prompt: sqlgen.Prompt{Agent: sqlgen.AgentSQL, Time: now.Add(time.Second + 200*time.Microsecond)}}
		if err := st.AddPrompt(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	all, err := st.ListPrompts(ctx, scope, "s1", nil, 10)
	if err != nil || len(all) != 5 || all[0].ID == "" {
		t.Fatalf("ListPrompts of five = %+v, %v", all, err)
	}
	var paged []string
	var after *session.Cursor
	for range 4 {
		page, err := st.ListPrompts(ctx, scope, "s1", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range page {
			paged = append(paged, p.ID)
		}
		if len(page) < 2 {
			break
		}
		c := page[len(page)-1].Cursor()
		after = &c
	}
	var want []string
	for _, p := range all {
		want = append(want, p.ID)
	}
	if !slices.Equal(paged, want) {
		t.Errorf("pages of two = %v, want %v", paged, want)
	}
	if _, err := st.ListPrompts(ctx, scope, "s1", &session.Cursor{Time: now, ID: "s1/2"}, 2); !errors.Is(err, session.ErrBadCursor) {
		t.Errorf("a cursor whose id is not a prompt's: %v, want ErrBadCursor", err)
	}
}

// testJobs keeps three jobs of two sessions and one of another scope, and
// reads them back: whole, newest first, by session, never across scopes.
func testJobs(t *testing.T, st *mongostore.Store, scope session.Scope, now time.Time) {
	ctx := context.Background()
	jobs := []session.Job{
		{ID: "s1/2", SessionID: "s1", Scope: scope, Kind: session.JobReadSQL, Connection: "shop", SQL: "SELECT 1\n  -- as approved",
			Params: map[string]string{"connection": "shop"}, RowCount: 1, Duration: 1500 * time.Millisecond, Destination: "shown", Started: now},
		{ID: "s1/5", SessionID: "s1", Scope: scope, Kind: session.JobCompareSQL, Name: "nightly", SQL: "SELECT a", SecondSQL: "SELECT b",
			Params: map[string]string{}, RowCount: 3, Destination: "table main.d on shop", Started: now.Add(time.Minute)},
		{ID: "s2/2", SessionID: "s2", Scope: scope, Kind: session.JobWriteData, SQL: "SELECT 2", Started: now.Add(2 * time.Minute)},
		{ID: "g1/2", SessionID: "g1", Scope: session.Scope{TenantID: "globex", ProjectID: "music"}, Kind: session.JobReadSQL, Started: now.Add(3 * time.Minute)},
	}
	for i := range jobs {
		if err := st.AddJob(ctx, &jobs[i]); err != nil {
			t.Fatalf("AddJob %s: %v", jobs[i].ID, err)
		}
	}
	again := jobs[0]
	again.SQL = "SELECT 'another'"
	if err := st.AddJob(ctx, &again); err != nil {
		t.Fatalf("AddJob of a kept id: %v", err)
	}
	got, err := st.GetJob(ctx, scope, "s1/2")
	if err != nil || got.SQL != jobs[0].SQL || got.Duration != jobs[0].Duration || !got.Started.Equal(now) ||
		got.Params["connection"] != "shop" || got.Destination != "shown" || got.RowCount != 1 {
		t.Fatalf("GetJob = %+v, %v; want the first job as added", got, err)
	}
	if _, err := st.GetJob(ctx, session.Scope{TenantID: "globex", ProjectID: "music"}, "s1/2"); !errors.Is(err, session.ErrJobNotFound) {
		t.Errorf("GetJob from another scope: %v, want ErrJobNotFound", err)
	}
	ids := func(js []session.Job) string {
		var out []string
		for _, j := range js {
			out = append(out, j.ID)
		}
		return strings.Join(out, ",")
	}
	// Two more jobs started in the same millisecond as s1/5: the order
	// among them is by id, and a page may end between them.
	for _, id := range []string{"s1/7", "s3/2"} {
		j := session.Job{ID: id, SessionID: strings.Split(id, "/")[0], Scope: scope, Kind: session.JobReadSQL, Started: now.Add(time.Minute + 300*time.Microsecond)}
		if err := st.AddJob(ctx, &j); err != nil {
			t.Fatal(err)
		}
	}
	at := func(id string, d time.Duration) *session.Cursor {
		return &session.Cursor{Time: now.Add(d), ID: id}
	}
	for _, tc := range []struct {
		session string
		after   *session.Cursor
		limit   int
		want    string
	}{
		{"", nil, 10, "s2/2,s3/2,s1/7,s1/5,s1/2"},
		{"", nil, 2, "s2/2,s3/2"},
		{"", at("s3/2", time.Minute+300*time.Microsecond), 2, "s1/7,s1/5"},
		{"", at("s1/5", time.Minute), 2, "s1/2"},
		{"", at("s1/2", 0), 2, ""},
		{"s1", nil, 10, "s1/7,s1/5,s1/2"},
		{"s1", at("s1/7", time.Minute), 1, "s1/5"},
		{"nope", nil, 10, ""},
	} {
		list, err := st.ListJobs(ctx, scope, session.JobQuery{SessionID: tc.session, After: tc.after, Limit: tc.limit})
		if err != nil || ids(list) != tc.want {
			t.Errorf("ListJobs(%q after %v, %d) = %s, %v; want %s", tc.session, tc.after, tc.limit, ids(list), err, tc.want)
		}
	}
}

// TestEveryQueryIsIndexed runs the store's operations with many writers
// (MongoDB) on a database whose commands are recorded: an index serves
// every query (testkit.AssertIndexed), and the index of earlier versions
// that served none is gone.
func TestEveryQueryIsIndexed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, rt := testkit.MongoDBCounted(t)
	coll := db.Collection(mongostore.Collection)
	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "updated", Value: -1}},
		Options: options.Index().SetName("scope_updated"),
	}); err != nil {
		t.Fatal(err)
	}
	testStore(t, db)
	testkit.AssertIndexed(t, db, rt)
	specs, err := coll.Indexes().ListSpecifications(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if s.Name != "_id_" {
			t.Errorf("index %s left on %s", s.Name, mongostore.Collection)
		}
	}
}
