package routing_test

import (
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/routing"
)

func TestDefaultRoutingServesTheMeshsLogicalModels(t *testing.T) {
	t.Parallel()
	table, err := routing.Load("")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"chat", "planner", "vision", "sql", "embed", "classifier", "synthesis", "extraction"} {
		chain := table.Models[name]
		if len(chain) == 0 || chain[len(chain)-1].Provider != "ollama" {
			t.Errorf("%s: chain %v does not end at Ollama", name, chain)
		}
	}
}

func TestParseRejectsMistakesByName(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"unknown field":    "models:\n  chat: [{provider: ollama, model: m, temprature: 1}]\n",
		"unknown provider": "models:\n  chat: [{provider: nowhere, model: m}]\n",
		"bad type":         "providers:\n  x: {type: anthropic}\nmodels:\n  chat: [{provider: x, model: m}]\n",
		"no model id":      "models:\n  chat: [{provider: ollama}]\n",
		"bad replay":       "models:\n  chat: [{provider: deepseek, model: m, reasoning_replay: sometimes}]\n",
		"no models":        "providers:\n  ollama: {}\n",
	}
	wants := map[string]string{
		"unknown field": "temprature", "unknown provider": "nowhere", "bad type": "anthropic",
		"no model id": "models.chat[0].model", "bad replay": "sometimes", "no models": "no logical models",
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := routing.Parse([]byte(doc))
			if err == nil || !strings.Contains(err.Error(), wants[name]) {
				t.Errorf("err = %v, want mention of %q", err, wants[name])
			}
		})
	}
}

func TestParseAcceptsJSON(t *testing.T) {
	t.Parallel()
	table, err := routing.Parse([]byte(`{"providers":{"vllm":{"type":"openai","base_url":"http://vllm:8000/v1"}},"models":{"chat":[{"provider":"vllm","model":"qwen2.5","temperature":0.1}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p := table.Providers["vllm"]; p.Type != "openai" || p.Name != "vllm" || *table.Models["chat"][0].Temperature != 0.1 {
		t.Errorf("table %+v", table)
	}
}

func TestOnlySim(t *testing.T) {
	t.Parallel()
	table, _ := routing.Load("")
	table.Only("sim")
	for name, chain := range table.Models {
		if len(chain) != 1 || chain[0].Provider != "sim" || chain[0].Model != "sim-"+name {
			t.Errorf("%s: %v", name, chain)
		}
	}
}

func TestTargetParametersAreDefaults(t *testing.T) {
	t.Parallel()
	table, err := routing.Parse([]byte("models:\n  chat: [{provider: ollama, model: m, temperature: 0.2, max_tokens: 100, thinking: {enabled: true, effort: low}, extra: {keep_alive: 1m}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	tg := table.Models["chat"][0]
	own := 0.9
	off := false
	in := &llm.Request{Options: llm.Options{Temperature: &own}, Thinking: llm.Thinking{Enabled: &off}}
	out := tg.Request(in)
	if *out.Options.Temperature != 0.9 || *out.Options.MaxTokens != 100 || *out.Thinking.Enabled || out.Thinking.Effort != "low" ||
		out.Model != "m" || out.Extra["keep_alive"] != "1m" {
		t.Errorf("request %+v", out)
	}
	if in.Model != "" || in.Options.MaxTokens != nil {
		t.Error("input request modified")
	}
}
