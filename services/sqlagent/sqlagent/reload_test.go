package sqlagent_test

import (
	"slices"
	"testing"

	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// TestSessionReadBackOffersItsChoices: GetSession, which reads the session
// from the database, carries the options and action of the agent's last
// reply — after the session's creation and after each input — so a client
// that reloads offers the same buttons; a finished session offers none.
func TestSessionReadBackOffersItsChoices(t *testing.T) {
	t.Parallel()
	dbPath := chinookCopy(t)
	sim, modelAddr := startModel(t)
	sim.When(providersim.Match{LastUserContains: "How many genres"}).Text("```sql\nSELECT COUNT(*) AS genres FROM Genre\n```")
	c := startAgent(t, modelAddr, "music=sqlite:"+dbPath, nil)
	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "music"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	same := func(step string, reply []*sqlagentv1.Option, action sqlagentv1.Action) {
		t.Helper()
		got, err := c.GetSession(ctxTimeout(t), &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: id})
		if err != nil {
			t.Fatal(err)
		}
		s := got.GetSession()
		if !slices.Equal(optionValues(s.GetOptions()), optionValues(reply)) || s.GetAction() != action {
			t.Fatalf("%s: the session read back offers %v (%v), the reply %v (%v)", step, optionValues(s.GetOptions()), s.GetAction(), optionValues(reply), action)
		}
	}
	if len(created.GetOptions()) == 0 {
		t.Fatal("the new session offers no choices")
	}
	same("created", created.GetOptions(), created.GetAction())
	r := send(t, c, id, "How many genres are there?")
	wantStage(t, r, "CONFIRM_GENERATED_SQL")
	if !slices.Contains(optionValues(r.GetOptions()), "confirm") {
		t.Fatalf("the SQL to confirm offers %v", optionValues(r.GetOptions()))
	}
	same("SQL to confirm", r.GetOptions(), r.GetAction())
	r = runRead(t, c, id, "yes")
	wantStage(t, r, "SHOW_RESULTS")
	same("results", r.GetOptions(), r.GetAction())
	r = send(t, c, id, "sel:done")
	wantStage(t, r, "DONE")
	same("done", nil, sqlagentv1.Action_ACTION_UNSPECIFIED)
}
