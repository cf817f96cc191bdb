package handoff_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentmesh/agentmesh/libs/config"
	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/indexer"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat/chattest"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/handoff"
	"github.com/agentmesh/agentmesh/services/orchestrator/orchestrator"
)

// Environment of the orchestrator child process.
const (
	childEnv     = "AM_HANDOFF_CHILD_ENV"      // the orchestrator's environment, as JSON
	childCrashAt = "AM_HANDOFF_CHILD_CRASH_AT" // the hook point at which the child freezes to be killed
)

// TestOrchestratorChild is the orchestrator process that
// TestKilledOrchestratorStartsOneAnalysis kills: the whole orchestrator
// (orchestrator.Run, as the binary runs it) with the environment its
// parent gives, printing "ADDR <address>" once it serves. With a crash
// point, the first delivery of a lifted_up event that reaches it prints
// "<POINT> <document id> <job id>" and freezes there until the parent
// kills the process with SIGKILL.
func TestOrchestratorChild(t *testing.T) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		t.Skip("runs only as the child process of TestKilledOrchestratorStartsOneAnalysis")
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(raw), &env); err != nil {
		t.Fatal(err)
	}
	var cfg orchestrator.Config
	if err := config.Load("", &cfg, config.Map(env)); err != nil {
		t.Fatal(err)
	}
	if at := os.Getenv(childCrashAt); at != "" {
		handoff.SetTestHook(func(point, documentID, jobID string) {
			if point == at {
				fmt.Printf("%s %s %s\n", strings.ToUpper(point), documentID, jobID)
				select {} // frozen here until killed
			}
		})
	}
	svc := testkit.StartService(t, "orchestrator", func(ctx context.Context, rt service.Runtime) error {
		return orchestrator.Run(ctx, &cfg, rt)
	})
	fmt.Printf("ADDR %s\n", svc.Addr)
	select {} // until killed
}

