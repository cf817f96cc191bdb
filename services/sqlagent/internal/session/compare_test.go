package session_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
)

// toConfirmCompare starts a session on the sample and brings it to the
// confirmation of a comparison of the customers with the customers but
// the first, keyed by customer_id, its differences written to table.
func toConfirmCompare(t *testing.T, a *session.Agent, table string) string {
	t.Helper()
	s, _, err := a.Create(context.Background(), scope, connections.SampleName)
	if err != nil {
		t.Fatal(err)
	}
	send(t, a, s.ID, "compare", session.StageAskFirstSQLMethod)
	send(t, a, s.ID, userSQL, session.StageConfirmFirstUserSQL)
	send(t, a, s.ID, "yes", session.StageAskSecondSQLMethod)
	send(t, a, s.ID, userSQL+" WHERE customer_id > 1", session.StageConfirmSecondUserSQL)
	send(t, a, s.ID, "yes", session.StageAskAutoMatch)
	send(t, a, s.ID, "yes", session.StageAskCompareKey)
	send(t, a, s.ID, "customer_id", session.StageAskReportingType)
	send(t, a, s.ID, "differences", session.StageAskCompareSchema)
	send(t, a, s.ID, "main", session.StageAskCompareTableName)
	send(t, a, s.ID, table, session.StageAskCompareJobName)
	send(t, a, s.ID, "nightly check", session.StageExecuteCompareSQL)
	return s.ID
}

// A comparison whose process died after claiming it is not run again
// silently: past its deadline the next input returns the session to
// EXECUTE_COMPARE_SQL saying the table may have been written, nothing is
// written, and only a new confirmation writes it (under a new claim).
func TestInterruptedComparisonIsNeverRerunSilently(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		sh := newShop(t)
		c := newClock()
		store := newStore(t, db)
		a := session.NewAgent(store, sh.dbs, nil, c.opts())
		id := toConfirmCompare(t, a, "diff")
		s, err := store.Get(ctx, scope, id)
		if err != nil {
			t.Fatal(err)
		}
		s.Stage = session.StageExecuting
		s.Execution = &session.Execution{ID: fmt.Sprintf("%s/%d", s.ID, s.Version+1), From: session.StageExecuteCompareSQL, Started: c.Now(), Deadline: c.Now().Add(time.Minute)}
		if err := store.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
		if err := store.ClaimExecution(ctx, s); err != nil {
			t.Fatal(err)
		}
		before, claimed := sh.schemaVersion(t), claims(t, db, id)
		if _, _, err := a.Send(ctx, scope, id, "yes", ""); !errors.Is(err, session.ErrExecuting) {
			t.Fatalf("input before the deadline: %v, want ErrExecuting", err)
		}
		c.Advance(61 * time.Second)
		r := send(t, a, id, "yes", session.StageExecuteCompareSQL)
		if !strings.Contains(r.Text, "interrupted") || !strings.Contains(r.SQLToConfirm, userSQL+" WHERE customer_id > 1") {
			t.Errorf("reply after the deadline: %+v", r)
		}
		if got := sh.schemaVersion(t); got != before {
			t.Fatalf("the interrupted comparison was written again: schema cookie %d → %d", before, got)
		}
		r = send(t, a, id, "yes", session.StageNeedWriteOrEmail)
		if r.Result == nil || len(r.Result.Rows) != 1 || r.Result.Rows[0][0] != "only_in_first" || r.Result.Rows[0][1] != int64(1) {
			t.Errorf("the new confirmation's diff: %+v", r.Result)
		}
		if n := claims(t, db, id); n != claimed+1 {
			t.Errorf("%d executions claimed, want %d", n, claimed+1)
		}
	})
}
