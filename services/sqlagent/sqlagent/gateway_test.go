package sqlagent_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	"github.com/agentmesh/agentmesh/gateway/httpgateway/httpgatewaytest"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// restClient calls the real REST gateway with one tenant's API key.
type restClient struct {
	t         *testing.T
	base, key string
}

// call sends body (JSON, or none) and returns the status and the decoded
// JSON answer.
func (c restClient) call(method, path, body string) (int, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxTimeout(c.t), method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("X-API-Key", c.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]any{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			c.t.Fatalf("%s %s: %d, not JSON: %s", method, path, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, out
}

// want fails unless the call answers code, and, for an error, a message
// that names field (the services' errors start with it; the gateway's
// own, for a query parameter it cannot parse, quote it).
func (c restClient) want(method, path, body string, code int, field string) map[string]any {
	c.t.Helper()
	got, out := c.call(method, path, body)
	if got != code {
		c.t.Fatalf("%s %s %s: %d %v, want %d", method, path, body, got, out, code)
	}
	if msg, _ := out["message"].(string); field != "" && !strings.HasPrefix(msg, field) && !strings.Contains(msg, `"`+field+`"`) {
		c.t.Fatalf("%s %s %s: message %q does not name %q", method, path, body, msg, field)
	}
	return out
}

// dig reads a nested field of a decoded JSON answer.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

// TestRESTRoutes drives the SQL agent's routes through the real REST
// gateway with two tenants' keys: sessions, inputs and the job-name stage,
// GET /v1/sql/jobs and /v1/sql/jobs/{job_id} (the id holds a '/', sent
// escaped), GET /v1/sql/sessions/{id}/prompts and /v1/sql/connections.
// Bad input is 400 naming the field; another tenant's session, job or
// connection is 404, as one that does not exist.
func TestRESTRoutes(t *testing.T) {
	t.Parallel()
	sim, modelAddr := startModel(t)
	sim.When(providersim.Match{LastUserContains: "How many genres"}).Text("```sql\nSELECT COUNT(*) AS genres FROM Genre\n```")
	_, running := startAgentLogged(t, modelAddr, "acme_db=sqlite:"+chinookCopy(t)+"; globex_db=sqlite:"+chinookCopy(t),
		map[string]string{"SQLAGENT_CONNECTION_TENANTS": "acme_db=acme; globex_db=globex", "SQLAGENT_PROMPT_LOGGING": "true"}, nil)
	base := httpgatewaytest.Start(t, httpgateway.Config{APIKeys: "gw-acme=acme:music,gw-globex=globex:music"},
		httpgateway.Backends{SQLAgent: httpgatewaytest.Dial(t, running.Addr)})
	acme, globex := restClient{t, base, "gw-acme"}, restClient{t, base, "gw-globex"}

	// Connections: each tenant its own.
	if out := acme.want("GET", "/v1/sql/connections", "", 200, ""); len(dig(out, "connections").([]any)) != 1 ||
		dig(dig(out, "connections").([]any)[0], "name") != "acme_db" {
		t.Fatalf("acme's connections: %v", out)
	}
	// Sessions: another tenant's connection is 404, as an unknown one.
	acme.want("POST", "/v1/sql/sessions", `{"connection":"globex_db"}`, 404, "connection")
	acme.want("POST", "/v1/sql/sessions", `{"connection":"nosuch"}`, 404, "connection")
	acme.want("POST", "/v1/sql/sessions", `{"connection":7}`, 400, "connection")
	acme.want("POST", "/v1/sql/sessions", `{"jobKind":"JOB_KIND_NONE"}`, 400, "jobKind")
	acme.want("POST", "/v1/sql/sessions", `{"text":"`+strings.Repeat("x", 64<<10+1)+`"}`, 400, "text")
	created := acme.want("POST", "/v1/sql/sessions", `{"connection":"acme_db"}`, 200, "")
	id, _ := dig(created, "session", "id").(string)
	if id == "" || dig(created, "session", "stage") != "ASK_SQL_METHOD" {
		t.Fatalf("created: %v", created)
	}
	input := "/v1/sql/sessions/" + id + ":input"
	acme.want("POST", input, `{"selection":"not_offered"}`, 400, "selection")
	acme.want("POST", input, `{"text":"  "}`, 400, "text")
	acme.want("POST", input, `{"text":7}`, 400, "text")
	globex.want("POST", input, `{"selection":"generate"}`, 404, "")
	globex.want("GET", "/v1/sql/sessions/"+id, "", 404, "")
	acme.want("GET", "/v1/sql/sessions/"+strings.Repeat("s", 129), "", 400, "sessionId")

	// A generated read, named at EXECUTE_SQL.
	acme.want("POST", input, `{"selection":"generate"}`, 200, "")
	if r := acme.want("POST", input, `{"text":"How many genres are there?"}`, 200, ""); dig(r, "sqlToConfirm") != "SELECT COUNT(*) AS genres FROM Genre" {
		t.Fatalf("proposal: %v", r)
	}
	r := acme.want("POST", input, `{"selection":"confirm"}`, 200, "")
	if dig(r, "session", "stage") != "EXECUTE_SQL" || dig(r, "action") != "ACTION_ASK" {
		t.Fatalf("after confirm: stage %v action %v", dig(r, "session", "stage"), dig(r, "action"))
	}
	if r = acme.want("POST", input, `{"text":"okay"}`, 200, ""); dig(r, "session", "stage") != "EXECUTE_SQL" || dig(r, "job") != nil {
		t.Fatalf("okay at EXECUTE_SQL: %v", r)
	}
	r = acme.want("POST", input, `{"text":"genre count"}`, 200, "")
	jobID, _ := dig(r, "job", "id").(string)
	if dig(r, "session", "stage") != "SHOW_RESULTS" || dig(r, "job", "name") != "genre count" || !strings.Contains(jobID, "/") {
		t.Fatalf("after the name: %v", r)
	}

	// Jobs.
	list := acme.want("GET", "/v1/sql/jobs?sessionId="+id, "", 200, "")
	if jobs, _ := dig(list, "jobs").([]any); len(jobs) != 1 || dig(jobs[0], "id") != jobID || dig(jobs[0], "name") != "genre count" {
		t.Fatalf("acme's jobs: %v", list)
	}
	acme.want("GET", "/v1/sql/jobs?pageSize=501", "", 400, "pageSize")
	acme.want("GET", "/v1/sql/jobs?pageSize=-1", "", 400, "pageSize")
	acme.want("GET", "/v1/sql/jobs?pageSize=many", "", 400, "pageSize")
	acme.want("GET", "/v1/sql/jobs?sessionId="+strings.Repeat("s", 129), "", 400, "sessionId")
	if out := globex.want("GET", "/v1/sql/jobs", "", 200, ""); dig(out, "jobs") != nil {
		t.Fatalf("globex lists acme's jobs: %v", out)
	}
	if out := globex.want("GET", "/v1/sql/jobs?sessionId="+id, "", 200, ""); dig(out, "jobs") != nil {
		t.Fatalf("globex lists acme's session's jobs: %v", out)
	}
	jobPath := "/v1/sql/jobs/" + url.PathEscape(jobID)
	if out := acme.want("GET", jobPath, "", 200, ""); dig(out, "job", "sql") != "SELECT COUNT(*) AS genres FROM Genre" {
		t.Fatalf("GET %s: %v", jobPath, out)
	}
	if out := acme.want("GET", "/v1/sql/jobs/"+jobID, "", 200, ""); dig(out, "job", "id") != jobID {
		t.Fatalf("GET /v1/sql/jobs/%s unescaped: %v", jobID, out)
	}
	globex.want("GET", jobPath, "", 404, "")
	globex.want("GET", "/v1/sql/jobs/"+jobID, "", 404, "")
	acme.want("GET", "/v1/sql/jobs/"+url.PathEscape(id+"/999"), "", 404, "")
	acme.want("GET", "/v1/sql/jobs/"+strings.Repeat("j", 129), "", 400, "jobId")

	// Prompts: the SQL writer's one call, masked; another tenant's 404.
	prompts := acme.want("GET", "/v1/sql/sessions/"+id+"/prompts", "", 200, "")
	if ps, _ := dig(prompts, "prompts").([]any); len(ps) != 1 || dig(ps[0], "agent") != "sql_agent" {
		t.Fatalf("prompts: %v", prompts)
	}
	globex.want("GET", "/v1/sql/sessions/"+id+"/prompts", "", 404, "")
	acme.want("GET", "/v1/sql/sessions/nosuch/prompts", "", 404, "")
	acme.want("GET", "/v1/sql/sessions/"+strings.Repeat("s", 129)+"/prompts", "", 400, "sessionId")
}
