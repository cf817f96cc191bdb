package classifier

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint"
	"github.com/agentmesh/agentmesh/services/classifier/internal/meshtest"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runevents"
)

// batchAnswer scripts one slow answer for exactly the conversations ids.
func batchAnswer(m *meshtest.Models, ids []string, truth map[string]string, delay time.Duration) *providersim.Rule {
	want := slices.Clone(ids)
	sort.Strings(want)
	var cls []map[string]string
	for _, id := range ids {
		cls = append(cls, map[string]string{"id": id, "label": truth[id], "reason": "slow answer"})
	}
	return m.Sim.When(providersim.Match{Func: func(r *providersim.Request) bool {
		got := meshtest.BatchIDs(*r)
		sort.Strings(got)
		return slices.Equal(got, want)
	}}).JSON(map[string]any{"classifications": cls}).Delay(delay).Times(1)
}

// Two resumes of the same run, or two commands, racing: exactly one drives
// the run. The other resume follows it to the approval request the run
// then waits for; the other command is refused with ABORTED (HTTP 409 at
// the gateway). (The restarted service may take the run over itself
// first: then both resumes follow it.)
func TestConcurrentResumesAndCommands(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	env := map[string]string{"CLASSIFIER_MAX_BATCH": "4", "CLASSIFIER_LEASE_TTL": "30s"}
	a := startService(t, in, env, nil)
	ids := importSample(t, a.client)
	truth := sampleLabels(ids)
	in.models.ScriptPlans(meshtest.NewPlan(4, nil))
	// The first classification hangs until its process goes away; the
	// second (after the restart) is slow; the rest answer at once.
	batchAnswer(in.models, ids[:2], truth, time.Hour)
	batchAnswer(in.models, ids[:2], truth, 500*time.Millisecond)
	batchAnswer(in.models, ids[2:4], truth, 500*time.Millisecond)
	in.models.ScriptClassifications(ids, 2, truth)

	runID, _ := startRun(t, a.client, "classify")
	approved := make(chan error, 1)
	go func() {
		_, err := command(a.client, testCtx(t), runID, approveFetch, "")
		approved <- err
	}()
	testkit.Eventually(t, 10*time.Second, func() bool { return len(in.models.Calls().Batches) == 1 }, "classification call")
	// Shut the service down mid-classification: the executor lets go of
	// the run, which stays in Classifying with no lease.
	a.stop()
	<-approved
	// Counted before the restart: the restarted service may classify the
	// batch itself, taking the run over before the resumes come.
	batchesBefore := len(in.models.Calls().Batches)
	b := startService(t, in, env, nil)
	if r := getRun(t, b.client, runID); r.GetState() != classifierv1.RunState_RUN_STATE_CLASSIFYING {
		t.Fatalf("run is %s after the shutdown", r.GetState())
	}

	race := func(n int, call func() ([]*classifierv1.RunEvent, error)) (winners [][]*classifierv1.RunEvent, losers []error) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				evs, err := call()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					losers = append(losers, err)
					return
				}
				winners = append(winners, evs)
			}()
		}
		close(start)
		wg.Wait()
		return winners, losers
	}

	winners, losers := race(2, func() ([]*classifierv1.RunEvent, error) { return resume(b.client, testCtx(t), runID) })
	if len(winners) != 2 || len(losers) != 0 {
		t.Fatalf("%d resumes proceeded, %d refused (%v); want both to proceed, one after the other", len(winners), len(losers), losers)
	}
	for _, evs := range winners {
		if got := types(evs); got[len(got)-1] != runevents.AwaitingBatchApproval {
			t.Errorf("resume streamed %v", got)
		}
	}
	if n := len(in.models.Calls().Batches) - batchesBefore; n != 1 {
		t.Errorf("the batch was classified %d times after the restart (by the two resumes, or the restarted service), want once", n)
	}
	if r := getRun(t, b.client, runID); r.GetState() != classifierv1.RunState_RUN_STATE_AWAITING_BATCH_APPROVAL || len(r.GetPendingBatch()) != 2 {
		t.Fatalf("run after the resumes: %v", r)
	}

	winners, losers = race(2, func() ([]*classifierv1.RunEvent, error) {
		return command(b.client, testCtx(t), runID, approveBatch, "")
	})
	if len(winners) != 1 || len(losers) != 1 {
		t.Fatalf("%d approvals proceeded, %d refused (%v); want exactly one each", len(winners), len(losers), losers)
	}
	expectCode(t, losers[0], codes.Aborted, "RUN_BUSY")
	if !has(winners[0], runevents.SavingCompleted) {
		t.Errorf("winning approval streamed %v", types(winners[0]))
	}
	if n := labelDocs(t, in.db, runID); n != 2 {
		t.Errorf("%d labels after one approval, want 2", n)
	}
}

