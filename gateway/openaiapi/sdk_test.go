package openaiapi_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// openaiSDKVersion is the official openai npm package the SDK test drives
// the API with.
const openaiSDKVersion = "7.55.0"

// requireTool returns the path of a program the SDK test needs. Outside CI
// its absence skips the test; in CI (.ci/run installs node and npm) it
// fails it, so the test cannot pass by not running.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found, and CI is set: .ci/run installs nodejs and npm", name)
		}
		t.Skipf("%s not found: install nodejs and npm (Debian packages) to run the OpenAI SDK test", name)
	}
	return p
}

// The official openai npm package, pointed at the gateway with only its
// base URL and API key, drives chat, streaming with usage, streamed tool
// calls and their results, structured output, embeddings (base64, its
// default, and float), models and typed errors; its parsed objects are
// asserted here (testdata/sdk.mjs prints them).
func TestOpenAINodeSDK(t *testing.T) {
	t.Parallel()
	node, npm := requireTool(t, "node"), requireTool(t, "npm")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	install := exec.CommandContext(ctx, npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save", "openai@"+openaiSDKVersion)
	if out, err := install.CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("npm install openai@%s: %v\n%s", openaiSDKVersion, err, out)
		}
		t.Skipf("npm install openai@%s failed (no network to the npm registry?): %v\n%s", openaiSDKVersion, err, out)
	}
	script, err := os.ReadFile(filepath.Join("testdata", "sdk.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sdk.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	atEachDoor(t, func(t *testing.T, d door) {
		runSDK(t, d, "openai@"+openaiSDKVersion+" (node)", func(ctx context.Context) *exec.Cmd {
			return exec.CommandContext(ctx, node, filepath.Join(dir, "sdk.mjs"))
		})
	})
}