// TestKilledOrchestratorStartsOneAnalysis: the real indexer routes a log
// with errors LIFT_UP; the orchestrator process that receives the
// lifted_up event is killed with SIGKILL (kill -9) once it has received
// it, before it starts the analysis, or right after it started it and
// before the delivery is acknowledged; a new orchestrator process gets the
// event again (after the consumer's ack wait) and acknowledges it. Either
// way exactly one analysis exists for the document, under the job id the
// document shows, and its input names the document.
func TestKilledOrchestratorStartsOneAnalysis(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"received", "submitted"} {
		t.Run("killed at "+point, func(t *testing.T) {
			t.Parallel()
			natsURL := testkit.NewNATS(t).URL()
			down := chattest.UnreachableAddr(t)
			idxURI, idxDB := testkit.MongoURI(t)
			var idxCfg indexer.Config
			if err := config.Load("", &idxCfg, config.Map(map[string]string{
				"MONGO_URI": idxURI, "MONGO_DATABASE": idxDB, "NATS_URL": natsURL, "INDEXER_DATA_DIR": t.TempDir(),
				"INDEXER_LLM_EXTRACTION": "false", "INDEXER_QUALIFIER_MODEL_CALLS": "false", "MODELGATEWAY_ADDR": down, "VISION_ADDR": down,
			})); err != nil {
				t.Fatal(err)
			}
			idxAddr := testkit.RunService(t, "indexer", func(ctx context.Context, rt service.Runtime) error {
				return indexer.Run(ctx, &idxCfg, rt)
			})
			orchURI, orchDB := testkit.MongoURI(t)
			env, err := json.Marshal(map[string]string{
				"MONGO_URI": orchURI, "MONGO_DATABASE": orchDB, "NATS_URL": natsURL, "MODELGATEWAY_ADDR": down, "INDEXER_ADDR": idxAddr,
			})
			if err != nil {
				t.Fatal(err)
			}
			first := testkit.StartChild(t, "TestOrchestratorChild", childEnv+"="+string(env), childCrashAt+"="+point)
			first.Next("ADDR ") // its consumer exists before the event does

			docs := indexerv1.NewDocumentServiceClient(dial(t, idxAddr))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sc := &commonv1.Scope{TenantId: "acme", ProjectId: "ops"}
			var log strings.Builder
			for i := range 40 {
				level := "INFO request ok"
				if i%10 == 9 {
					level = "ERROR ledger write failed code=LEDGER_TIMEOUT"
				}
				fmt.Fprintf(&log, "2024-03-12T08:14:%02dZ %s\n", i, level)
			}
			res, err := docs.IngestDocument(ctx, &indexerv1.IngestDocumentRequest{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_LOG,
				SourceUrl: "file:///var/log/ledger.log", Title: "ledger.log", RawContent: log.String()})
			if err != nil {
				t.Fatal(err)
			}
			docID := res.GetDocument().GetId()

			// The first process stops at the point, and is killed there.
			at := strings.Fields(first.Next(strings.ToUpper(point) + " "))
			killedAt := time.Now()
			first.Kill()
			if len(at) == 0 || at[0] != docID {
				t.Fatalf("the child stopped at %s for %v, want document %s", point, at, docID)
			}
			var doc *indexerv1.Document
			testkit.Eventually(t, 20*time.Second, func() bool {
				r, err := docs.GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: sc, DocumentId: docID})
				doc = r.GetDocument()
				return err == nil && doc.GetPipeline().GetFinished()
			}, "the intake pipeline finished")
			jobID := doc.GetLiftedJobId()
			if doc.GetRouting() != indexerv1.Routing_ROUTING_LIFT_UP || jobID == "" || doc.GetPipeline().GetRouting().GetLiftedJobId() != jobID {
				t.Fatalf("routing %v, lifted job %q (pipeline %v): want LIFT_UP naming a job", doc.GetRouting(), doc.GetLiftedJobId(), doc.GetPipeline().GetRouting())
			}
			if point == "submitted" && (len(at) != 2 || at[1] != jobID) {
				t.Errorf("the killed process started job %v, want the document's %s", at[1:], jobID)
			}
			// The server holds the delivery unacknowledged: the kill
			// fell before the ack.
			lifted := liftedConsumer(t, natsURL)
			if info := consumerInfo(t, lifted); info.Delivered.Consumer != 1 || info.NumAckPending != 1 || info.AckFloor.Consumer != 0 {
				t.Fatalf("at the kill: %d deliveries, %d unacknowledged, ack floor %d; want 1, 1, 0",
					info.Delivered.Consumer, info.NumAckPending, info.AckFloor.Consumer)
			}

			// A new process: the event comes again and is acknowledged.
			second := testkit.StartChild(t, "TestOrchestratorChild", childEnv+"="+string(env))
			jobs := orchestratorv1.NewJobServiceClient(dial(t, second.Next("ADDR ")))
			testkit.Eventually(t, 30*time.Second, func() bool {
				info := consumerInfo(t, lifted)
				return info.AckFloor.Consumer == 2 && info.NumAckPending == 0 && info.NumPending == 0
			}, "the event redelivered to the new process and acknowledged")
			if info := consumerInfo(t, lifted); info.Delivered.Consumer != 2 {
				t.Errorf("%d deliveries, want 2: the killed one and the new process's", info.Delivered.Consumer)
			}
			list, err := jobs.ListJobs(ctx, &orchestratorv1.ListJobsRequest{Scope: sc, Type: orchestratorv1.JobType_JOB_TYPE_ANALYSIS_REQUEST, PageSize: 10})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, j := range list.GetJobs() {
				ids = append(ids, j.GetId())
			}
			if len(ids) != 1 || ids[0] != jobID {
				t.Fatalf("analyses %v, want exactly the document's %s", ids, jobID)
			}
			job, err := jobs.GetJob(ctx, &orchestratorv1.GetJobRequest{Scope: sc, JobId: jobID})
			if err != nil {
				t.Fatal(err)
			}
			if got := job.GetJob().GetInput().GetFields()["document_id"].GetStringValue(); got != docID {
				t.Errorf("job %s names document %q, want %s", jobID, got, docID)
			}
			// Started once: by the killed process when it got that far,
			// and then not again (a second job under the same id would
			// list once, but be created after the kill).
			starter := "the new process"
			if point == "submitted" {
				starter = "the killed process"
			}
			if created := job.GetJob().GetCreateTime().AsTime(); (point == "submitted") != created.Before(killedAt) {
				t.Errorf("job %s created at %s, the first process killed at %s: want it created by %s",
					jobID, created.Format(time.StampMicro), killedAt.Format(time.StampMicro), starter)
			}
		})
	}
}

// dial is a client connection to addr, closed when t ends.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// liftedConsumer is the orchestrator's durable consumer of lifted_up
// events on the NATS server at url, as this test reads it.
func liftedConsumer(t *testing.T, url string) jetstream.Consumer {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, events.StreamEvents, handoff.Durable)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func consumerInfo(t *testing.T, c jetstream.Consumer) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}
