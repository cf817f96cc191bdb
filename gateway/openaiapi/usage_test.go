package openaiapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	"github.com/agentmesh/agentmesh/gateway/httpgateway/httpgatewaytest"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgatewaytest"
	"github.com/agentmesh/agentmesh/services/modelgateway/openaiapi"
)

type usageRow struct {
	Tenant           string `json:"tenant"`
	Key              string `json:"key"`
	Model            string `json:"model"`
	Requests         int64  `json:"requests"`
	PromptTokens     int64  `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
	ReasoningTokens  int64  `json:"reasoning_tokens"`
	TotalTokens      int64  `json:"total_tokens"`
}

// Usage is metered per API key and tenant: GET /usage shows a tenant its
// own keys' rows, streamed calls included, and nobody else's; a key bound
// to a project, its project's keys' rows only (a tenancy attack pass saw a
// project's key read another project's key names and counts).
func TestUsageByKeyAndTenant(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		m := startMesh(t, d)
		m.sim.When(providersim.Match{LastUserContains: "usage marker"}).Text("counted").
			Usage(providersim.Usage{PromptTokens: 10, CompletionTokens: 4, ReasoningTokens: 1})
		chat := `{"model": "chat", "messages": [{"role": "user", "content": "usage marker"}]}`
		stream := `{"model": "chat", "stream": true, "messages": [{"role": "user", "content": "usage marker"}]}`
		for _, call := range []struct{ key, body string }{
			{aliceKey, chat}, {aliceKey, stream}, {bobKey, chat}, {carolKey, chat}, {daveKey, chat}, {erinKey, chat},
			{aliceKey, `{"model": "gpt-9", "messages": [{"role": "user", "content": "usage marker"}]}`}, // fails: not counted
		} {
			resp, body := post(t, m.base+"/chat/completions", call.key, call.body)
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
		}
		report := func(key string) (string, []usageRow) {
			t.Helper()
			resp, body := send(t, http.MethodGet, m.base+"/usage", key, "")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var r struct {
				Object string     `json:"object"`
				Tenant string     `json:"tenant"`
				Data   []usageRow `json:"data"`
			}
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatal(err)
			}
			return r.Tenant, r.Data
		}
		one := usageRow{Model: "chat", Requests: 1, PromptTokens: 10, CompletionTokens: 4, ReasoningTokens: 1, TotalTokens: 14}
		keyed := func(key string, r usageRow) usageRow { r.Key = key; return r }
		tenant, rows := report(bobKey)
		want := []usageRow{
			{Key: "alice", Model: "chat", Requests: 2, PromptTokens: 20, CompletionTokens: 8, ReasoningTokens: 2, TotalTokens: 28},
			keyed("bob", one), keyed("dave", one), keyed("erin", one),
		}
		if tenant != "acme" || !slices.Equal(rows, want) {
			t.Errorf("acme's usage: %s %+v, want %+v", tenant, rows, want)
		}
		for key, who := range map[string]string{daveKey: "dave", erinKey: "erin"} {
			if tenant, rows := report(key); tenant != "acme" || !slices.Equal(rows, []usageRow{keyed(who, one)}) {
				t.Errorf("the usage a key of %s's project reads: %s %+v, want its project's row only", who, tenant, rows)
			}
		}
		tenant, rows = report(carolKey)
		if tenant != "globex" || len(rows) != 1 || rows[0].Key != "carol" || rows[0].Requests != 1 {
			t.Errorf("globex's usage: %s %+v", tenant, rows)
		}
		// An operator key reads every tenant's, each row naming its tenant.
		tenant, rows = report(oscarKey)
		var got []string
		for _, r := range rows {
			got = append(got, r.Tenant+"/"+r.Key)
		}
		if tenant != "" || strings.Join(got, " ") != "acme/alice acme/bob acme/dave acme/erin globex/carol" {
			t.Errorf("the operator's report: tenant %q, rows %v", tenant, got)
		}
	})
}

// The Prometheus counters carry tenant, key, model and kind, and count
// requests by endpoint and HTTP status.
func TestUsageCounters(t *testing.T) {
	t.Parallel()
	m := startMesh(t, restDoor)
	m.sim.When(providersim.Match{LastUserContains: "metered marker"}).Text("counted").
		Usage(providersim.Usage{PromptTokens: 12, CompletionTokens: 3})
	reader := sdkmetric.NewManualReader()
	h, err := openaiapi.New(openaiapi.Options{
		Client: modelv1.NewModelServiceClient(httpgatewaytest.Dial(t, m.modelAddr)),
		Caller: func(r *http.Request) (openaiapi.Caller, bool) {
			return openaiapi.Caller{Tenant: "acme", Key: "alice"}, true
		},
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	base := srv.URL + openaiapi.Prefix
	post(t, base+"/chat/completions", "", `{"model": "chat", "messages": [{"role": "user", "content": "metered marker"}]}`)
	post(t, base+"/chat/completions", "", `{"model": "chat", "temperature": "hot", "messages": [{"role": "user", "content": "x"}]}`)

	// A client that leaves a stream after its first chunk is a 499, not a
	// server error.
	m.sim.When(providersim.Match{LastUserContains: "leaving marker"}).Text("first words and then nothing").Hang()
	resp := open(t, http.MethodPost, base+"/chat/completions", "", `{"model": "chat", "stream": true, "messages": [{"role": "user", "content": "leaving marker"}]}`)
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	var sums map[string]metricdata.Sum[int64]
	collect := func() {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		sums = map[string]metricdata.Sum[int64]{}
		for _, sm := range rm.ScopeMetrics {
			for _, mt := range sm.Metrics {
				if s, ok := mt.Data.(metricdata.Sum[int64]); ok {
					sums[mt.Name] = s
				}
			}
		}
	}
	value := func(name string, kv ...attribute.KeyValue) int64 {
		want := attribute.NewSet(kv...)
		for _, dp := range sums[name].DataPoints {
			if dp.Attributes.Equals(&want) {
				return dp.Value
			}
		}
		return -1
	}
	who := []attribute.KeyValue{attribute.String("tenant", "acme"), attribute.String("key", "alice")}
	left := append(slices.Clone(who), attribute.String("endpoint", "chat_stream"), attribute.Int("http_status", 499))
	// The handler notices the client left when the call is cancelled.
	testkit.Eventually(t, waitLimit, func() bool {
		collect()
		return value("agentmesh.gateway.openai.requests", left...) == 1
	}, "a stream the client left counted as 499")
	if v := value("agentmesh.gateway.openai.tokens", append(who, attribute.String("model", "chat"), attribute.String("kind", "prompt"))...); v != 12 {
		t.Errorf("prompt tokens %d, want 12 (%+v)", v, sums["agentmesh.gateway.openai.tokens"])
	}
	if v := value("agentmesh.gateway.openai.tokens", append(who, attribute.String("model", "chat"), attribute.String("kind", "completion"))...); v != 3 {
		t.Errorf("completion tokens %d, want 3", v)
	}
	for status, want := range map[int]int64{200: 1, 400: 1} {
		if v := value("agentmesh.gateway.openai.requests", append(who, attribute.String("endpoint", "chat"), attribute.Int("http_status", status))...); v != want {
			t.Errorf("requests with status %d: %d, want %d (%+v)", status, v, want, sums["agentmesh.gateway.openai.requests"])
		}
	}
}

// With GATEWAY_PEERS (at the model gateway's door
// MODELGATEWAY_OPENAI_PEERS), GET /usage at any replica sums every
// replica's counts (each counts only the calls it served), asking the
// others with the caller's key, says how many answered, and counts a
// replica that is down as unanswered.
func TestUsageSumsEveryReplica(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		sim := providersim.Start(t, providersim.Options{Flavor: providersim.DeepSeek})
		sim.When(providersim.Match{LastUserContains: "replica marker"}).Text("counted").
			Usage(providersim.Usage{PromptTokens: 10, CompletionTokens: 4})
		table := fmt.Sprintf(routing, sim.URL, sim.URL+"/v1")
		var modelAddr string
		if d == restDoor {
			modelAddr = modelgatewaytest.Start(t, table, modelEnv())
		}
		// A replica of the door on lis with keys, naming peers as its
		// replicas.
		start := func(lis net.Listener, keys string, peers ...string) string {
			if d == modelDoor {
				env := modelEnv()
				env["GATEWAY_API_KEYS"] = keys
				env["MODELGATEWAY_OPENAI_PEERS"] = strings.Join(peers, ",")
				_, base := modelgatewaytest.StartWithOpenAIOn(t, lis, table, env)
				return base
			}
			cfg := httpgateway.Config{APIKeys: keys, Peers: strings.Join(peers, ",")}
			return httpgatewaytest.StartOn(t, lis, cfg, httpgateway.Backends{Model: httpgatewaytest.Dial(t, modelAddr)}) + openaiapi.Prefix
		}
		listen := func() net.Listener {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		lis := []net.Listener{listen(), listen()}
		peers := []string{lis[0].Addr().String(), lis[1].Addr().String()}
		bases := []string{start(lis[0], apiKeys, peers...), start(lis[1], apiKeys, peers...)}

		chat := `{"model": "chat", "messages": [{"role": "user", "content": "replica marker"}]}`
		for _, call := range []struct {
			replica int
			key     string
		}{{0, aliceKey}, {0, aliceKey}, {1, aliceKey}, {1, bobKey}, {1, carolKey}} {
			if resp, body := post(t, bases[call.replica]+"/chat/completions", call.key, chat); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
		}
		type report struct {
			Tenant             string     `json:"tenant"`
			Data               []usageRow `json:"data"`
			Replicas           int        `json:"replicas"`
			ReplicasUnanswered int        `json:"replicas_unanswered"`
		}
		read := func(base, key string, header ...string) report {
			t.Helper()
			req, _ := http.NewRequest(http.MethodGet, base+"/usage", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var r report
			if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, %v", resp.StatusCode, err)
			}
			return r
		}
		row := func(key string, n int64) usageRow {
			return usageRow{Key: key, Model: "chat", Requests: n, PromptTokens: 10 * n, CompletionTokens: 4 * n, TotalTokens: 14 * n}
		}
		want := []usageRow{row("alice", 3), row("bob", 1)}
		for i, base := range bases {
			if r := read(base, bobKey); r.Tenant != "acme" || !slices.Equal(r.Data, want) || r.Replicas != 2 || r.ReplicasUnanswered != 0 {
				t.Errorf("acme's usage at replica %d: %+v, want %+v from 2 replicas", i, r, want)
			}
		}
		// One replica's own counts, as the others ask for them.
		if own := read(bases[1], aliceKey, "X-Agentmesh-Usage-Replica", "1"); !slices.Equal(own.Data, []usageRow{row("alice", 1), row("bob", 1)}) || own.Replicas != 1 {
			t.Errorf("replica 1's own counts: %+v", own)
		}
		// Another tenant sees its own row only, summed.
		if r := read(bases[0], carolKey); r.Tenant != "globex" || !slices.Equal(r.Data, []usageRow{row("carol", 1)}) {
			t.Errorf("globex's usage: %+v", r)
		}
		// A wrong key is refused as at one replica, in OpenAI's error shape.
		resp, body := send(t, http.MethodGet, bases[0]+"/usage", "sk-nobody-0123456789", "")
		if e := decodeError(t, body); resp.StatusCode != http.StatusUnauthorized || deref(e.Error.Code) != "invalid_api_key" {
			t.Errorf("a wrong key: %d %s", resp.StatusCode, body)
		}

		// A replica that is down: the others' counts, and it counted as
		// unanswered.
		gone := listen()
		down := gone.Addr().String()
		gone.Close()
		third := start(listen(), apiKeys, peers[0], down)
		if r := read(third, bobKey); !slices.Equal(r.Data, []usageRow{row("alice", 2)}) || r.Replicas != 1 || r.ReplicasUnanswered != 1 {
			t.Errorf("with a replica down: %+v, want replica 0's counts, 1 answered and 1 not", r)
		}
		// A replica given a key the others do not know yet (keys rolling
		// out): they refuse it, and count as unanswered; its own counts
		// stand.
		const newKey = "sk-new-0123456789"
		l := listen()
		newer := start(l, apiKeys+","+newKey+"=acme@newer", peers[0], l.Addr().String())
		if r := read(newer, newKey); !slices.Equal(r.Data, []usageRow{}) || r.Replicas != 1 || r.ReplicasUnanswered != 1 {
			t.Errorf("a key one replica knows: %+v, want its own (empty) counts, 1 answered and 1 not", r)
		}
	})
}

// GATEWAY_RATE_LIMIT holds each key to its rate at either door: past the
// burst a 429 in OpenAI's shape (rate_limit_error) with Retry-After, which
// the SDKs wait out; another key is not held back. At the REST gateway
// the same bucket serves its own API, answered in its own error shape.
func TestRateLimitPerKey(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		m := startMeshWith(t, d, httpgateway.Config{APIKeys: apiKeys, RateLimit: 0.5, RateBurst: 2})
		for i := range 2 {
			if resp, body := send(t, http.MethodGet, m.base+"/models", aliceKey, ""); resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d of the burst: %d %s", i+1, resp.StatusCode, body)
			}
		}
		resp, body := send(t, http.MethodGet, m.base+"/models", aliceKey, "")
		e := decodeError(t, body)
		if resp.StatusCode != http.StatusTooManyRequests || e.Error.Type != "rate_limit_error" || deref(e.Error.Code) != "rate_limit_exceeded" ||
			resp.Header.Get("Retry-After") != "2" || resp.Header.Get("Retry-After-Ms") == "" || !strings.Contains(e.Error.Message, "0.5 requests a second") {
			t.Fatalf("past the burst: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		if resp, body := send(t, http.MethodGet, m.base+"/models", bobKey, ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("another key: %d %s", resp.StatusCode, body)
		}
		if d == restDoor {
			resp, body := send(t, http.MethodGet, strings.TrimSuffix(m.base, openaiapi.Prefix)+"/v1/models", aliceKey, "")
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"code":8`) {
				t.Fatalf("the REST API past the same key's burst: %d %s", resp.StatusCode, body)
			}
		}
	})
}
