package httpgateway_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
)

type healthBody struct {
	Status   string `json:"status"`
	Services map[string]struct {
		Status       string            `json:"status"`
		Dependencies map[string]string `json:"dependencies"`
		Error        string            `json:"error"`
	} `json:"services"`
}

func getHealth(t *testing.T, url string) (int, healthBody) {
	t.Helper()
	resp, body := do(t, "GET", url, "", nil)
	var h healthBody
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatalf("not JSON: %s", body)
	}
	return resp.StatusCode, h
}

var services = []string{"modelgateway", "orchestrator", "vision", "indexer", "classifier", "sqlagent"}

func TestHealthzReportsEveryService(t *testing.T) {
	t.Parallel()
	m := startMesh(t, httpgateway.Config{HealthTimeout: time.Second}, fakes{})

	for _, path := range []string{"/healthz", "/readyz"} {
		code, h := getHealth(t, m.url+path)
		if code != http.StatusOK || h.Status != "SERVING" || len(h.Services) != len(services) {
			t.Fatalf("%s: %d %+v", path, code, h)
		}
		for _, s := range services {
			if got := h.Services[s]; got.Status != "SERVING" || got.Dependencies["mongo"] != "SERVING" {
				t.Errorf("%s: %s = %+v", path, s, got)
			}
		}
	}

	// The classifier's database goes down.
	m.servers["classifier"].Health().Set("mongo", errors.New("no reachable servers"))
	code, h := getHealth(t, m.url+"/healthz")
	if code != http.StatusServiceUnavailable || h.Status != "NOT_SERVING" {
		t.Fatalf("status %d %+v", code, h)
	}
	if c := h.Services["classifier"]; c.Status != "NOT_SERVING" || c.Dependencies["mongo"] != "NOT_SERVING" {
		t.Fatalf("classifier = %+v", c)
	}
	if o := h.Services["orchestrator"]; o.Status != "SERVING" {
		t.Fatalf("orchestrator = %+v", o)
	}
	// Readiness follows it; liveness does not.
	if code, _ := getHealth(t, m.url+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with the classifier's database down: %d, want 503", code)
	}
	if resp, body := do(t, "GET", m.url+"/livez", "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("/livez with the classifier's database down: %d %s", resp.StatusCode, body)
	}

	// The SQL agent stops altogether.
	m.stops["sqlagent"]()
	code, h = getHealth(t, m.url+"/healthz")
	if s := h.Services["sqlagent"]; code != http.StatusServiceUnavailable || s.Status != "NOT_SERVING" || s.Error == "" {
		t.Fatalf("status %d, sqlagent = %+v", code, s)
	}

	// Liveness is the gateway's own.
	if resp, body := do(t, "GET", m.url+"/livez", "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("/livez: %d %s", resp.StatusCode, body)
	}
}

// TestReadinessFollowsReadyServices: /readyz is 503 only for the services of
// GATEWAY_READY_SERVICES (all but vision by default, since vision waits for
// GPU nodes), while /healthz reports every one; a name that is no service's
// stops the start.
func TestReadinessFollowsReadyServices(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		ready []string
		want  int
	}{
		{"default: vision does not count", nil, http.StatusOK},
		{"vision listed", []string{"vision", "orchestrator"}, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := startMesh(t, httpgateway.Config{HealthTimeout: time.Second, ReadyServices: tc.ready}, fakes{})
			m.servers["vision"].Health().Set("mongo", errors.New("down"))
			if code, _ := getHealth(t, m.url+"/healthz"); code != http.StatusServiceUnavailable {
				t.Errorf("/healthz with vision down: %d, want 503", code)
			}
			if code, h := getHealth(t, m.url+"/readyz"); code != tc.want || h.Services["vision"].Status != "NOT_SERVING" {
				t.Errorf("/readyz with vision down: %d %+v, want %d and vision reported", code, h, tc.want)
			}
		})
	}
	m := startBackends(t, fakes{})
	_, err := httpgateway.Handler(&httpgateway.Config{ReadyServices: []string{"orchestrator", "visoin"}}, m.backends, nil, nil)
	if err == nil || !strings.Contains(err.Error(), `GATEWAY_READY_SERVICES: unknown service "visoin"`) {
		t.Fatalf("Handler with a misspelt ready service: %v", err)
	}
}

