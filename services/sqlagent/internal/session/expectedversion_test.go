package session_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
)

// TestConfirmationHoldsForTheSessionAsShown: a client (the console, an MCP
// client) shows the user the SQL waiting for approval; before the user's
// confirmation arrives, another client of the same scope replaces that
// SQL. A confirmation naming the version the client showed is refused
// with ErrSessionChanged and runs nothing, whether the replacement came
// in through this agent or another replica's; one naming the current
// version runs the SQL shown at that version; a repeat of the last input
// under its request id is answered before the check (its version has
// moved by then); an input without a version is not checked.
func TestConfirmationHoldsForTheSessionAsShown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, other, _, id := twoReplicas(t)
	send := func(ag *session.Agent, req session.Request) (*session.Session, session.Reply, error) {
		return ag.SendRequest(ctx, scope, id, req)
	}
	at := func(v int64) *int64 { return &v }
	if _, _, err := send(a, session.Request{Text: "own sql"}); err != nil {
		t.Fatal(err)
	}
	shown, r, err := send(a, session.Request{Text: userSQL, ID: "shown"})
	if err != nil || r.SQLToConfirm != userSQL {
		t.Fatalf("user SQL: %v, SQL to confirm %q", err, r.SQLToConfirm)
	}
	// Another client replaces the SQL waiting for approval.
	const swapped = "SELECT name, email FROM customers"
	if _, r, err := send(other, session.Request{Text: swapped}); err != nil || r.SQLToConfirm != swapped {
		t.Fatalf("swap: %v, SQL to confirm %q", err, r.SQLToConfirm)
	}
	for _, ag := range []*session.Agent{a, other} {
		_, _, err := send(ag, session.Request{Selection: "confirm", ExpectedVersion: at(shown.Version)})
		var changed *session.SessionChangedError
		if !errors.As(err, &changed) || !errors.Is(err, session.ErrSessionChanged) ||
			changed.Expected != shown.Version || changed.Now != shown.Version+1 || changed.PendingSQL != swapped {
			t.Fatalf("confirmation of version %d after the swap: %v (%+v); want ErrSessionChanged naming version %d, now %d, and the swapped SQL",
				shown.Version, err, changed, shown.Version, shown.Version+1)
		}
	}
	now, err := a.Get(ctx, scope, id)
	if err != nil {
		t.Fatal(err)
	}
	if now.Stage != session.StageConfirmUserSQL || now.Version != shown.Version+1 {
		t.Fatalf("after the refused confirmations: stage %s version %d; want the swap's session untouched (%s, %d)",
			now.Stage, now.Version, session.StageConfirmUserSQL, shown.Version+1)
	}
	// The repeat of an input is answered, not checked against its version.
	if _, _, err := send(a, session.Request{Text: userSQL, ID: "shown", ExpectedVersion: at(shown.Version - 1)}); !errors.Is(err, session.ErrInputSuperseded) {
		t.Fatalf("repeat of an earlier input: %v, want ErrInputSuperseded", err)
	}
	// Confirming what the session shows now runs that SQL.
	confirmed, _, err := send(a, session.Request{Selection: "confirm", ExpectedVersion: at(now.Version)})
	if err != nil || confirmed.Stage != session.StageExecuteSQL {
		t.Fatalf("confirmation of the current version: %v", err)
	}
	ran, r, err := send(a, session.Request{Text: "emails", ExpectedVersion: at(confirmed.Version)})
	if err != nil || r.Job == nil || r.Job.SQL != swapped {
		t.Fatalf("job name: %v, job %+v; want the SQL confirmed at version %d to run", err, r.Job, now.Version)
	}
	jobs, _, err := a.ListJobs(ctx, scope, session.JobQuery{SessionID: id, Limit: 10})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("jobs of the session: %d (%v); want the one confirmed", len(jobs), err)
	}
	// No version: not checked.
	if _, _, err := send(a, session.Request{Text: "okay"}); err != nil {
		t.Fatalf("input without a version after version %d: %v", ran.Version, err)
	}
}
