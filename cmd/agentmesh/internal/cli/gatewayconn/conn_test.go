package gatewayconn

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/agentmesh/agentmesh/gateway/openapi"
	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
)

// TestEveryMethodHasARoute: every method of the services the CLI uses
// resolves to a route of the gateway's OpenAPI document, and a method with
// two bindings takes the /v1/ one (the other answers in the original
// classification agent's shape).
func TestEveryMethodHasARoute(t *testing.T) {
	t.Parallel()
	c, err := New(Options{URL: "http://localhost:8080", Spec: openapi.Spec})
	if err != nil {
		t.Fatal(err)
	}
	for _, sd := range []protoreflect.ServiceDescriptor{
		orchestratorv1.File_agentmesh_orchestrator_v1_job_proto.Services().ByName("JobService"),
		orchestratorv1.File_agentmesh_orchestrator_v1_conversation_proto.Services().ByName("ConversationService"),
		indexerv1.File_agentmesh_indexer_v1_document_proto.Services().ByName("DocumentService"),
		indexerv1.File_agentmesh_indexer_v1_search_proto.Services().ByName("SearchService"),
		classifierv1.File_agentmesh_classifier_v1_classifier_proto.Services().ByName("ClassifierService"),
		sqlagentv1.File_agentmesh_sqlagent_v1_sqlagent_proto.Services().ByName("SqlAgentService"),
		modelv1.File_agentmesh_model_v1_model_proto.Services().ByName("ModelService"),
	} {
		for i := range sd.Methods().Len() {
			md := sd.Methods().Get(i)
			full := "/" + string(sd.FullName()) + "/" + string(md.Name())
			if _, err := c.routeOf(full); err != nil {
				t.Errorf("%s: %v", full, err)
			}
		}
	}
	r, _ := c.routeOf("/agentmesh.classifier.v1.ClassifierService/GetRun")
	if r.path != "/v1/classifier/runs/{runId}" || r.method != "GET" || len(r.params) != 1 || r.params[0] != "runId" {
		t.Errorf("GetRun route %+v, want GET /v1/classifier/runs/{runId}", r)
	}
}

// TestPathValuesTravelEscapedOnce: a path value is escaped once; a SQL
// job id keeps its slash (its route's parameter spans segments), another
// value's slash is %2F inside its one segment.
func TestPathValuesTravelEscapedOnce(t *testing.T) {
	t.Parallel()
	c, err := New(Options{URL: "http://localhost:8080/mesh", Spec: openapi.Spec})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method string
		in     proto.Message
		want   string
	}{
		{"/agentmesh.sqlagent.v1.SqlAgentService/GetSqlJob", &sqlagentv1.GetSqlJobRequest{JobId: "5f0c 9%/4"},
			"http://localhost:8080/mesh/v1/sql/jobs/5f0c%209%25/4"},
		{"/agentmesh.orchestrator.v1.JobService/GetJob", &orchestratorv1.GetJobRequest{JobId: "a b/c%d"},
			"http://localhost:8080/mesh/v1/jobs/a%20b%2Fc%25d"},
	} {
		r, err := c.routeOf(tc.method)
		if err != nil {
			t.Fatal(err)
		}
		req, err := c.request(context.Background(), r, tc.in, "application/json")
		if err != nil {
			t.Fatal(err)
		}
		if got := req.URL.String(); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.method, got, tc.want)
		}
	}
}
