package runner_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint"
	"github.com/agentmesh/agentmesh/services/classifier/internal/conversations"
	"github.com/agentmesh/agentmesh/services/classifier/internal/dbbudget"
	"github.com/agentmesh/agentmesh/services/classifier/internal/labels"
	"github.com/agentmesh/agentmesh/services/classifier/internal/meshtest"
	"github.com/agentmesh/agentmesh/services/classifier/internal/modelcalls"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runner"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// growing are the collections that grow with every run and every import:
// the hot path may reach them by exact _id only.
var growing = []string{labels.Collection, conversations.Collection, checkpoint.ArchiveCollection}

// The database round trips of one classification batch (ApproveBatch →
// Saving → Classifying → AwaitingBatchApproval) and of one run's end
// (ApproveBatch → Saving → Summarizing → Completed) are a fixed budget,
// after earlier runs left labels and checkpoints behind: nothing
// on the way reads a growing collection by anything but an exact _id. A
// declared single writer knows the version of each checkpoint it wrote and
// writes it by _id; with many writers the write is one conditional update:
// no read before either.
// The relay's publishing and the archiving that follow a write are
// counted in the checkpoint store's own tests.
func TestRoundTripBudgets(t *testing.T) {
	t.Parallel()
	testkit.EachWriterModeCounted(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips) {
		ctx := context.Background()
		sample, model := scriptedModels(t)
		scope := &commonv1.Scope{TenantId: "acme", ProjectId: "support"}
		convs, checkpoints, saved := conversations.NewStore(db), checkpoint.NewStore(db), labels.NewStore(db)
		for _, prepare := range []func(context.Context) error{convs.Prepare, checkpoints.EnsureIndexes, saved.EnsureIndexes} {
			if err := prepare(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := convs.Upsert(ctx, scope, sample); err != nil {
			t.Fatal(err)
		}
		machine, err := statemachine.New(statemachine.Config{MaxModelCalls: 20, MaxPlans: 5, MaxBatch: 4, BatchSize: 2, ChunkSize: 500})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		// A lease far longer than the test: no heartbeat renewal is counted.
		r := runner.New(rctx, runner.Deps{Machine: machine, Checkpoints: checkpoints, Conversations: convs, Labels: saved, Model: model},
			runner.Config{LeaseTTL: time.Hour})
		t.Cleanup(func() { cancel(); r.Wait() })

		drive := func(d *runner.Drive, err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Result(); err != nil {
				t.Fatal(err)
			}
		}
		state := func(id string) statemachine.State {
			t.Helper()
			rec, err := checkpoints.Load(ctx, scope, id)
			if err != nil {
				t.Fatal(err)
			}
			return rec.Run.State
		}
		// A run to the end, so the collections hold the labels and
		// checkpoints earlier runs leave.
		runToEnd := func() string {
			t.Helper()
			d, err := r.Start(ctx, scope, "classify support conversations")
			drive(d, err)
			drive(r.Command(ctx, scope, d.RunID, statemachine.ApproveFetch, ""))
			drive(r.Command(ctx, scope, d.RunID, statemachine.ApproveBatch, ""))
			drive(r.Command(ctx, scope, d.RunID, statemachine.ApproveBatch, ""))
			if s := state(d.RunID); s != statemachine.Completed {
				t.Fatalf("earlier run ended %s", s)
			}
			return d.RunID
		}
		runToEnd()
		runToEnd()

		d, err := r.Start(ctx, scope, "classify support conversations")
		drive(d, err)
		drive(r.Command(ctx, scope, d.RunID, statemachine.ApproveFetch, ""))
		if s := state(d.RunID); s != statemachine.AwaitingBatchApproval {
			t.Fatalf("before the batch: %s", s)
		}

		// A single writer kept the conversations when the runs before read
		// them, and reads no run it wrote: it keeps a copy.
		single := mongox.SingleWriter(db)
		batchReads := fmt.Sprintf("find %s=2 find %s=1 ", conversations.Collection, checkpoint.Collection)
		runRead := fmt.Sprintf("find %s=1 ", checkpoint.Collection)
		if single {
			batchReads, runRead = "", ""
		}
		cases := []struct {
			name string
			want string
			end  statemachine.State
		}{
			// The command reads the run (many writers) and takes its lease;
			// Saving inserts the batch's labels and commits; Classifying
			// reads the next batch (2 conversations by _id, many writers)
			// and commits its result.
			{"one batch", batchReads + fmt.Sprintf("insert %s=1 update %s=3",
				labels.Collection, checkpoint.Collection), statemachine.AwaitingBatchApproval},
			// The same up to Saving's commit; Summarizing reads the run's 4
			// labels by _id and commits the completed run.
			{"run's end", fmt.Sprintf("find %s=4 %sinsert %s=1 update %s=3",
				labels.Collection, runRead, labels.Collection, checkpoint.Collection), statemachine.Completed},
		}
		for _, tc := range cases {
			rt.Reset()
			drive(r.Command(ctx, scope, d.RunID, statemachine.ApproveBatch, ""))
			got, scans := rt.String(), dbbudget.NotExactOn(rt, growing...)
			if s := state(d.RunID); s != tc.end {
				t.Fatalf("%s: ended in %s, want %s", tc.name, s, tc.end)
			}
			if got != tc.want {
				t.Errorf("%s: round trips %q, want %q", tc.name, got, tc.want)
			}
			if len(scans) > 0 {
				t.Errorf("%s: selected a growing collection by more than _id: %v", tc.name, scans)
			}
			if all := rt.NotExact(); single && len(all) > 0 {
				t.Errorf("%s: a single writer selected by more than _id: %v", tc.name, all)
			}
		}
	})
}

// scriptedModels starts the model side of the mesh, scripted for runs of 4
// of the sample conversations in batches of 2, and returns the sample and
// the model client.
func scriptedModels(t *testing.T) ([]conversations.Conversation, *modelcalls.Client) {
	t.Helper()
	models := meshtest.StartModels(t)
	conn, err := grpc.NewClient(models.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	sample, err := conversations.Sample()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	truth := map[string]string{}
	for i, c := range sample {
		ids = append(ids, c.ID)
		truth[c.ID] = []string{"RESOLVED", "UNRESOLVED"}[i%2]
	}
	slices.Sort(ids)
	models.ScriptPlans(meshtest.NewPlan(4, nil), meshtest.NewPlan(4, nil), meshtest.NewPlan(4, nil))
	models.ScriptClassifications(ids, 2, truth)
	models.ScriptSummary("## Summary\n\nAll classified.")
	return sample, modelcalls.New(modelv1.NewModelServiceClient(conn), "classifier", "chat", time.Minute)
}
