package jobservice_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

// Bad requests are InvalidArgument naming the field; ListJobs filters and
// pages newest first.
func TestAPIValidationAndListing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.sim.When(providersim.Match{WithTools: true}).Text("no tools")
	e.start(analysis.Hooks{})

	for _, tc := range []struct {
		name  string
		req   *orchestratorv1.SubmitAnalysisRequest
		field string
	}{
		{"no tenant", &orchestratorv1.SubmitAnalysisRequest{Query: "q"}, "scope.tenant_id"},
		{"no query", &orchestratorv1.SubmitAnalysisRequest{Scope: e.scope, Query: "  "}, "query"},
		{"unknown response type", &orchestratorv1.SubmitAnalysisRequest{Scope: e.scope, Query: "q", ResponseType: "poem"}, "response_type"},
		{"bad schema", &orchestratorv1.SubmitAnalysisRequest{Scope: e.scope, Query: "q", OutputJsonSchema: `{"type":"array"}`}, "output_json_schema"},
		{"schema and another response type", &orchestratorv1.SubmitAnalysisRequest{Scope: e.scope, Query: "q", OutputJsonSchema: `{"type":"object"}`, ResponseType: "stock_analysis"}, "response_type"},
		{"unknown tool", &orchestratorv1.SubmitAnalysisRequest{Scope: e.scope, Query: "q", AllowedTools: []string{"rm_rf"}}, "allowed_tools"},
	} {
		_, err := e.client.SubmitAnalysis(e.ctx(5*time.Second), tc.req)
		st := status.Convert(err)
		var field string
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
				field = br.GetFieldViolations()[0].GetField()
			}
		}
		if st.Code() != codes.InvalidArgument || field != tc.field {
			t.Errorf("%s: %v (field %q), want InvalidArgument on %s", tc.name, err, field, tc.field)
		}
	}
	// A caller's own schema goes with response_type empty or "custom"
	// (in another project, out of the listing below).
	ownSchema := &commonv1.Scope{TenantId: e.scope.GetTenantId(), ProjectId: "own-schema"}
	for _, rt := range []string{"", "custom"} {
		resp, err := e.client.SubmitAnalysis(e.ctx(5*time.Second), &orchestratorv1.SubmitAnalysisRequest{
			Scope: ownSchema, Query: "q", OutputJsonSchema: `{"type":"object"}`, ResponseType: rt})
		if got := resp.GetJob().GetInput().GetFields()["response_type"].GetStringValue(); err != nil || got != "custom" {
			t.Errorf("own schema with response_type %q: %v (response_type %q)", rt, err, got)
		}
	}
	if _, err := e.client.GetJob(e.ctx(5*time.Second), &orchestratorv1.GetJobRequest{Scope: e.scope, JobId: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetJob(nope) = %v", err)
	}

	var ids []string
	for i := range 3 {
		ids = append(ids, e.submit(strings.Repeat("q", i+1), "").GetId())
	}
	for _, id := range ids {
		e.waitStatus(id, failed, 20*time.Second)
	}
	list := func(req *orchestratorv1.ListJobsRequest) *orchestratorv1.ListJobsResponse {
		t.Helper()
		req.Scope = e.scope
		resp, err := e.client.ListJobs(e.ctx(5*time.Second), req)
		if err != nil {
			t.Fatalf("ListJobs: %v", err)
		}
		return resp
	}
	var got []string
	req := &orchestratorv1.ListJobsRequest{Type: orchestratorv1.JobType_JOB_TYPE_ANALYSIS_REQUEST, PageSize: 2}
	for {
		resp := list(req)
		for _, j := range resp.GetJobs() {
			got = append(got, j.GetId())
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if strings.Join(got, ",") != strings.Join([]string{ids[2], ids[1], ids[0]}, ",") {
		t.Errorf("analyses newest first = %v, want %v reversed", got, ids)
	}
	if n := len(list(&orchestratorv1.ListJobsRequest{ParentId: ids[0]}).GetJobs()); n != 1 {
		t.Errorf("children of %s: %d, want the planning job", ids[0], n)
	}
	if n := len(list(&orchestratorv1.ListJobsRequest{Status: failed, Type: typePlanning}).GetJobs()); n != 3 {
		t.Errorf("failed planning jobs: %d", n)
	}
	_, err := e.client.ListJobs(e.ctx(5*time.Second), &orchestratorv1.ListJobsRequest{Scope: e.scope, PageToken: req.GetPageToken(), Status: complete})
	if req.GetPageToken() != "" && status.Code(err) != codes.InvalidArgument {
		t.Errorf("page token reused with another filter: %v", err)
	}
	// Keys name no scope in the request: the gateway sends the key's. A
	// token one key was given is refused when another key's scope replays
	// it.
	asKey := func(tenant, project string) context.Context {
		return metadata.AppendToOutgoingContext(e.ctx(5*time.Second), grpcx.TenantMetadataKey, tenant, grpcx.ProjectMetadataKey, project)
	}
	first, err := e.client.ListJobs(asKey(e.scope.GetTenantId(), e.scope.GetProjectId()), &orchestratorv1.ListJobsRequest{PageSize: 1})
	if err != nil || first.GetNextPageToken() == "" {
		t.Fatalf("ListJobs as the key's scope: %v (token %q)", err, first.GetNextPageToken())
	}
	for _, other := range [][2]string{{"intruder", ""}, {e.scope.GetTenantId(), "other-project"}} {
		_, err := e.client.ListJobs(asKey(other[0], other[1]), &orchestratorv1.ListJobsRequest{PageToken: first.GetNextPageToken()})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("page token replayed by scope %v: %v, want InvalidArgument", other, err)
		}
	}
}

// TestResentSubmissionStartsOneAnalysis: a client whose answer to a
// submission was lost sends it again under its request_id: every repeat,
// concurrent or after the analysis ended, answers with the one analysis
// the first created, which planned once; the same request_id asking for
// something else is refused; another scope's request_id is its own.
func TestResentSubmissionStartsOneAnalysis(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plan := e.sim.When(providersim.Match{WithTools: true, LastRole: "user", LastUserContains: "BHP"}).Named("plan").
		Delay(300*time.Millisecond).ToolCall("get_stock_price", map[string]any{"ticker": "BHP"})
	e.scriptSynthesis(stockAnswer)
	e.start(analysis.Hooks{})

	req := &orchestratorv1.SubmitAnalysisRequest{Scope: e.scope, Query: "How is BHP doing?", ResponseType: "stock_analysis", RequestId: "req-7f3c"}
	ids := make(chan string, 5)
	for range cap(ids) {
		go func() {
			resp, err := e.client.SubmitAnalysis(e.ctx(10*time.Second), req)
			if err != nil {
				t.Error(err)
				ids <- ""
				return
			}
			ids <- resp.GetJob().GetId()
		}()
	}
	first := <-ids
	for range cap(ids) - 1 {
		if id := <-ids; id != first || id == "" {
			t.Fatalf("concurrent repeats of one request answered %q and %q", first, id)
		}
	}
	if first != analysis.RequestJobID("acme", "research", "req-7f3c") {
		t.Errorf("analysis id %s is not derived from the request id", first)
	}
	e.waitStatus(first, complete, 20*time.Second)
	again, err := e.client.SubmitAnalysis(e.ctx(10*time.Second), req)
	if err != nil || again.GetJob().GetId() != first || again.GetJob().GetStatus() != complete {
		t.Fatalf("repeat after the end: %v, %v; want analysis %s, complete", again.GetJob(), err, first)
	}
	if n := plan.Hits(); n != 1 {
		t.Errorf("the planner was called %d times for one request", n)
	}

	other := &orchestratorv1.SubmitAnalysisRequest{Scope: e.scope, Query: "How is RIO doing?", RequestId: "req-7f3c"}
	_, err = e.client.SubmitAnalysis(e.ctx(5*time.Second), other)
	st := status.Convert(err)
	var reason string
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.GetReason()
		}
	}
	if st.Code() != codes.AlreadyExists || reason != "REQUEST_ID_REUSED" || !strings.Contains(st.Message(), "request_id") {
		t.Errorf("the request id reused for another query: %v (reason %q), want AlreadyExists REQUEST_ID_REUSED", err, reason)
	}

	elsewhere := &orchestratorv1.SubmitAnalysisRequest{Scope: &commonv1.Scope{TenantId: "acme", ProjectId: "ops"}, Query: "How is BHP doing?", RequestId: "req-7f3c"}
	resp, err := e.client.SubmitAnalysis(e.ctx(5*time.Second), elsewhere)
	if err != nil || resp.GetJob().GetId() == first {
		t.Errorf("the same request id in another project: %v, %v; want an analysis of its own", resp.GetJob().GetId(), err)
	}
}
