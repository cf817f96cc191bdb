package openaiapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	"github.com/agentmesh/agentmesh/gateway/httpgateway/httpgatewaytest"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgatewaytest"
)

// The API keys of the test mesh: alice and bob share tenant acme, carol is
// in globex.
const (
	aliceKey = "sk-alice-0123456789"
	bobKey   = "sk-bob-0123456789"
	carolKey = "sk-carol-0123456789"
	// daveKey and erinKey are bound to projects of acme.
	daveKey = "sk-dave-0123456789"
	erinKey = "sk-erin-0123456789"
	// oscarKey is an operator's.
	oscarKey = "sk-oscar-0123456789"
	apiKeys  = aliceKey + "=acme@alice," + bobKey + "=acme@bob," + carolKey + "=globex@carol," +
		daveKey + "=acme:alpha@dave," + erinKey + "=acme:beta@erin," + oscarKey + "=*@oscar"
)

// waitLimit bounds every request of these tests.
const waitLimit = 20 * time.Second

// mesh is the real gateway in front of the real model gateway in front of
// the provider simulator.
type mesh struct {
	// base is the OpenAI base URL: http://127.0.0.1:PORT/openai/v1.
	base string
	sim  *providersim.Server
	// modelAddr is the model gateway's gRPC address.
	modelAddr string
}

// routing sends "chat" to a DeepSeek-style provider (reasoning_content,
// JSON mode without native schemas, so the model gateway validates) and
// "embed" and "vision" to an OpenAI-style one, both on the simulator.
const routing = `providers:
  ds: {type: deepseek, base_url: %q}
  oa: {type: openai, base_url: %q}
models:
  chat: [{provider: ds, model: deepseek-chat}]
  vision: [{provider: oa, model: sim-vision}]
  embed: [{provider: oa, model: sim-embed}]
`

// door is where a test's requests enter the mesh: the REST gateway (one
// gRPC hop in front of the model gateway) or the model gateway's own
// listener (MODELGATEWAY_OPENAI_ADDR). Both serve the same API, and every
// test of it runs at both.
type door string

const (
	restDoor  door = "rest-gateway"
	modelDoor door = "modelgateway"
)

// atEachDoor runs test once per door, one subtest after the other, each
// starting its own mesh.
func atEachDoor(t *testing.T, test func(t *testing.T, d door)) {
	t.Helper()
	for _, d := range []door{restDoor, modelDoor} {
		t.Run(string(d), func(t *testing.T) { test(t, d) })
	}
}

// startMesh starts the simulator, the model gateway and, for restDoor, the
// HTTP gateway, with the test's API keys; everything stops in t.Cleanup.
func startMesh(t testing.TB, d door) *mesh {
	t.Helper()
	return startMeshWith(t, d, httpgateway.Config{APIKeys: apiKeys})
}

// startMeshWith is startMesh with the HTTP gateway's configuration; at the
// model gateway's door its API keys and keep-alive are the model gateway's.
func startMeshWith(t testing.TB, d door, cfg httpgateway.Config) *mesh {
	t.Helper()
	sim := providersim.Start(t, providersim.Options{Flavor: providersim.DeepSeek})
	env := modelEnv()
	table := fmt.Sprintf(routing, sim.URL, sim.URL+"/v1")
	if d == modelDoor {
		env["GATEWAY_API_KEYS"] = cfg.APIKeys
		if cfg.SSEKeepAlive > 0 {
			env["MODELGATEWAY_OPENAI_KEEPALIVE"] = cfg.SSEKeepAlive.String()
		}
		if cfg.RateLimit > 0 {
			env["GATEWAY_RATE_LIMIT"] = fmt.Sprint(cfg.RateLimit)
			env["GATEWAY_RATE_BURST"] = fmt.Sprint(cfg.RateBurst)
		}
		addr, base := modelgatewaytest.StartWithOpenAI(t, table, env)
		return &mesh{base: base, sim: sim, modelAddr: addr}
	}
	addr := modelgatewaytest.Start(t, table, env)
	url := httpgatewaytest.Start(t, cfg, httpgateway.Backends{Model: httpgatewaytest.Dial(t, addr)})
	return &mesh{base: url + "/openai/v1", sim: sim, modelAddr: addr}
}

// modelEnv is the model gateway's environment in these tests: the
// simulator's keys, no retries, no background probes.
func modelEnv() map[string]string {
	return map[string]string{
		"DEEPSEEK_API_KEY":              "sim-key",
		"OPENAI_API_KEY":                "sim-key",
		"MODELGATEWAY_MAX_ATTEMPTS":     "1",
		"MODELGATEWAY_PROBE_INTERVAL":   "1h",
		"MODELGATEWAY_RETRY_BASE_DELAY": "10ms",
		"MODELGATEWAY_RETRY_MAX_DELAY":  "20ms",
	}
}

// post sends a JSON body with key as a bearer token, as OpenAI's SDKs do,
// and returns the response with its body read.
func post(t *testing.T, url, key, body string) (*http.Response, []byte) {
	t.Helper()
	return send(t, http.MethodPost, url, key, body)
}

func send(t *testing.T, method, url, key, body string) (*http.Response, []byte) {
	t.Helper()
	resp := open(t, method, url, key, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// open sends a request and returns the response unread.
func open(t *testing.T, method, url, key, body string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// decode unmarshals a JSON object.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, b)
	}
	return m
}

// apiErr is an OpenAI error body.
type apiErr struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// decodeError reads an OpenAI error body, failing the test when the body
// has another shape.
func decodeError(t *testing.T, b []byte) apiErr {
	t.Helper()
	var e apiErr
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || raw["error"] == nil {
		t.Fatalf("not an OpenAI error object: %s", b)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := raw["error"][k]; !ok {
			t.Errorf("error object lacks %q: %s", k, b)
		}
	}
	_ = json.Unmarshal(b, &e)
	return e
}

func deref(s *string) string {
	if s == nil {
		return "<null>"
	}
	return *s
}

// sseData returns the data of each event of an SSE body, in order.
func sseData(t *testing.T, body io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	return out
}
