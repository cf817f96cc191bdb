package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"

	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

// SubmitInput is submit_analysis' arguments.
type SubmitInput struct {
	Query        string   `json:"query" jsonschema:"the question to analyse"`
	ResponseType string   `json:"response_type,omitempty" jsonschema:"registered output schema, e.g. stock_analysis; default generic_analysis"`
	AllowedTools []string `json:"allowed_tools,omitempty" jsonschema:"tools the planner may use; default all"`
	RequestID    string   `json:"request_id,omitempty" jsonschema:"your id for this submission (at most 128 characters): sent again with the same request_id it returns the analysis the first call started, never a second one"`
}

// SubmitOutput is submit_analysis' result.
type SubmitOutput struct {
	JobID  string `json:"job_id"`
	Status string `json:"status"`
}

// GetJobInput is get_job's arguments.
type GetJobInput struct {
	JobID string `json:"job_id" jsonschema:"the id submit_analysis returned"`
}

// GetJobOutput is get_job's result: the job tree as the REST API shows it.
type GetJobOutput struct {
	Status string         `json:"status"`
	Job    map[string]any `json:"job"`
}

func (t *tools) addJobTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:  "submit_analysis",
		Title: "Submit an analysis",
		Description: "Start an analysis: a planning model chooses tools, each tool runs as its own job, and a synthesis " +
			"answers from their results only, with data_gaps for what they could not provide. Returns the job id; " +
			"call get_job until its status is JOB_STATUS_COMPLETE (output holds the answer) or JOB_STATUS_FAILED.",
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(false), DestructiveHint: ptr(false)},
	}, t.submitAnalysis)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "get_job",
		Title:       "Get an analysis job",
		Description: "Get an analysis job with its tree of planning, tool and synthesis jobs, their status, output and errors.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, t.getJob)
}

func (t *tools) submitAnalysis(ctx context.Context, _ *mcp.CallToolRequest, in SubmitInput) (*mcp.CallToolResult, SubmitOutput, error) {
	if err := required("query", in.Query); err != nil {
		return nil, SubmitOutput{}, err
	}
	ctx, scope, err := t.callScope(ctx)
	if err != nil {
		return nil, SubmitOutput{}, err
	}
	resp, err := t.jobs.SubmitAnalysis(ctx, &orchestratorv1.SubmitAnalysisRequest{
		Scope: scope, Query: in.Query, ResponseType: in.ResponseType, AllowedTools: in.AllowedTools, RequestId: in.RequestID,
	})
	if err != nil {
		return nil, SubmitOutput{}, serviceError("submit analysis", err)
	}
	return nil, SubmitOutput{JobID: resp.GetJob().GetId(), Status: resp.GetJob().GetStatus().String()}, nil
}

func (t *tools) getJob(ctx context.Context, _ *mcp.CallToolRequest, in GetJobInput) (*mcp.CallToolResult, GetJobOutput, error) {
	if err := required("job_id", in.JobID); err != nil {
		return nil, GetJobOutput{}, err
	}
	ctx, scope, err := t.callScope(ctx)
	if err != nil {
		return nil, GetJobOutput{}, err
	}
	resp, err := t.jobs.GetJob(ctx, &orchestratorv1.GetJobRequest{Scope: scope, JobId: in.JobID})
	if err != nil {
		return nil, GetJobOutput{}, serviceError("get job", err)
	}
	// The REST API's JSON (lowerCamelCase, enums by name), which clients
	// that also use the REST API already read.
	b, err := protojson.Marshal(resp.GetJob())
	if err != nil {
		return nil, GetJobOutput{}, fmt.Errorf("encode job: %w", err)
	}
	var job map[string]any
	if err := json.Unmarshal(b, &job); err != nil {
		return nil, GetJobOutput{}, fmt.Errorf("encode job: %w", err)
	}
	return nil, GetJobOutput{Status: resp.GetJob().GetStatus().String(), Job: job}, nil
}
