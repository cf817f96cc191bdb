package classifycli_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentmesh/agentmesh/libs/config"
	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/classifier"
	"github.com/agentmesh/agentmesh/services/classifier/classifycli"
	"github.com/agentmesh/agentmesh/services/classifier/internal/conversations"
	"github.com/agentmesh/agentmesh/services/classifier/internal/meshtest"
)

var scope = &commonv1.Scope{TenantId: "acme"}

// startClassifier runs the real classifier (and model gateway over the
// simulator) and returns a client.
func startClassifier(t *testing.T, env map[string]string) (classifierv1.ClassifierServiceClient, *meshtest.Models) {
	t.Helper()
	models := meshtest.StartModels(t)
	uri, db := testkit.MongoURI(t)
	vars := map[string]string{
		"MONGO_URI": uri, "MONGO_DATABASE": db, "NATS_URL": testkit.NewNATS(t).URL(), "MODELGATEWAY_ADDR": models.Addr,
		"CLASSIFIER_MAX_BATCH": "4", "CLASSIFIER_BATCH_SIZE": "2",
	}
	for k, v := range env {
		vars[k] = v
	}
	var cfg classifier.Config
	if err := config.Load("", &cfg, config.Map(vars)); err != nil {
		t.Fatal(err)
	}
	addr := testkit.RunService(t, "classifier", func(ctx context.Context, rt service.Runtime) error {
		return classifier.Run(ctx, &cfg, rt)
	})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return classifierv1.NewClassifierServiceClient(conn), models
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// Rejected lines are reported with their line in the file, across chunks.
func TestImportReportsFileLines(t *testing.T) {
	t.Parallel()
	client, _ := startClassifier(t, nil)
	var file strings.Builder
	for i := 1; i <= 7; i++ {
		switch i {
		case 3:
			file.WriteString("{not json}\n")
		case 6:
			file.WriteString(`{"id":"c6","messages":[{"role":"robot","text":"x"}]}` + "\n")
		default:
			fmt.Fprintf(&file, `{"id":"c%d","messages":[{"role":"customer","text":"hello %d"}]}`+"\n", i, i)
		}
	}
	var out bytes.Buffer
	res, err := classifycli.Import(ctx(t), client, classifycli.ImportOptions{Scope: scope, ChunkLines: 2, Name: "convs.jsonl"}, strings.NewReader(file.String()), &out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Imported != 5 || len(res.Rejected) != 2 || res.Rejected[0].Line != 3 || res.Rejected[1].Line != 6 {
		t.Errorf("result %+v", res)
	}
	for _, want := range []string{"Imported 5 conversations from convs.jsonl; 2 lines rejected:", "line 3: invalid JSON", `line 6: messages[0].role: "robot"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// A whole run from the terminal: the fetch is rejected with feedback,
// then approved, batches approved, with a progress bar to 100%.
func TestDriveWithPrompts(t *testing.T) {
	t.Parallel()
	client, models := startClassifier(t, nil)
	sample, err := conversations.Sample()
	if err != nil {
		t.Fatal(err)
	}
	var jsonl strings.Builder
	var ids []string
	labels := map[string]string{}
	for _, c := range sample {
		b, _ := protojsonMarshal(c)
		jsonl.Write(b)
		jsonl.WriteByte('\n')
		ids = append(ids, c.ID)
		labels[c.ID] = "RESOLVED"
	}
	if _, err := classifycli.Import(ctx(t), client, classifycli.ImportOptions{Scope: scope}, strings.NewReader(jsonl.String()), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	models.ScriptPlans(meshtest.NewPlan(4, map[string]any{"channel": "phone"}), meshtest.NewPlan(4, nil))
	models.ScriptClassifications(ids, 2, labels)
	models.ScriptSummary("All four conversations were resolved.")

	in := strings.NewReader("maybe\nr\nuse every channel\na\na\na\n")
	var out bytes.Buffer
	run, err := classifycli.Drive(ctx(t), client, classifycli.DriveOptions{Scope: scope, Instruction: "Classify four conversations"}, in, &out)
	if err != nil {
		t.Fatalf("Drive: %v\n%s", err, out.String())
	}
	if run.GetState() != classifierv1.RunState_RUN_STATE_COMPLETED || run.GetLabelledCount() != 4 {
		t.Fatalf("run %s with %d labels\n%s", run.GetState(), run.GetLabelledCount(), out.String())
	}
	text := out.String()
	for _, want := range []string{
		"Run " + run.GetId(),
		`Query: {"channel":"phone"}`,
		"Approve the fetched conversations? [a]pprove / [r]eject with feedback / [s]top:",
		"Please answer a, r or s.",
		"Feedback for the next plan:",
		"Approve this batch?",
		"[##########----------]  50%  2/4 classified",
		"[####################] 100%  4/4 classified",
		"All four conversations were resolved.",
		"• Classification completed! 4 conversations classified.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if calls := models.Calls(); len(calls.Plans) != 2 || !strings.Contains(calls.Plans[1].LastUserText(), "use every channel") {
		t.Errorf("the typed feedback did not reach the second plan")
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("output:\n%s", text)
	}
}

// When the input ends at a prompt, the run waits and Drive says how to
// resume; resuming with AutoApprove finishes it.
func TestDriveInputClosedThenResume(t *testing.T) {
	t.Parallel()
	client, models := startClassifier(t, nil)
	sample, _ := conversations.Sample()
	req := &classifierv1.ImportConversationsRequest{Scope: scope}
	var ids []string
	labels := map[string]string{}
	for _, c := range sample {
		req.Conversations = append(req.Conversations, c.Proto())
		ids = append(ids, c.ID)
		labels[c.ID] = "UNRESOLVED"
	}
	if _, err := client.ImportConversations(ctx(t), req); err != nil {
		t.Fatal(err)
	}
	models.ScriptPlans(meshtest.NewPlan(2, nil))
	models.ScriptClassifications(ids, 2, labels)
	models.ScriptSummary("done")
	var out bytes.Buffer
	run, err := classifycli.Drive(ctx(t), client, classifycli.DriveOptions{Scope: scope, Instruction: "Classify two"}, strings.NewReader(""), &out)
	if !errors.Is(err, classifycli.ErrInputClosed) || run.GetState() != classifierv1.RunState_RUN_STATE_AWAITING_FETCH_APPROVAL ||
		!strings.Contains(err.Error(), "agentmesh classify resume "+run.GetId()) {
		t.Fatalf("Drive with no input: %v, run %v", err, run)
	}
	out.Reset()
	run, err = classifycli.Drive(ctx(t), client, classifycli.DriveOptions{Scope: scope, RunID: run.GetId(), AutoApprove: true}, strings.NewReader(""), &out)
	if err != nil || run.GetState() != classifierv1.RunState_RUN_STATE_COMPLETED {
		t.Fatalf("resumed Drive: %v, %v\n%s", err, run.GetState(), out.String())
	}
	if !strings.Contains(out.String(), "Agent resumed from checkpoint") || !strings.Contains(out.String(), "(auto-approve)") {
		t.Errorf("output:\n%s", out.String())
	}
}
