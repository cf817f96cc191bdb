package httpgateway

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
)

// Every state of the contract has the name the original agent's AgentState
// gives it, and those are exactly the names the original lists.
func TestSeedStatesNameEveryRunState(t *testing.T) {
	t.Parallel()
	// The states of the classification agent's documentation (seed 002),
	// "sealed interface AgentState".
	original := []string{"Planning", "Fetching", "AwaitingFetchApproval", "Classifying", "AwaitingBatchApproval",
		"Saving", "Summarizing", "Completed", "Stopped", "Error"}
	var named []string
	for n := range classifierv1.RunState_name {
		s := classifierv1.RunState(n)
		name, ok := seedStates[s]
		if !ok {
			t.Errorf("%s has no AgentState name", s)
			continue
		}
		if s != classifierv1.RunState_RUN_STATE_UNSPECIFIED {
			named = append(named, name)
		}
	}
	slices.Sort(named)
	slices.Sort(original)
	if !slices.Equal(named, original) {
		t.Errorf("AgentState names %v, the original's %v", named, original)
	}
	if got := agentContextOf(&classifierv1.Run{State: classifierv1.RunState(99)}).State; got != "Unknown" {
		t.Errorf("a state newer than the gateway is %q", got)
	}
}

func TestAgentContextFields(t *testing.T) {
	t.Parallel()
	query, err := structpb.NewStruct(map[string]any{"channel": "chat"})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2025, 3, 1, 9, 30, 0, 0, time.UTC)
	run := &classifierv1.Run{
		Id: "r1", State: classifierv1.RunState_RUN_STATE_AWAITING_BATCH_APPROVAL, Instruction: "classify chats",
		Plans: []*classifierv1.Plan{
			{TargetSampleSize: 3},
			{TargetSampleSize: 6, Strategy: "id order", DetailsMarkdown: "## Plan", AdditionalInstructions: "be strict", Query: query},
		},
		FetchedIds:    []string{"c1", "c2"},
		PendingBatch:  []*classifierv1.Classification{{ConversationId: "c1", Label: classifierv1.Label_LABEL_UNRESOLVED, Reason: "no answer"}},
		LabelledCount: 4, ModelCalls: 5, PlanCount: 2, Feedback: "more email",
		CreateTime: timestamppb.New(created), UpdateTime: timestamppb.New(created.Add(time.Minute)),
	}
	b, err := json.Marshal(agentContextOf(run))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"runId": "r1", "state": "AwaitingBatchApproval", "totalConversationsClassified": 4.0, "targetSampleSize": 6.0,
		"plansCount": 2.0, "modelCallsCount": 5.0, "instruction": "classify chats",
		"currentPlan": map[string]any{"targetSampleSize": 6.0, "strategy": "id order", "planDetails": "## Plan",
			"additionalInstructions": "be strict", "query": map[string]any{"channel": "chat"}},
		"fetchedConversationIds": []any{"c1", "c2"},
		"pendingClassifications": []any{map[string]any{"id": "c1", "label": "UNRESOLVED", "reason": "no answer"}},
		"feedback":               "more email",
		"createTime":             "2025-03-01T09:30:00Z", "updateTime": "2025-03-01T09:31:00Z",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("AgentContext %s\nwant %v", b, want)
	}

	// Before its first plan a run still has every field a client reads.
	b, _ = json.Marshal(agentContextOf(&classifierv1.Run{Id: "r2", State: classifierv1.RunState_RUN_STATE_PLANNING}))
	got = nil
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"runId", "state", "totalConversationsClassified", "targetSampleSize", "plansCount"} {
		if _, ok := got[k]; !ok {
			t.Errorf("a new run's AgentContext lacks %s: %s", k, b)
		}
	}
}
