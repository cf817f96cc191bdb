package modelcalls_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/classifier/internal/conversations"
	"github.com/agentmesh/agentmesh/services/classifier/internal/meshtest"
	"github.com/agentmesh/agentmesh/services/classifier/internal/modelcalls"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

func client(t *testing.T) (*modelcalls.Client, *meshtest.Models) {
	t.Helper()
	m := meshtest.StartModels(t)
	conn, err := grpc.NewClient(m.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return modelcalls.New(modelv1.NewModelServiceClient(conn), "classifier", "chat", 10*time.Second), m
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// The plan call asks the classifier model for schema-constrained JSON and
// tells it the instruction, the earlier plans, the feedback and the
// allow-list.
func TestPlanRequestAndAnswer(t *testing.T) {
	t.Parallel()
	c, m := client(t)
	m.ScriptPlans(meshtest.NewPlan(7, map[string]any{"channel": "email"}))
	p, err := c.Plan(ctx(t), modelcalls.PlanInput{
		Instruction: "Classify refund tickets", Feedback: "only emails", ReplanReason: "the fetch failed: boom", Labelled: 3, MaxBatch: 10,
		Previous: []statemachine.Plan{{Strategy: "old", TargetSampleSize: 5, QueryJSON: `{"$where":"1"}`, Refused: "query.$where: not allowed"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.TargetSampleSize != 7 || p.QueryJSON != `{"channel":"email"}` || p.DetailsMarkdown == "" || p.AdditionalInstructions == "" {
		t.Errorf("plan %+v", p)
	}
	req, _ := m.Sim.LastRequest()
	if req.Model != "sim-classifier" || req.JSONMode != "json_schema" || req.Schema == nil {
		t.Errorf("request model %s mode %q schema %v", req.Model, req.JSONMode, req.Schema)
	}
	user := req.LastUserText()
	for _, want := range []string{"Classify refund tickets", "only emails", "the fetch failed: boom", "REFUSED: query.$where", "labelled so far in this run: 3"} {
		if !strings.Contains(user, want) {
			t.Errorf("plan prompt lacks %q:\n%s", want, user)
		}
	}
	if sys := req.Messages[0].Content; !strings.Contains(sys, "messages.text") || !strings.Contains(sys, "at most 10 conversations") {
		t.Errorf("system prompt lacks the allow-list or batch size:\n%s", sys)
	}
}

func TestClassifyAndSummarize(t *testing.T) {
	t.Parallel()
	c, m := client(t)
	sample, err := conversations.Sample()
	if err != nil {
		t.Fatal(err)
	}
	batch := sample[:2]
	m.ScriptClassifications([]string{batch[0].ID, batch[1].ID}, 2, map[string]string{batch[0].ID: "RESOLVED", batch[1].ID: "UNRESOLVED"})
	cls, err := c.Classify(ctx(t), &statemachine.Plan{AdditionalInstructions: "be strict"}, "classify", batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(cls) != 2 || cls[0].ConversationID != batch[0].ID || cls[1].Label != statemachine.Unresolved || cls[0].Reason == "" {
		t.Errorf("classifications %+v", cls)
	}
	req, _ := m.Sim.LastRequest()
	if !strings.Contains(req.Messages[0].Content, "be strict") || !strings.Contains(req.LastUserText(), batch[1].Messages[0].Text) {
		t.Errorf("classification prompt lacks the instructions or the conversation")
	}
	// The schema holds the model to the batch: its ids, one answer each.
	list, _ := req.Schema["properties"].(map[string]any)["classifications"].(map[string]any)
	id, _ := list["items"].(map[string]any)["properties"].(map[string]any)["id"].(map[string]any)
	if ids := fmt.Sprint(id["enum"]); ids != fmt.Sprint([]any{batch[0].ID, batch[1].ID}) || list["minItems"] != 2.0 || list["maxItems"] != 2.0 {
		t.Errorf("classification schema: ids %s, items %v..%v", ids, list["minItems"], list["maxItems"])
	}
	m.ScriptSummary("  ## Summary  ")
	text, err := c.Summarize(ctx(t), statemachine.Run{Instruction: "i", LabelledIDs: []string{"a"}, Resolved: 1},
		[]modelcalls.SummaryLabel{{ConversationID: "a", Label: "RESOLVED", Reason: "fixed"}})
	if err != nil || text != "## Summary" {
		t.Errorf("summary %q (%v)", text, err)
	}
	req, _ = m.Sim.LastRequest()
	if req.Model != "sim-chat" || req.JSONMode != "" || !strings.Contains(req.LastUserText(), "a: RESOLVED — fixed") {
		t.Errorf("summary request model %s mode %q", req.Model, req.JSONMode)
	}
}

func TestModelFailuresAreTyped(t *testing.T) {
	t.Parallel()
	c, m := client(t)
	m.Sim.When(providersim.Match{LastUserContains: modelcalls.PlanMarker}).Error(500, "provider down")
	if _, err := c.Plan(ctx(t), modelcalls.PlanInput{Instruction: "x"}); !errors.Is(err, modelcalls.ErrModel) {
		t.Errorf("provider failure: %v", err)
	}
	// An answer the gateway's schema check refuses (after its repair
	// attempt) is the model's answer, unusable: it counts as a model call.
	sample, err := conversations.Sample()
	if err != nil {
		t.Fatal(err)
	}
	m.ScriptUnusableClassifications()
	_, err = c.Classify(ctx(t), nil, "classify", sample[:2])
	if !errors.Is(err, modelcalls.ErrAnswer) || !strings.Contains(err.Error(), "classifications") {
		t.Errorf("refused answer: %v, want ErrAnswer naming what did not validate", err)
	}
}