// The official openai Python package drives the same calls (testdata/sdk.py
// prints them in sdk.mjs's shape), structured output through its own
// parse() helper from a pydantic model. It runs where `import openai`
// works (pip install openai, or PYTHONPATH naming it) and is skipped
// elsewhere, CI included: the Python package index is not reachable there,
// and no Debian package carries the SDK.
func TestOpenAIPythonSDK(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	probe, err := exec.Command(python, "-c", "import openai; print(openai.__version__)").CombinedOutput()
	if err != nil {
		t.Skipf("the openai Python package is not importable (pip install openai, or set PYTHONPATH): %s", probe)
	}
	version := strings.TrimSpace(string(probe))
	script, err := filepath.Abs(filepath.Join("testdata", "sdk.py"))
	if err != nil {
		t.Fatal(err)
	}
	atEachDoor(t, func(t *testing.T, d door) {
		out := runSDK(t, d, "openai "+version+" (python)", func(ctx context.Context) *exec.Cmd {
			return exec.CommandContext(ctx, python, script)
		})
		var got struct {
			Async struct{ Unary, Stream string }
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		if got.Async.Unary != "Hello from the mesh." || got.Async.Stream != "Once upon a time, a mesh answered." {
			t.Errorf("async client: %+v", got.Async)
		}
	})
}

// runSDK starts a mesh behind door d with the simulator's answers the SDK
// scripts ask for, runs the script cmd makes with BASE_URL and API_KEY set,
// asserts what it printed and returns it.
func runSDK(t *testing.T, d door, sdk string, cmd func(context.Context) *exec.Cmd) []byte {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m := startMesh(t, d)
	m.sim.When(providersim.Match{LastUserContains: "SDK unary hello"}).Text("Hello from the mesh.").
		Usage(providersim.Usage{PromptTokens: 21, CompletionTokens: 5})
	m.sim.When(providersim.Match{LastUserContains: "SDK stream story"}).Reasoning("Thinking it over.").
		Text("Once upon a time, a mesh answered.").Usage(providersim.Usage{PromptTokens: 9, CompletionTokens: 14, ReasoningTokens: 4})
	m.sim.When(providersim.Match{LastRole: "tool"}).Text("BHP trades at 45.10 on revenue of 55.7B.")
	m.sim.When(providersim.Match{LastUserContains: "SDK tools", WithTools: true}).
		ToolCallWithID("call_price", "get_stock_price", map[string]any{"ticker": "BHP"}).
		ToolCallWithID("call_fin", "get_financials", map[string]any{"ticker": "BHP", "period": "FY24"})
	m.sim.When(providersim.Match{LastUserContains: "SDK json", JSON: true}).JSON(map[string]any{"status": "RESOLVED"})
	m.sim.When(providersim.Match{AnyMessageContains: "SDK bad json", JSON: true}).JSON(map[string]any{"status": "MAYBE"}) // the answer and its repair
	m.sim.When(providersim.Match{Endpoint: providersim.EndpointEmbed}).Embedding([]float32{0.25, -0.5, 1})
	m.sim.When(providersim.Match{LastUserContains: "SDK cut stream"}).Text("partial answer that goes on").FailMidStream("model crashed")

	run := cmd(ctx)
	run.Env = append(os.Environ(), "BASE_URL="+m.base, "API_KEY="+aliceKey)
	var stderr []byte
	out, err := run.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s\n%s", sdk, err, out, stderr)
	}
	t.Logf("%s saw: %s", sdk, out)

	var got struct {
		Unary struct {
			ID, Object, Model, Role, Content string
			FinishReason                     string `json:"finish_reason"`
			RequestID                        string `json:"request_id"`
			Usage                            struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
				TotalTokens      int `json:"total_tokens"`
			}
		}
		Stream struct {
			Chunks             int
			IDs                []string `json:"ids"`
			Objects            []string
			Content, Reasoning string
			Roles, Finish      []string
			UsageNull          bool `json:"usageNullBeforeLast"`
			LastChoices        int  `json:"lastChoices"`
			Usage              struct {
				PromptTokens            int `json:"prompt_tokens"`
				CompletionTokens        int `json:"completion_tokens"`
				CompletionTokensDetails struct {
					ReasoningTokens int `json:"reasoning_tokens"`
				} `json:"completion_tokens_details"`
			}
		}
		Tools struct {
			FinishReason string `json:"finish_reason"`
			Calls        []struct {
				ID, Type, Name string
				Arguments      map[string]string
			}
			Answer       string
			AnswerFinish string `json:"answer_finish"`
		}
		Cut struct {
			Thrown, APIError bool
			Type, Text       string
		}
		JSON    map[string]string `json:"json"`
		BadJSON struct {
			Thrown, InternalServerError bool
			Status                      int
			Code                        string
		} `json:"badJSON"`
		Embeddings struct {
			Object, Model string
			Count         int
			Indexes       []int
			Base64, Float []float64
			Usage         map[string]int
		}
		Models struct {
			IDs       []string `json:"ids"`
			Retrieved string
			Object    string
		}
		NotFound struct {
			Thrown, NotFoundError bool
			Status                int
			Type, Code, Param     string
		} `json:"notFound"`
		BadRequest struct {
			Thrown, BadRequestError bool
			Status                  int
			Type, Param             string
		} `json:"badRequest"`
		Unauthorized struct {
			Thrown, AuthenticationError bool
			Status                      int
			Type, Code                  string
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("sdk.mjs output: %v\n%s", err, out)
	}

	u := got.Unary
	if u.Object != "chat.completion" || u.Model != "chat" || u.Role != "assistant" || u.Content != "Hello from the mesh." ||
		u.FinishReason != "stop" || u.Usage.PromptTokens != 21 || u.Usage.CompletionTokens != 5 || u.Usage.TotalTokens != 26 {
		t.Errorf("unary: %+v", u)
	}
	// The SDKs expose the X-Request-Id answer header (_request_id), the
	// id the gateway's logs carry.
	if len(u.RequestID) < 16 {
		t.Errorf("unary: the SDK found no request id (%q)", u.RequestID)
	}
	s := got.Stream
	if len(s.IDs) != 1 || !slices.Equal(s.Objects, []string{"chat.completion.chunk"}) || s.Content != "Once upon a time, a mesh answered." ||
		s.Reasoning != "Thinking it over." || !slices.Equal(s.Roles, []string{"assistant"}) || !slices.Equal(s.Finish, []string{"stop"}) ||
		!s.UsageNull || s.LastChoices != 0 || s.Usage.PromptTokens != 9 || s.Usage.CompletionTokens != 14 ||
		s.Usage.CompletionTokensDetails.ReasoningTokens != 4 || s.Chunks < 4 {
		t.Errorf("stream: %+v", s)
	}
	tl := got.Tools
	if tl.FinishReason != "tool_calls" || len(tl.Calls) != 2 || tl.Calls[0].ID != "call_price" || tl.Calls[0].Name != "get_stock_price" ||
		tl.Calls[0].Arguments["ticker"] != "BHP" || tl.Calls[1].ID != "call_fin" || tl.Calls[1].Arguments["period"] != "FY24" ||
		tl.Calls[0].Type != "function" || tl.Answer != "BHP trades at 45.10 on revenue of 55.7B." || tl.AnswerFinish != "stop" {
		t.Errorf("tools: %+v", tl)
	}
	if c := got.Cut; !c.Thrown || !c.APIError || c.Type != "service_unavailable_error" || c.Text == "" {
		t.Errorf("stream cut: %+v", c)
	}
	if got.JSON["status"] != "RESOLVED" {
		t.Errorf("json: %v", got.JSON)
	}
	// Two model calls, the answer and the gateway's repair, and no more:
	// the SDK's two retries would have made six.
	calls := 0
	for _, r := range m.sim.ChatRequests() {
		if slices.ContainsFunc(r.Messages, func(msg providersim.Message) bool { return strings.Contains(msg.Content, "SDK bad json") }) {
			calls++
		}
	}
	if b := got.BadJSON; !b.Thrown || !b.InternalServerError || b.Status != 500 || b.Code != "schema_validation_failed" || calls != 2 {
		t.Errorf("a schema the model fails, retries on: %+v after %d model calls, want a 500 schema_validation_failed after 2", b, calls)
	}
	e := got.Embeddings
	want := []float64{0.25, -0.5, 1}
	if e.Object != "list" || e.Model != "embed" || e.Count != 2 || !slices.Equal(e.Indexes, []int{0, 1}) ||
		!slices.Equal(e.Base64, want) || !slices.Equal(e.Float, want) {
		t.Errorf("embeddings: %+v", e)
	}
	if !slices.Contains(got.Models.IDs, "chat") || !slices.Contains(got.Models.IDs, "embed") || got.Models.Retrieved != "chat" || got.Models.Object != "model" {
		t.Errorf("models: %+v", got.Models)
	}
	if nf := got.NotFound; !nf.Thrown || !nf.NotFoundError || nf.Status != 404 || nf.Code != "model_not_found" || nf.Param != "model" || nf.Type != "invalid_request_error" {
		t.Errorf("unknown model: %+v", nf)
	}
	if br := got.BadRequest; !br.Thrown || !br.BadRequestError || br.Status != 400 || br.Param != "temperature" {
		t.Errorf("bad request: %+v", br)
	}
	if ua := got.Unauthorized; !ua.Thrown || !ua.AuthenticationError || ua.Status != 401 || ua.Code != "invalid_api_key" {
		t.Errorf("wrong key: %+v", ua)
	}
	// The SDK streamed: the provider was asked to stream, with usage.
	var streamed bool
	for _, r := range m.sim.ChatRequests() {
		if r.LastUserText() == "SDK stream story" {
			streamed = r.Stream
		}
	}
	if !streamed {
		t.Error("the provider never saw the SDK's streamed request stream")
	}
	return out
}