// A checkpoint that cannot be decoded stops the run with an error; it is
// never resumed from an empty state.
func TestUndecodableCheckpointStopsTheRun(t *testing.T) {
	t.Parallel()
	cases := map[string]bson.M{
		"mistyped field":       {"$set": bson.M{"context.plans": "not a list"}},
		"unknown schema":       {"$set": bson.M{"schema_version": 99}},
		"context missing":      {"$unset": bson.M{"context": ""}},
		"inconsistent context": {"$set": bson.M{"context.fetched_ids": bson.A{}}},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := newInfra(t)
			s := startService(t, in, nil, nil)
			importSample(t, s.client)
			in.models.ScriptPlans(meshtest.NewPlan(3, nil))
			runID, _ := startRun(t, s.client, "classify")
			// FerretDB applies updates as unisolated read-and-write: damage
			// written while the events relay still removes relayed events from
			// the outbox could be overwritten. Damage a settled document.
			coll := in.db.Collection(checkpoint.Collection)
			testkit.Eventually(t, 10*time.Second, func() bool {
				n, err := coll.CountDocuments(testCtx(t), bson.D{{Key: "_id", Value: runID}, {Key: "outbox.0", Value: bson.D{{Key: "$exists", Value: true}}}})
				return err == nil && n == 0
			}, "outbox of run %s never drained", runID)
			if _, err := coll.UpdateOne(testCtx(t), bson.D{{Key: "_id", Value: runID}}, damage); err != nil {
				t.Fatal(err)
			}
			if r := getRun(t, s.client, runID); !strings.Contains(r.GetStopReason(), "cannot be decoded") {
				t.Errorf("GetRun of a damaged run: %v", r)
			}
			evs, err := command(s.client, testCtx(t), runID, approveFetch, "")
			expectCode(t, err, codes.DataLoss, "CHECKPOINT_CORRUPT")
			if got := types(evs); !slices.Equal(got, []string{runevents.RunError, runevents.RunStopped}) {
				t.Errorf("events %v, want error then stopped", got)
			}
			r := getRun(t, s.client, runID)
			if r.GetState() != classifierv1.RunState_RUN_STATE_STOPPED || !strings.HasPrefix(r.GetStopReason(), "checkpoint cannot be decoded") {
				t.Errorf("run %s / %q", r.GetState(), r.GetStopReason())
			}
			if n := in.models.Calls().Total(); n != 1 {
				t.Errorf("%d model calls; the damaged run was driven on", n)
			}
			_, err = resume(s.client, testCtx(t), runID)
			expectCode(t, err, codes.FailedPrecondition, "RUN_FINISHED")
		})
	}
}

// A step longer than the lease keeps the run: the executor renews its lease
// meanwhile, so past one TTL a command is still refused, saying the run is
// being driven, and a resume follows the executor to the end of its step
// rather than take the run over.
func TestLeaseRenewedDuringLongSteps(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	s := startService(t, in, map[string]string{"CLASSIFIER_LEASE_TTL": "1s", "CLASSIFIER_MAX_BATCH": "2"}, nil)
	ids := importSample(t, s.client)
	truth := sampleLabels(ids)
	in.models.ScriptPlans(meshtest.NewPlan(2, nil))
	slow := batchAnswer(in.models, ids[:2], truth, 5*time.Second)
	runID, _ := startRun(t, s.client, "classify")
	approved := make(chan []*classifierv1.RunEvent, 1)
	go func() {
		evs, err := command(s.client, testCtx(t), runID, approveFetch, "")
		if err != nil {
			t.Errorf("approve fetch: %v", err)
		}
		approved <- evs
	}()
	testkit.Eventually(t, 10*time.Second, func() bool { return len(in.models.Calls().Batches) == 1 }, "classification started")
	started := time.Now()
	// Once the TTL has passed, the lease must still be held (renewed).
	testkit.Eventually(t, 5*time.Second, func() bool { return time.Since(started) > 1500*time.Millisecond }, "lease TTL passed")
	_, err := command(s.client, testCtx(t), runID, approveBatch, "")
	expectCode(t, err, codes.Aborted, "RUN_BUSY")
	if !strings.Contains(status.Convert(err).Message(), "a resume follows its events") {
		t.Errorf("command while the lease is renewed: %v", err)
	}
	// A resume follows the holder: it streams the rest of the step and
	// ends with the run waiting, having taken nothing over.
	followed, err := resume(s.client, testCtx(t), runID)
	if err != nil || !has(followed, runevents.AwaitingBatchApproval) || has(followed, runevents.RunResumed) {
		t.Errorf("resume while the lease is renewed: %v %v", types(followed), err)
	}
	evs := <-approved
	if time.Since(started) < time.Second || slow.Hits() != 1 || !has(evs, runevents.AwaitingBatchApproval) {
		t.Errorf("the slow step did not finish as the lease holder: %v", types(evs))
	}
	if n := len(in.models.Calls().Batches); n != 1 {
		t.Errorf("%d classification calls; the batch was taken over", n)
	}
}
