package session_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
)

// TestResentInputIsAnsweredNotApplied: a client whose answer was lost
// (a cut connection, a killed gateway) sends the same input again under
// its request id. A repeat of the input that last moved the session gets
// that input's reply — options, SQL to confirm, the job that ran — with
// the session unchanged and nothing run again, also from another replica
// (a second agent on the same database); a repeat of an earlier input,
// or of one an input without an id followed, is refused.
func TestResentInputIsAnsweredNotApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, other, db, id := twoReplicas(t)
	sendAs := func(a *session.Agent, requestID, text string) (*session.Session, session.Reply, error) {
		return a.SendRequest(ctx, scope, id, session.Request{ID: requestID, Text: text})
	}
	// once sends an input, then again from both agents, and checks that
	// the repeats change nothing and answer alike.
	once := func(requestID, text string, stage session.Stage) session.Reply {
		t.Helper()
		s, r, err := sendAs(a, requestID, text)
		if err != nil {
			t.Fatalf("%s %q: %v", requestID, text, err)
		}
		if s.Stage != stage {
			t.Fatalf("%s %q: stage %s (%q), want %s", requestID, text, s.Stage, r.Text, stage)
		}
		for _, ag := range []*session.Agent{a, other} {
			s2, r2, err := sendAs(ag, requestID, text)
			if err != nil {
				t.Fatalf("repeat of %s: %v", requestID, err)
			}
			if s2.Version != s.Version || len(s2.Turns) != len(s.Turns) || s2.Stage != s.Stage {
				t.Fatalf("repeat of %s moved the session: version %d → %d, turns %d → %d, stage %s → %s",
					requestID, s.Version, s2.Version, len(s.Turns), len(s2.Turns), s.Stage, s2.Stage)
			}
			if r2.Text != r.Text || r2.SQLToConfirm != r.SQLToConfirm || r2.Action != r.Action || len(r2.Options) != len(r.Options) {
				t.Fatalf("repeat of %s answered %+v, want %+v", requestID, r2, r)
			}
			for i := range r.Options {
				if r2.Options[i] != r.Options[i] {
					t.Fatalf("repeat of %s: option %d %+v, want %+v", requestID, i, r2.Options[i], r.Options[i])
				}
			}
			if (r.Job == nil) != (r2.Job == nil) || (r.Job != nil && r2.Job.ID != r.Job.ID) {
				t.Fatalf("repeat of %s: job %+v, want %+v", requestID, r2.Job, r.Job)
			}
			if !reflect.DeepEqual(r2.Result, r.Result) {
				t.Fatalf("repeat of %s: result table %+v, want the reply's %+v", requestID, r2.Result, r.Result)
			}
		}
		return r
	}
	once("r1", "own sql", session.StageNeedUserSQL)
	if r := once("r2", userSQL, session.StageConfirmUserSQL); r.SQLToConfirm != userSQL {
		t.Fatalf("SQL to confirm %q", r.SQLToConfirm)
	}
	once("r3", "yes", session.StageExecuteSQL)
	r := once("r4", "customers", session.StageShowResults)
	if r.Job == nil {
		t.Fatal("the confirmed read ran no job")
	}
	if r.Result == nil || len(r.Result.Rows) == 0 {
		t.Fatalf("the confirmed read showed no rows: %+v", r.Result)
	}
	jobs, err := newStore(t, db).ListJobs(ctx, scope, session.JobQuery{SessionID: id, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || claims(t, db, id) != 1 {
		t.Fatalf("after three sends of the run: %d jobs, %d execution claims, want 1 and 1", len(jobs), claims(t, db, id))
	}

	before, err := a.Get(ctx, scope, id)
	if err != nil {
		t.Fatal(err)
	}
	refused := func(requestID, text string) {
		t.Helper()
		if _, _, err := sendAs(other, requestID, text); !errors.Is(err, session.ErrInputSuperseded) {
			t.Fatalf("repeat of %s after later inputs: %v, want ErrInputSuperseded", requestID, err)
		}
		after, err := a.Get(ctx, scope, id)
		if err != nil {
			t.Fatal(err)
		}
		if after.Version != before.Version {
			t.Fatalf("a refused repeat of %s moved the session to version %d", requestID, after.Version)
		}
	}
	refused("r2", userSQL)
	refused("r1", "own sql")
	// An input without an id: the last one named is now an earlier one.
	if _, _, err := a.Send(ctx, scope, id, "write", ""); err != nil {
		t.Fatal(err)
	}
	if before, err = a.Get(ctx, scope, id); err != nil {
		t.Fatal(err)
	}
	refused("r4", "customers")
}

// TestResentReadKeepsOnlyASmallTable: a read's result table comes again
// with a repeat of its input when it is small (above); a large one is not
// kept in the session, so the repeat answers with the reply and the job
// but without the rows.
func TestResentReadKeepsOnlyASmallTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sh := newShop(t)
	a := session.NewAgent(newStore(t, testkit.MongoDB(t)), sh.dbs, nil, newClock().opts())
	// 200 rows of 2,000 characters: about 400 KB.
	const wide = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) SELECT i, hex(zeroblob(1000)) AS pad FROM n"
	id := toConfirmUserSQL(t, a, wide)
	send(t, a, id, "yes", session.StageExecuteSQL)
	_, r, err := a.SendRequest(ctx, scope, id, session.Request{ID: "wide", Text: "wide rows"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Result == nil || len(r.Result.Rows) != 200 {
		t.Fatalf("the read showed %+v, want 200 rows", r.Result)
	}
	_, r2, err := a.SendRequest(ctx, scope, id, session.Request{ID: "wide", Text: "wide rows"})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Result != nil {
		t.Fatalf("the repeat carries %d rows of a table too large to keep", len(r2.Result.Rows))
	}
	if r2.Text != r.Text || r2.Job == nil || r.Job == nil || r2.Job.ID != r.Job.ID {
		t.Fatalf("the repeat answered %q with job %+v, want %q with job %+v", r2.Text, r2.Job, r.Text, r.Job)
	}
}

// twoReplicas is two agents on one database (db), as two replicas of the
// SQL agent, and a session on the sample database created by the first.
func twoReplicas(t *testing.T) (a, other *session.Agent, db *mongo.Database, id string) {
	t.Helper()
	sh := newShop(t)
	db = testkit.MongoDB(t)
	a = session.NewAgent(newStore(t, db), sh.dbs, nil, newClock().opts())
	other = session.NewAgent(newStore(t, db), sh.dbs, nil, newClock().opts())
	s, _, err := a.Create(context.Background(), scope, connections.SampleName)
	if err != nil {
		t.Fatal(err)
	}
	return a, other, db, s.ID
}
