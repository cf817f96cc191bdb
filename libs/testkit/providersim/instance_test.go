package providersim_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// TestSchemaFillsAreLinearAndBounded: minLength and minItems are filled in
// time linear in the answer, and a schema whose instance would exceed
// MaxInstanceBytes gets a 400 on both wire formats instead of an answer
// built for hours. The client timeout catches a quadratic or unbounded fill.
func TestSchemaFillsAreLinearAndBounded(t *testing.T) {
	t.Parallel()
	sim := providersim.Start(t, providersim.Options{})
	client := &http.Client{Timeout: 10 * time.Second}
	openai := func(t *testing.T, schema string, stream bool) (*http.Response, string) {
		t.Helper()
		return post(t, client, sim.URL+"/chat/completions",
			`{"model":"m","stream":`+map[bool]string{true: "true", false: "false"}[stream]+
				`,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":`+schema+`}},"messages":[{"role":"user","content":"hi"}]}`)
	}

	t.Run("a long minLength is filled rune for rune", func(t *testing.T) {
		// "é" makes the prefix longer in bytes than in runes.
		resp, body := openai(t, `{"type":"object","required":["é"],"properties":{"é":{"type":"string","minLength":200000}}}`, false)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %.300s", resp.StatusCode, body)
		}
		var r struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("%v: %.300s", err, body)
		}
		var v map[string]string
		if err := json.Unmarshal([]byte(r.Choices[0].Message.Content), &v); err != nil {
			t.Fatal(err)
		}
		if n := utf8.RuneCountInString(v["é"]); n != 200000 || !strings.HasPrefix(v["é"], providersim.SimulatedPrefix+"é~") {
			t.Errorf("got %d runes starting %.40q", n, v["é"])
		}
	})

	tooLarge := []struct{ name, schema, want string }{
		{"minLength above the cap", `{"type":"object","properties":{"summary":{"type":"string","minLength":10000000}}}`, `minLength 10000000 at "summary"`},
		{"minItems above the cap", `{"type":"array","minItems":2000000,"items":{"type":"integer"}}`, "minItems 2000000"},
		{"nested arrays that multiply", `{"type":"array","minItems":100,"items":{"type":"array","minItems":100,"items":{"type":"array","minItems":100,"items":{"type":"string"}}}}`, "1048576 bytes"},
		{"many strings each under the cap", `{"type":"array","minItems":300,"items":{"type":"string","minLength":5000}}`, "1048576 bytes"},
	}
	for _, tc := range tooLarge {
		for _, stream := range []bool{false, true} {
			resp, body := openai(t, tc.schema, stream)
			var e struct {
				Error struct{ Message, Type string }
			}
			_ = json.Unmarshal([]byte(body), &e)
			if resp.StatusCode != http.StatusBadRequest || e.Error.Type != "invalid_request_error" ||
				!strings.Contains(e.Error.Message, tc.want) || !strings.Contains(e.Error.Message, "1048576 bytes") {
				t.Errorf("%s (stream %v): status %d: %.300s", tc.name, stream, resp.StatusCode, body)
			}
		}
	}

	t.Run("ollama format", func(t *testing.T) {
		resp, body := post(t, client, sim.URL+"/api/chat",
			`{"model":"m","stream":false,"format":{"type":"string","minLength":10000000},"messages":[{"role":"user","content":"hi"}]}`)
		var e struct{ Error string }
		_ = json.Unmarshal([]byte(body), &e)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Error, "minLength 10000000") {
			t.Errorf("status %d: %.300s", resp.StatusCode, body)
		}
	})

	t.Run("forced tool call", func(t *testing.T) {
		resp, body := post(t, client, sim.URL+"/chat/completions",
			`{"model":"m","tool_choice":"required","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"q":{"type":"string","minLength":10000000}}}}}],"messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `tool \"f\"`) {
			t.Errorf("status %d: %.300s", resp.StatusCode, body)
		}
	})

	t.Run("negative bounds do not crash the simulator", func(t *testing.T) {
		resp, body := openai(t, `{"type":"object","properties":{"a":{"type":"array","maxItems":-1},"s":{"type":"string","maxLength":-1}}}`, false)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("status %d: %.300s", resp.StatusCode, body)
		}
	})
}
