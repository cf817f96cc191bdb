package jobservice_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/agentmesh/agentmesh/libs/events"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobstore"
)

// A finished analysis leaves the live set for the archive once its events
// are published, and stays whole for GetJob, ListJobs, WatchJob and
// RetryJob.
func TestFinishedAnalysisIsArchivedAndStaysUsable(t *testing.T) {
	t.Parallel()
	eachWriterMode(t, testFinishedAnalysisIsArchivedAndStaysUsable)
}

func testFinishedAnalysisIsArchivedAndStaysUsable(t *testing.T, singleWriter bool) {
	e := newEnvIn(t, singleWriter)
	e.scriptBHPPlan()
	synth := e.scriptSynthesis(stockAnswer)
	e.market.set(func(m *market) { m.status["/v1/financials"] = 503 })
	e.start(analysis.Hooks{})

	root := e.submit("Analyse BHP for investment", "stock_analysis")
	e.waitStatus(root.GetId(), complete, 20*time.Second)
	inLive := func() int64 {
		n, err := e.db.Collection(jobstore.Collection).CountDocuments(context.Background(), bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return inLive() == 0 }, "the finished analysis to leave the live set")
	archived, err := e.db.Collection(jobstore.ArchiveCollection).CountDocuments(context.Background(), bson.D{})
	if err != nil || archived != 5 {
		t.Fatalf("archive holds %d jobs (%v), want the analysis and its 4 children", archived, err)
	}

	final := e.get(root.GetId())
	tools := childrenOf(final, typeTool)
	if len(final.GetChildren()) != 4 || len(tools) != 2 || tools[1].GetStatus() != failed {
		t.Fatalf("archived tree %v", final.GetChildren())
	}
	list, err := e.client.ListJobs(e.ctx(5*time.Second), &orchestratorv1.ListJobsRequest{Scope: e.scope, ParentId: root.GetId()})
	if err != nil || len(list.GetJobs()) != 4 {
		t.Fatalf("ListJobs of the children = %v, %v", list.GetJobs(), err)
	}
	events, err := e.watch(root.GetId(), 0)()
	if err != nil || len(events) != 15 {
		t.Fatalf("watch of the archived analysis: %d events, %v", len(events), err)
	}

	// Retrying the failed tool brings the analysis back to work.
	e.market.set(func(m *market) { delete(m.status, "/v1/financials") })
	before := final.GetEndTime().AsTime()
	if _, err := e.client.RetryJob(e.ctx(5*time.Second), &orchestratorv1.RetryJobRequest{Scope: e.scope, JobId: tools[1].GetId()}); err != nil {
		t.Fatalf("RetryJob: %v", err)
	}
	var again *orchestratorv1.Job
	testkit.Eventually(t, 20*time.Second, func() bool {
		again = e.get(root.GetId())
		return again.GetStatus() == complete && again.GetEndTime().AsTime().After(before)
	}, "analysis to complete again after the retry")
	if out := outputMap(again); mustJSON(out["data_gaps"]) != `[]` || synth.Hits() != 2 {
		t.Errorf("after retry: data_gaps %v, synthesis calls %d", out["data_gaps"], synth.Hits())
	}
	if tools := childrenOf(again, typeTool); tools[1].GetStatus() != complete || tools[1].GetAttempts() != 2 {
		t.Errorf("retried tool %s after %d attempts", tools[1].GetStatus(), tools[1].GetAttempts())
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return inLive() == 0 }, "the analysis to be archived again")
	if got := e.get(root.GetId()); got.GetStatus() != complete || mustJSON(outputMap(got)) != mustJSON(outputMap(again)) {
		t.Errorf("re-archived analysis %s %v", got.GetStatus(), outputMap(got))
	}
}

// Analyses that finish while the archiver is busy go to the archive
// together, in one store call: taken one at a time, the archiver of a
// loaded mesh fell further behind with every analysis (in the growth
// bench, 6 s behind after 10 s), and the live set grew.
func TestArchiverBatchesWhatFinishedMeanwhile(t *testing.T) {
	t.Parallel()
	eachWriterMode(t, func(t *testing.T, single bool) {
		e := newEnvIn(t, single)
		e.scriptBHPPlan()
		e.scriptSynthesis(stockAnswer)
		var (
			mu    sync.Mutex
			calls [][]string
		)
		hold := make(chan struct{})
		// The recovery sweep archives the finished analyses it comes
		// across, one by one and past the hook: on a loaded machine it
		// took the analyses the held archiver was to batch.
		e.cfg.SweepInterval = time.Hour
		e.start(analysis.Hooks{BeforeArchive: func(ids []string) {
			mu.Lock()
			calls = append(calls, ids)
			first := len(calls) == 1
			mu.Unlock()
			if first {
				<-hold // busy until every analysis has finished
			}
		}})
		const n = 12
		roots := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { roots[i] = e.submit("Analyse BHP for investment", "stock_analysis").GetId() })
		}
		wg.Wait()
		for _, id := range roots {
			e.waitStatus(id, complete, 30*time.Second)
		}
		// A job's state is stored before its final event is published:
		// released before every final event is out, the archiver takes
		// the analyses whose events are, and the rest one by one later.
		stream, err := e.bus.JetStream().Stream(e.ctx(5*time.Second), events.StreamEvents)
		if err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 20*time.Second, func() bool {
			for _, id := range roots {
				tree := e.get(id)
				for _, j := range append([]*orchestratorv1.Job{tree}, tree.GetChildren()...) {
					subject := analysis.JobEventSubject(e.scope.GetTenantId(), id, j.GetId(), analysis.StatusComplete)
					if _, err := stream.GetLastMsgForSubject(e.ctx(5*time.Second), subject); err != nil {
						return false
					}
				}
			}
			return true
		}, "every job's final event in the events stream")
		// An analysis is offered to the archiver 25 ms after it settles
		// (its request is due then), and asked for just after it settles:
		// on a loaded machine the last ones were not due yet when the
		// archiver was released, and went one by one after the batch.
		time.Sleep(250 * time.Millisecond)
		close(hold)
		testkit.Eventually(t, 10*time.Second, func() bool {
			n, err := e.db.Collection(jobstore.Collection).CountDocuments(context.Background(), bson.D{})
			return err == nil && n == 0
		}, "every analysis archived")
		mu.Lock()
		defer mu.Unlock()
		archived := 0
		for _, ids := range calls {
			archived += len(ids)
		}
		if len(calls) > 3 || archived < n {
			t.Errorf("the archiver moved %d analyses in %d calls %v; want all %d in at most 3 (the one it was busy with, then the rest at once)", archived, len(calls), calls, n)
		}
	})
}
