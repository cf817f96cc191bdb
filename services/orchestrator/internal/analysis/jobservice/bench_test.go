package jobservice_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

// BenchmarkAnalysisFlow drives b.N analyses through the whole flow —
// planning through the real model gateway in front of an instant scripted
// simulator, two instant market-data tools, synthesis — with up to 8
// analyses in flight, each watched through WatchJob. It reports analyses per
// second and the p50/p99 latency from a job's state change (the time the
// change stamped on the job) to the WatchJob subscriber receiving its event.
func BenchmarkAnalysisFlow(b *testing.B) {
	e := newEnv(b)
	e.scriptBHPPlan()
	e.scriptSynthesis(stockAnswer)
	e.cfg.ToolParallelism, e.cfg.ModelParallelism = 8, 8
	e.start(analysis.Hooks{})

	var (
		mu        sync.Mutex
		latencies []time.Duration
		wg        sync.WaitGroup
	)
	// At most inFlight analyses at once: the rate is what the mesh sustains,
	// and the latencies are those of a loaded, not a flooded, system.
	const inFlight = 8
	sem := make(chan struct{}, inFlight)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		sem <- struct{}{}
		root := e.submit("Analyse BHP for investment", "stock_analysis")
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			stream, err := e.client.WatchJob(ctx, &orchestratorv1.WatchJobRequest{Scope: e.scope, JobId: root.GetId()})
			if err != nil {
				b.Error(err)
				return
			}
			for {
				m, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					b.Error(err)
					return
				}
				got := time.Now()
				if changed := changeTime(m.GetEvent().GetJob()); !changed.IsZero() {
					mu.Lock()
					latencies = append(latencies, got.Sub(changed))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "analyses/s")
	if len(latencies) > 0 {
		slices.Sort(latencies)
		b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "event-p50-ms")
		b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "event-p99-ms")
	}
}

// changeTime is when the state in an event was entered: end time for a
// finished job, start time for a running or waiting one, creation for a
// pending one.
func changeTime(j *orchestratorv1.Job) time.Time {
	switch j.GetStatus() {
	case orchestratorv1.JobStatus_JOB_STATUS_COMPLETE, orchestratorv1.JobStatus_JOB_STATUS_FAILED, orchestratorv1.JobStatus_JOB_STATUS_CANCELLED:
		return j.GetEndTime().AsTime()
	case orchestratorv1.JobStatus_JOB_STATUS_PENDING:
		if j.GetType() == orchestratorv1.JobType_JOB_TYPE_ANALYSIS_REQUEST || j.GetStartTime() == nil {
			return j.GetCreateTime().AsTime()
		}
	case orchestratorv1.JobStatus_JOB_STATUS_RUNNING:
		return j.GetStartTime().AsTime()
	}
	return time.Time{} // waiting: not stamped precisely enough to measure
}
