package gatewayconn

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/agentmesh/agentmesh/gateway/openapi"
	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
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

// TestErrorsKeepTheirReason: an error of the gateway reaches the CLI with
// its code, message and details, so that it can branch on the reason (a
// SQL confirmation refused with SESSION_CHANGED shows the session anew);
// a body that is not the gateway's shape is named by its HTTP status.
func TestErrorsKeepTheirReason(t *testing.T) {
	t.Parallel()
	answer := func(code int, body string) error {
		req := httptest.NewRequest(http.MethodPost, "http://gw/v1/sql/sessions/s1:input", nil)
		return httpError(&http.Response{StatusCode: code, Body: io.NopCloser(strings.NewReader(body)), Request: req})
	}
	err := answer(400, `{"code":9,"message":"expected_version: the session changed since version 4 (it is at 5)",`+
		`"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"SESSION_CHANGED","domain":"agentmesh"}]}`)
	if status.Code(err) != codes.FailedPrecondition || grpcx.Reason(err) != "SESSION_CHANGED" ||
		status.Convert(err).Message() != "expected_version: the session changed since version 4 (it is at 5)" {
		t.Errorf("gateway error: %v (reason %q)", err, grpcx.Reason(err))
	}
	err = answer(404, `{"code":5,"message":"session not found","details":[{"@type":"type.example.com/Unknown","x":1}]}`)
	if status.Code(err) != codes.NotFound || status.Convert(err).Message() != "session not found" {
		t.Errorf("a detail of an unknown type: %v, want the code and message kept", err)
	}
	err = answer(502, "<html>bad gateway</html>")
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "HTTP 502") {
		t.Errorf("a proxy's page: %v", err)
	}
	// Another server at the URL: not "not found" (exit 3), and its page on
	// one line.
	err = answer(404, "<!DOCTYPE HTML>\n<html>\n<head>\n<title>Error response</title>\n</head>\n</html>\n")
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "is the URL the gateway's?") || strings.Contains(err.Error(), "\n") {
		t.Errorf("another server's 404: %v", err)
	}
	if _, err := New(Options{URL: "http://127.0.0.1:8080/v1/", Spec: openapi.Spec}); err == nil || !strings.Contains(err.Error(), "without /v1 (http://127.0.0.1:8080)") {
		t.Errorf("a URL ending /v1: %v", err)
	}
}

// TestMessagesShowNoSecretsOfTheURL: a password or a query value of the
// gateway's URL (where a key may travel) is not repeated in messages.
func TestMessagesShowNoSecretsOfTheURL(t *testing.T) {
	t.Parallel()
	c, err := New(Options{URL: "http://user:secretpw@127.0.0.1:1/mesh?key=secretQ", Spec: openapi.Spec})
	if err != nil {
		t.Fatal(err)
	}
	msg := c.unreachable(errors.New("connection refused")).Error()
	if strings.Contains(msg, "secret") || !strings.Contains(msg, "http://user:xxxxx@127.0.0.1:1/mesh?key=") {
		t.Errorf("unreachable: %s", msg)
	}
	req := httptest.NewRequest(http.MethodGet, "http://user:secretpw@gw/v1/models?key=secretQ", nil)
	msg = httpError(&http.Response{StatusCode: 502, Body: io.NopCloser(strings.NewReader("bad gateway")), Request: req}).Error()
	if strings.Contains(msg, "secret") {
		t.Errorf("HTTP error: %s", msg)
	}
}

// TestStreamEventsKeepTheirSequence: an SSE event's id reaches the
// message's sequence whether the event names its kind (the chat stream's
// TurnStarted, ResponseChunk) or not (a job event), as over gRPC.
func TestStreamEventsKeepTheirSequence(t *testing.T) {
	t.Parallel()
	chat := &orchestratorv1.StreamMessageResponse{}
	if err := decodeEvent(event{id: "42", name: "TurnStarted", data: `{"turnId":"t1"}`}, chat); err != nil || chat.GetSequence() != 42 || chat.GetTurnStarted().GetTurnId() != "t1" {
		t.Errorf("chat event: %v, %v; want sequence 42 and the turn", chat, err)
	}
	job := &orchestratorv1.WatchJobResponse{}
	if err := decodeEvent(event{id: "7", data: `{"rootId":"j1"}`}, job); err != nil || job.GetSequence() != 7 || job.GetEvent().GetRootId() != "j1" {
		t.Errorf("job event: %v, %v; want sequence 7", job, err)
	}
}

// TestAStalledGatewayTimesOut: a gateway that accepts the connection and
// never answers fails the call as unavailable once the answer is late
// (the CLI exits 4), instead of holding it until it is interrupted.
func TestAStalledGatewayTimesOut(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // held open, never answered
		}
	}()
	c, err := New(Options{URL: "http://" + lis.Addr().String(), Spec: openapi.Spec, Client: newClient(300 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = c.Invoke(context.Background(), "/agentmesh.model.v1.ModelService/ListModels", &modelv1.ListModelsRequest{}, &modelv1.ListModelsResponse{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "cannot reach the gateway") || time.Since(start) > 5*time.Second {
		t.Fatalf("after %v: %v; want Unavailable after the response timeout", time.Since(start), err)
	}
}
