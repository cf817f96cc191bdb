package classifier

import (
	"context"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentmesh/agentmesh/libs/config"
	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint"
	"github.com/agentmesh/agentmesh/services/classifier/internal/conversations"
	"github.com/agentmesh/agentmesh/services/classifier/internal/meshtest"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// BenchmarkRunTransitions measures state transitions per second of whole
// runs against an instant simulator: each iteration classifies the 40
// sample conversations (pages of 10, batches of 5: about 35 checkpointed
// transitions), approving every fetch and batch through the API as soon as
// it is asked, with the events streamed back through NATS. The baseline,
// measured in the same run on the same database, is bare checkpoint commits
// per second (no model call, no fetch, no streaming), so the ratio shows
// what a transition costs beyond its checkpoint.
func BenchmarkRunTransitions(b *testing.B) {
	uri, dbName := testkit.MongoURI(b)
	models := meshtest.StartModels(b)
	var commits atomic.Int64
	var cfg Config
	err := config.Load("", &cfg, config.Map(map[string]string{
		"MONGO_URI": uri, "MONGO_DATABASE": dbName, "NATS_URL": testkit.NewNATS(b).URL(), "MODELGATEWAY_ADDR": models.Addr,
		"CLASSIFIER_MAX_BATCH": "10", "CLASSIFIER_BATCH_SIZE": "5", "CLASSIFIER_MAX_MODEL_CALLS": "100",
	}))
	if err != nil {
		b.Fatal(err)
	}
	hook := func(context.Context, string, statemachine.State) { commits.Add(1) }
	addr := testkit.RunService(b, "classifier", func(ctx context.Context, rt service.Runtime) error {
		return run(ctx, &cfg, rt, hook)
	})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	ctx := context.Background()
	client := classifierv1.NewClassifierServiceClient(conn)

	sample, err := conversations.Sample()
	if err != nil {
		b.Fatal(err)
	}
	req := &classifierv1.ImportConversationsRequest{Scope: testScope}
	var ids []string
	for _, c := range sample {
		req.Conversations = append(req.Conversations, c.Proto())
		ids = append(ids, c.ID)
	}
	if _, err := client.ImportConversations(ctx, req); err != nil {
		b.Fatal(err)
	}
	sort.Strings(ids)
	models.ScriptClassifications(ids, 5, sampleLabels(ids))
	models.ScriptSummary("summary")
	plan := meshtest.NewPlan(len(ids), nil)

	baseline := commitRate(b, uri, dbName)

	b.ResetTimer()
	commits.Store(0)
	start := time.Now()
	for range b.N {
		b.StopTimer()
		models.ScriptPlans(plan)
		b.StartTimer()
		st, err := client.StartRun(ctx, &classifierv1.StartRunRequest{Scope: testScope, Instruction: "classify everything"})
		if err != nil {
			b.Fatal(err)
		}
		evs, err := drain(st)
		if err != nil || len(evs) == 0 {
			b.Fatalf("start: %v", err)
		}
		runID := evs[0].GetRunId()
		for {
			r, err := client.GetRun(ctx, &classifierv1.GetRunRequest{Scope: testScope, RunId: runID})
			if err != nil {
				b.Fatal(err)
			}
			var cmd classifierv1.CommandType
			switch r.GetRun().GetState() {
			case classifierv1.RunState_RUN_STATE_AWAITING_FETCH_APPROVAL:
				cmd = approveFetch
			case classifierv1.RunState_RUN_STATE_AWAITING_BATCH_APPROVAL:
				cmd = approveBatch
			case classifierv1.RunState_RUN_STATE_COMPLETED:
			default:
				b.Fatalf("run ended in %s: %s", r.GetRun().GetState(), r.GetRun().GetStopReason())
			}
			if cmd == 0 {
				break
			}
			if _, err := command(client, ctx, runID, cmd, ""); err != nil {
				b.Fatal(err)
			}
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	rate := float64(commits.Load()) / elapsed.Seconds()
	b.ReportMetric(float64(commits.Load())/float64(b.N), "transitions/run")
	b.ReportMetric(rate, "transitions/s")
	b.ReportMetric(baseline, "baseline-commits/s")
	b.ReportMetric(rate/baseline, "ratio")
}

// commitRate measures bare sequential checkpoint commits per second on the
// database.
func commitRate(b *testing.B, uri, dbName string) float64 {
	b.Helper()
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = client.Disconnect(ctx) }()
	store := checkpoint.NewStore(client.Database(dbName))
	m, err := statemachine.New(statemachine.Config{MaxModelCalls: 1, MaxPlans: 1, MaxBatch: 1, BatchSize: 1, ChunkSize: 1})
	if err != nil {
		b.Fatal(err)
	}
	tr := m.Start("baseline-run", testScope.GetTenantId(), testScope.GetProjectId(), "baseline")
	rec, err := store.Create(ctx, tr.Run, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	const n = 200
	t0 := time.Now()
	for range n {
		if rec, err = store.Commit(ctx, rec, tr.Run, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
	return n / time.Since(t0).Seconds()
}
