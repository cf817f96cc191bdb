package httpgateway

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
)

// seedRunPattern is the route of the original classification agent's
// "Get Run Status", which answers with its AgentContext JSON rather than
// GetRunResponse.
const seedRunPattern = "/agents/classificationAgent/runs/{run_id}"

// seedStates names every run state as the original agent's AgentState
// does. A checkpoint whose state cannot be read (UNSPECIFIED) is "Unknown",
// a name the original does not have.
var seedStates = map[classifierv1.RunState]string{
	classifierv1.RunState_RUN_STATE_UNSPECIFIED:             "Unknown",
	classifierv1.RunState_RUN_STATE_PLANNING:                "Planning",
	classifierv1.RunState_RUN_STATE_FETCHING:                "Fetching",
	classifierv1.RunState_RUN_STATE_AWAITING_FETCH_APPROVAL: "AwaitingFetchApproval",
	classifierv1.RunState_RUN_STATE_CLASSIFYING:             "Classifying",
	classifierv1.RunState_RUN_STATE_AWAITING_BATCH_APPROVAL: "AwaitingBatchApproval",
	classifierv1.RunState_RUN_STATE_SAVING:                  "Saving",
	classifierv1.RunState_RUN_STATE_SUMMARIZING:             "Summarizing",
	classifierv1.RunState_RUN_STATE_COMPLETED:               "Completed",
	classifierv1.RunState_RUN_STATE_STOPPED:                 "Stopped",
	classifierv1.RunState_RUN_STATE_ERROR:                   "Error",
}

// agentContext is the original agent's AgentContext as its clients read
// it: runId, state (an AgentState name), totalConversationsClassified,
// targetSampleSize and plansCount always, then the other context fields a
// run has, named as the agent's events name them.
type agentContext struct {
	RunID                        string `json:"runId"`
	State                        string `json:"state"`
	TotalConversationsClassified int32  `json:"totalConversationsClassified"`
	// TargetSampleSize is the current (last) plan's; 0 before the first.
	TargetSampleSize int32 `json:"targetSampleSize"`
	// PlansCount counts every plan made, refused and rejected ones included.
	PlansCount      int32  `json:"plansCount"`
	ModelCallsCount int32  `json:"modelCallsCount"`
	Instruction     string `json:"instruction,omitempty"`
	// CurrentPlan is shaped as the plan of agent.run.awaiting_fetch_approval.
	CurrentPlan            *seedPlan   `json:"currentPlan,omitempty"`
	FetchedConversationIDs []string    `json:"fetchedConversationIds,omitempty"`
	PendingClassifications []seedLabel `json:"pendingClassifications,omitempty"`
	Feedback               string      `json:"feedback,omitempty"`
	// StopReason says why the run stopped or failed.
	StopReason string `json:"stopReason,omitempty"`
	Summary    string `json:"summary,omitempty"`
	CreateTime string `json:"createTime,omitempty"`
	UpdateTime string `json:"updateTime,omitempty"`
}

// seedPlan is a plan as agent.run.awaiting_fetch_approval shows it.
type seedPlan struct {
	TargetSampleSize       int32           `json:"targetSampleSize"`
	Strategy               string          `json:"strategy,omitempty"`
	PlanDetails            string          `json:"planDetails,omitempty"`
	AdditionalInstructions string          `json:"additionalInstructions,omitempty"`
	Query                  json.RawMessage `json:"query,omitempty"`
}

// seedLabel is a classification as agent.run.awaiting_batch_approval shows
// it, with the model's reason.
type seedLabel struct {
	ID     string `json:"id"`
	Label  string `json:"label"`
	Reason string `json:"reason,omitempty"`
}

// agentContextOf renders a run as the original agent's AgentContext.
func agentContextOf(r *classifierv1.Run) agentContext {
	c := agentContext{
		RunID:                        r.GetId(),
		State:                        seedStates[r.GetState()],
		TotalConversationsClassified: r.GetLabelledCount(),
		PlansCount:                   r.GetPlanCount(),
		ModelCallsCount:              r.GetModelCalls(),
		Instruction:                  r.GetInstruction(),
		FetchedConversationIDs:       r.GetFetchedIds(),
		Feedback:                     r.GetFeedback(),
		StopReason:                   r.GetStopReason(),
		Summary:                      r.GetSummary(),
	}
	if c.State == "" {
		c.State = seedStates[classifierv1.RunState_RUN_STATE_UNSPECIFIED] // a state newer than this gateway
	}
	if plans := r.GetPlans(); len(plans) > 0 {
		p := plans[len(plans)-1]
		c.TargetSampleSize = p.GetTargetSampleSize()
		c.CurrentPlan = &seedPlan{
			TargetSampleSize: p.GetTargetSampleSize(), Strategy: p.GetStrategy(), PlanDetails: p.GetDetailsMarkdown(),
			AdditionalInstructions: p.GetAdditionalInstructions(),
		}
		if q := p.GetQuery(); q != nil {
			if b, err := jsonOptions.Marshal(q); err == nil {
				c.CurrentPlan.Query = b
			}
		}
	}
	for _, l := range r.GetPendingBatch() {
		c.PendingClassifications = append(c.PendingClassifications, seedLabel{
			ID: l.GetConversationId(), Label: strings.TrimPrefix(l.GetLabel().String(), "LABEL_"), Reason: l.GetReason(),
		})
	}
	if t := r.GetCreateTime(); t != nil {
		c.CreateTime = t.AsTime().Format(time.RFC3339Nano)
	}
	if t := r.GetUpdateTime(); t != nil {
		c.UpdateTime = t.AsTime().Format(time.RFC3339Nano)
	}
	return c
}

// seedResponses is the ServeMux's response rewriter: on the original
// agent's status route a GetRunResponse becomes the AgentContext; every
// other response passes unchanged. Errors, authentication and tenant
// scoping are the route's own (another tenant's run is a 404 like an
// unknown one).
func seedResponses(ctx context.Context, resp proto.Message) (any, error) {
	if gr, ok := resp.(*classifierv1.GetRunResponse); ok {
		if pattern, _ := runtime.HTTPPathPattern(ctx); pattern == seedRunPattern {
			return agentContextOf(gr.GetRun()), nil
		}
	}
	return resp, nil
}