// TestRootRedirectsToTheConsole: a browser pointed at the gateway lands in
// the console; other unknown paths stay API 404s.
func TestRootRedirectsToTheConsole(t *testing.T) {
	t.Parallel()
	m := startBackends(t, fakes{})
	h, err := httpgateway.Handler(&httpgateway.Config{}, m.backends, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, location string
		code           int
	}{{"/", "/console/", http.StatusFound}, {"/nothing-here", "", http.StatusNotFound}} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
		if rec.Code != tc.code || rec.Header().Get("Location") != tc.location {
			t.Errorf("GET %s: %d Location %q, want %d %q", tc.path, rec.Code, rec.Header().Get("Location"), tc.code, tc.location)
		}
	}
}

func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	m := startMesh(t, httpgateway.Config{}, fakes{})
	resp, body := do(t, "GET", m.url+"/openapi.json", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var doc struct {
		Swagger string `json:"swagger"`
		Info    struct {
			Title string `json:"title"`
		} `json:"info"`
		SecurityDefinitions map[string]any            `json:"securityDefinitions"`
		Paths               map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if doc.Swagger != "2.0" || doc.Info.Title != "agentmesh API" || doc.SecurityDefinitions["bearer"] == nil {
		t.Errorf("swagger %q, title %q, security definitions %v", doc.Swagger, doc.Info.Title, doc.SecurityDefinitions)
	}
	for path, method := range map[string]string{
		"/v1/models":                              "get",
		"/v1/models:chat":                         "post",
		"/v1/models:chatStream":                   "post",
		"/agents/classificationAgent/runs":        "post",
		"/v1/jobs/{jobId}:watch":                  "get",
		"/v1/conversations/{conversationId}":      "get",
		"/v1/documents:upload":                    "post",
		"/v1/documents/{documentId}/intake:watch": "get",
	} {
		if _, ok := doc.Paths[path][method]; !ok {
			t.Errorf("no %s %s in the document", strings.ToUpper(method), path)
		}
	}
}

func TestMetricsServedWhenGiven(t *testing.T) {
	t.Parallel()
	m := startBackends(t, fakes{})
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("up 1\n")) })
	for _, tc := range []struct {
		handler http.Handler
		want    int
	}{{metrics, http.StatusOK}, {nil, http.StatusNotFound}} {
		h, err := httpgateway.Handler(&httpgateway.Config{}, m.backends, nil, tc.handler)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", "/metrics", nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("metrics handler %v: /metrics status %d, want %d", tc.handler != nil, rec.Code, tc.want)
		}
	}
}

func TestMetricsTakeAnOperatorKeyWhenKeysAreSet(t *testing.T) {
	t.Parallel()
	m := startBackends(t, fakes{})
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("up 1\n")) })
	h, err := httpgateway.Handler(&httpgateway.Config{APIKeys: "scrape-key=*,acme-key=acme,alpha-key=acme:alpha"}, m.backends, nil, metrics)
	if err != nil {
		t.Fatal(err)
	}
	// Metrics hold every tenant's usage and key names: a tenant's key,
	// tenant-wide or of a project, is refused.
	for _, tc := range []struct {
		key  string
		want int
	}{{"", http.StatusUnauthorized}, {"wrong", http.StatusUnauthorized}, {"acme-key", http.StatusForbidden}, {"alpha-key", http.StatusForbidden}, {"scrape-key", http.StatusOK}} {
		req, _ := http.NewRequest("GET", "/metrics", nil)
		if tc.key != "" {
			req.Header.Set("Authorization", "Bearer "+tc.key)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("key %q: /metrics status %d, want %d", tc.key, rec.Code, tc.want)
		}
	}
}
