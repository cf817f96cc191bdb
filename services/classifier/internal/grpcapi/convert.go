package grpcapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

var stateToProto = map[statemachine.State]classifierv1.RunState{
	statemachine.Planning:              classifierv1.RunState_RUN_STATE_PLANNING,
	statemachine.Fetching:              classifierv1.RunState_RUN_STATE_FETCHING,
	statemachine.AwaitingFetchApproval: classifierv1.RunState_RUN_STATE_AWAITING_FETCH_APPROVAL,
	statemachine.Classifying:           classifierv1.RunState_RUN_STATE_CLASSIFYING,
	statemachine.AwaitingBatchApproval: classifierv1.RunState_RUN_STATE_AWAITING_BATCH_APPROVAL,
	statemachine.Saving:                classifierv1.RunState_RUN_STATE_SAVING,
	statemachine.Summarizing:           classifierv1.RunState_RUN_STATE_SUMMARIZING,
	statemachine.Completed:             classifierv1.RunState_RUN_STATE_COMPLETED,
	statemachine.Stopped:               classifierv1.RunState_RUN_STATE_STOPPED,
	statemachine.Error:                 classifierv1.RunState_RUN_STATE_ERROR,
}

// stateFromProto maps a RunState; UNSPECIFIED gives "".
func stateFromProto(s classifierv1.RunState) (statemachine.State, bool) {
	if s == classifierv1.RunState_RUN_STATE_UNSPECIFIED {
		return "", true
	}
	for k, v := range stateToProto {
		if v == s {
			return k, true
		}
	}
	return "", false
}

var commandFromProto = map[classifierv1.CommandType]statemachine.Command{
	classifierv1.CommandType_COMMAND_TYPE_APPROVE_FETCH: statemachine.ApproveFetch,
	classifierv1.CommandType_COMMAND_TYPE_REJECT_FETCH:  statemachine.RejectFetch,
	classifierv1.CommandType_COMMAND_TYPE_APPROVE_BATCH: statemachine.ApproveBatch,
	classifierv1.CommandType_COMMAND_TYPE_REJECT_BATCH:  statemachine.RejectBatch,
	classifierv1.CommandType_COMMAND_TYPE_STOP:          statemachine.Stop,
}

func labelToProto(l statemachine.Label) classifierv1.Label {
	switch l {
	case statemachine.Resolved:
		return classifierv1.Label_LABEL_RESOLVED
	case statemachine.Unresolved:
		return classifierv1.Label_LABEL_UNRESOLVED
	}
	return classifierv1.Label_LABEL_UNSPECIFIED
}

// queryStruct shows a plan's query as a Struct; text that is not a JSON
// object (which the validator refused) is shown under "_text".
func queryStruct(text string) *structpb.Struct {
	if strings.TrimSpace(text) == "" {
		return &structpb.Struct{}
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(text), &m); err == nil {
		if s, err := structpb.NewStruct(m); err == nil {
			return s
		}
	}
	s, _ := structpb.NewStruct(map[string]any{"_text": text})
	return s
}

// runToProto converts a decoded checkpoint.
func runToProto(rec checkpoint.Record) *classifierv1.Run {
	r := rec.Run
	out := &classifierv1.Run{
		Id:            r.ID,
		Scope:         &commonv1.Scope{TenantId: r.TenantID, ProjectId: r.ProjectID},
		Instruction:   r.Instruction,
		State:         stateToProto[r.State],
		FetchedIds:    r.FetchedIDs,
		LabelledCount: int32(len(r.LabelledIDs)),
		ModelCalls:    int32(r.ModelCalls),
		PlanCount:     int32(len(r.Plans)),
		Feedback:      r.Feedback,
		StopReason:    r.StopReason,
		Summary:       r.Summary,
		Version:       rec.Version,
		SchemaVersion: checkpoint.SchemaVersion,
	}
	if out.StopReason == "" && r.State == statemachine.Error {
		out.StopReason = r.ErrorMessage
	}
	for _, p := range r.Plans {
		out.Plans = append(out.Plans, &classifierv1.Plan{
			TargetSampleSize: int32(p.TargetSampleSize), Strategy: p.Strategy, DetailsMarkdown: p.DetailsMarkdown,
			AdditionalInstructions: p.AdditionalInstructions, Query: queryStruct(p.QueryJSON),
		})
	}
	for _, c := range r.PendingBatch {
		out.PendingBatch = append(out.PendingBatch, &classifierv1.Classification{
			ConversationId: c.ConversationID, Label: labelToProto(c.Label), Reason: c.Reason,
		})
	}
	if !r.CreateTime.IsZero() {
		out.CreateTime = timestamppb.New(r.CreateTime)
	}
	if !r.UpdateTime.IsZero() {
		out.UpdateTime = timestamppb.New(r.UpdateTime)
	}
	return out
}

// corruptToProto shows what can be read of an undecodable checkpoint.
func corruptToProto(scope *commonv1.Scope, c *checkpoint.CorruptError) *classifierv1.Run {
	out := &classifierv1.Run{Id: c.ID, Scope: scope, State: stateToProto[c.State], StopReason: c.StopReason, Version: c.Version}
	if out.StopReason == "" {
		out.StopReason = fmt.Sprintf("checkpoint cannot be decoded: %v; resuming or commanding the run stops it", c.Cause)
	}
	if !c.CreateTime.IsZero() {
		out.CreateTime = timestamppb.New(c.CreateTime)
	}
	if !c.UpdateTime.IsZero() {
		out.UpdateTime = timestamppb.New(c.UpdateTime)
	}
	return out
}

// asCorrupt extracts a *checkpoint.CorruptError.
func asCorrupt(err error) (*checkpoint.CorruptError, bool) {
	var c *checkpoint.CorruptError
	ok := errors.As(err, &c)
	return c, ok
}
