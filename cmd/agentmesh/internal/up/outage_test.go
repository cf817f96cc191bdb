package up

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/outage"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// TestDatabaseOutageIsUnavailable: while the database process is down,
// every service that needs it answers Unavailable naming "mongo" (HTTP 503
// through the gateway, never 500), and once the database is back on the
// same files the same requests succeed, with no service restarted.
func TestDatabaseOutageIsUnavailable(t *testing.T) {
	mongoDir := t.TempDir()
	m, err := testkit.StartMongo(context.Background(), testkit.MongoOptions{Dir: mongoDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	mongoURL, err := url.Parse(m.URI())
	if err != nil {
		t.Fatal(err)
	}
	gw, _, _ := startMeshWith(t, t.TempDir(), map[string]string{
		"MONGO_URI":             m.URI(),
		"MONGO_CONNECT_TIMEOUT": "2s", // also how long a call waits for a server to select
		"MODELGATEWAY_PROVIDER": "sim",
		"SQLAGENT_SAMPLE_DB":    filepath.Join(t.TempDir(), "sample.db"),
	})
	waitServing(t, gw)

	requests := []struct{ name, path, body string }{
		{"orchestrator CreateConversation", "/v1/conversations", `{}`},
		{"indexer IngestDocument", "/v1/documents", `{"sourceType":"SOURCE_TYPE_TICKET","title":"t","rawContent":"the printer on floor 3 is jammed"}`},
		{"indexer Search", "/v1/search", `{"query":"printer"}`},
		{"sqlagent CreateSession", "/v1/sql/sessions", `{}`},
		{"classifier StartRun", "/agents/classificationAgent/runs", `{"instruction":"classify the last week"}`},
	}
	post := func(path, body string) (int, []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for _, r := range requests {
		if code, body := post(r.path, r.body); code != http.StatusOK {
			t.Fatalf("%s before the outage: HTTP %d %s", r.name, code, body)
		}
	}

	m.Stop()
	for _, r := range requests {
		code, body := post(r.path, r.body)
		var st struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Details []struct {
				Reason   string            `json:"reason"`
				Metadata map[string]string `json:"metadata"`
			} `json:"details"`
		}
		if err := json.Unmarshal(body, &st); err != nil {
			t.Errorf("%s during the outage: HTTP %d, body %s: %v", r.name, code, body, err)
			continue
		}
		if code != http.StatusServiceUnavailable || st.Code != int(codes.Unavailable) || len(st.Details) == 0 ||
			st.Details[0].Reason != outage.Reason || st.Details[0].Metadata["dependency"] != outage.Mongo {
			t.Errorf("%s during the outage: HTTP %d %s, want 503 with reason %s naming mongo", r.name, code, body, outage.Reason)
		}
		if strings.Contains(string(body), mongoURL.Host) {
			t.Errorf("%s during the outage: the answer names the database's address: %s", r.name, body)
		}
	}
	// The services answer gRPC clients the same.
	scope := &commonv1.Scope{TenantId: "default", ProjectId: "default"}
	orch, err := grpcx.Dial(lastAddrs["orchestrator"])
	if err != nil {
		t.Fatal(err)
	}
	defer orch.Close()
	_, err = orchestratorv1.NewConversationServiceClient(orch).CreateConversation(context.Background(), &orchestratorv1.CreateConversationRequest{Scope: scope})
	checkUnavailable(t, "orchestrator CreateConversation over gRPC", err)
	idx, err := grpcx.Dial(lastAddrs["indexer"])
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	_, err = indexerv1.NewDocumentServiceClient(idx).IngestDocument(context.Background(), &indexerv1.IngestDocumentRequest{
		Scope: scope, SourceType: indexerv1.SourceType_SOURCE_TYPE_TICKET, RawContent: "the printer on floor 3 is jammed again",
	})
	checkUnavailable(t, "indexer IngestDocument over gRPC", err)

	// Probes: readiness follows the database, liveness does not, so
	// Kubernetes takes the pods out of rotation without restarting them.
	probe := func(path string) int {
		resp, err := http.Get(gw + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testkit.Eventually(t, 30*time.Second, func() bool { return probe("/readyz") == http.StatusServiceUnavailable },
		"gateway /readyz is not 503 while the database is down")
	if code := probe("/livez"); code != http.StatusOK {
		t.Errorf("gateway /livez = %d while the database is down, want 200", code)
	}
	health := healthpb.NewHealthClient(orch)
	for _, tc := range []struct {
		service string
		want    healthpb.HealthCheckResponse_ServingStatus
	}{
		{"", healthpb.HealthCheckResponse_NOT_SERVING},                // readiness
		{grpcx.LivenessService, healthpb.HealthCheckResponse_SERVING}, // liveness
		{grpcx.DependencyPrefix + "mongo", healthpb.HealthCheckResponse_NOT_SERVING},
	} {
		r, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: tc.service})
		if err != nil || r.GetStatus() != tc.want {
			t.Errorf("orchestrator health %q = %v, %v during the outage; want %v", tc.service, r.GetStatus(), err, tc.want)
		}
	}
	t.Logf("database down: /readyz %d, /livez %d", probe("/readyz"), probe("/livez"))

	// The database comes back on the same files and address.
	m2, err := testkit.StartMongo(context.Background(), testkit.MongoOptions{Dir: mongoDir, Addr: mongoURL.Host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m2.Stop)
	for _, r := range requests {
		var last answer
		testkit.Eventually(t, 30*time.Second, func() bool {
			last.code, last.body = post(r.path, r.body)
			return last.code == http.StatusOK
		}, "%s after the database came back: %v", r.name, &last)
	}
	testkit.Eventually(t, 30*time.Second, func() bool { return probe("/readyz") == http.StatusOK },
		"gateway /readyz is not 200 once the database is back")
}

// checkUnavailable fails unless err is Unavailable with outage's reason.
func checkUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	if status.Code(err) != codes.Unavailable || grpcx.Reason(err) != outage.Reason {
		t.Errorf("%s during the outage: %v, want Unavailable with reason %s", what, err, outage.Reason)
	}
}

// answer is an HTTP answer, printed as status and body.
type answer struct {
	code int
	body []byte
}

func (a *answer) String() string { return fmt.Sprintf("HTTP %d %s", a.code, a.body) }
