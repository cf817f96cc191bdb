package analysis

import (
	"encoding/json"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

// maxEventOutput bounds the output carried in an event payload; larger
// outputs are left out of events (GetJob returns them).
const maxEventOutput = 64 << 10

// typeToProto maps job types to the contract's enum.
var typeToProto = map[Type]orchestratorv1.JobType{
	TypeAnalysis:  orchestratorv1.JobType_JOB_TYPE_ANALYSIS_REQUEST,
	TypePlanning:  orchestratorv1.JobType_JOB_TYPE_PLANNING_CALL,
	TypeTool:      orchestratorv1.JobType_JOB_TYPE_TOOL_EXECUTION,
	TypeSynthesis: orchestratorv1.JobType_JOB_TYPE_SYNTHESIS,
}

// statusToProto maps statuses to the contract's enum.
var statusToProto = map[Status]orchestratorv1.JobStatus{
	StatusPending:   orchestratorv1.JobStatus_JOB_STATUS_PENDING,
	StatusRunning:   orchestratorv1.JobStatus_JOB_STATUS_RUNNING,
	StatusWaiting:   orchestratorv1.JobStatus_JOB_STATUS_WAITING_FOR_CHILDREN,
	StatusComplete:  orchestratorv1.JobStatus_JOB_STATUS_COMPLETE,
	StatusFailed:    orchestratorv1.JobStatus_JOB_STATUS_FAILED,
	StatusCancelled: orchestratorv1.JobStatus_JOB_STATUS_CANCELLED,
}

// TypeFromProto maps the contract's enum to a type; "" for unspecified or
// unknown values.
func TypeFromProto(t orchestratorv1.JobType) Type {
	for k, v := range typeToProto {
		if v == t {
			return k
		}
	}
	return ""
}

// StatusFromProto maps the contract's enum to a status; "" for unspecified
// or unknown values.
func StatusFromProto(s orchestratorv1.JobStatus) Status {
	for k, v := range statusToProto {
		if v == s {
			return k
		}
	}
	return ""
}

// ToProto converts a job and its children (in order) to the contract's
// message.
func ToProto(j *Job, children []*Job) *orchestratorv1.Job {
	p := toProto(j, true)
	for _, c := range children {
		p.Children = append(p.Children, toProto(c, true))
	}
	return p
}

func toProto(j *Job, withOutput bool) *orchestratorv1.Job {
	p := &orchestratorv1.Job{
		Id:             j.ID,
		ParentId:       j.ParentID,
		Type:           typeToProto[j.Type],
		Status:         statusToProto[j.Status],
		Scope:          &commonv1.Scope{TenantId: j.Tenant, ProjectId: j.Project},
		Title:          j.Title,
		ToolName:       j.ToolName,
		Input:          jsonStruct(j.InputJSON),
		Error:          j.Error,
		Attempts:       j.Attempts,
		IdempotencyKey: j.IdempotencyKey,
		CreateTime:     timestamppb.New(j.CreateTime),
	}
	if withOutput {
		p.Output = jsonStruct(j.OutputJSON)
	}
	if j.StartTime != nil {
		p.StartTime = timestamppb.New(*j.StartTime)
	}
	if j.EndTime != nil {
		p.EndTime = timestamppb.New(*j.EndTime)
	}
	return p
}

// eventJob is the job as an event carries it: no children, and no output
// beyond maxEventOutput.
func eventJob(j *Job) *orchestratorv1.Job {
	return toProto(j, len(j.OutputJSON) <= maxEventOutput)
}

// jsonStruct decodes a JSON object text into a Struct; nil when empty or
// not an object.
func jsonStruct(text string) *structpb.Struct {
	if text == "" {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(text), &m); err != nil || m == nil {
		return nil
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		return nil
	}
	return s
}

// mustJSON encodes v, which is always encodable here (maps of plain values).
func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return `{"error":"unencodable value"}`
	}
	return string(b)
}
