// Package routing maps logical model names ("chat", "planner", "embed", ...)
// to ordered fallback chains of provider models with parameters. The table
// comes from a YAML or JSON file, or from the built-in default.
package routing

import (
	"bytes"
	_ "embed" // the built-in routing file
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML returns the built-in routing file.
func DefaultYAML() []byte { return append([]byte(nil), defaultYAML...) }

// Provider types.
const (
	TypeDeepSeek = "deepseek"
	TypeQwen     = "qwen"
	TypeOllama   = "ollama"
	TypeOpenAI   = "openai"
	TypeSim      = "sim"
)

var knownTypes = map[string]bool{TypeDeepSeek: true, TypeQwen: true, TypeOllama: true, TypeOpenAI: true, TypeSim: true}

// Table is a validated routing table.
type Table struct {
	// Providers by name.
	Providers map[string]*Provider `yaml:"providers" json:"providers"`
	// Models maps logical names to their fallback chains.
	Models map[string][]*Target `yaml:"models" json:"models"`
}

// Provider is one configured provider endpoint.
type Provider struct {
	// Name is the provider's key in the table (filled in by Parse).
	Name string `yaml:"-" json:"-"`
	// Type is deepseek, qwen, ollama, openai or sim.
	Type string `yaml:"type" json:"type"`
	// BaseURL overrides the type's base URL from the environment.
	BaseURL string `yaml:"base_url" json:"base_url"`
	// Credentials names the environment key set to use (deepseek, qwen,
	// openai); empty uses the type's own. Ignored for ollama and sim.
	Credentials string `yaml:"credentials" json:"credentials"`
	// APIKeyFile is a file of extra keys (comma or newline separated).
	APIKeyFile string `yaml:"api_key_file" json:"api_key_file"`
	// MaxConcurrency and MaxQueue override the service-wide limits (nil
	// keeps them; max_queue 0 means no queue).
	MaxConcurrency *int `yaml:"max_concurrency" json:"max_concurrency"`
	MaxQueue       *int `yaml:"max_queue" json:"max_queue"`
	// NoToolChoice and NoJSONSchema describe limited OpenAI-compatible
	// servers (Ollama /v1 rejects tool_choice).
	NoToolChoice bool `yaml:"no_tool_choice" json:"no_tool_choice"`
	NoJSONSchema bool `yaml:"no_json_schema" json:"no_json_schema"`
}

// Target is one provider model in a chain, with default parameters. A
// request's own options win over these.
type Target struct {
	Provider    string   `yaml:"provider" json:"provider"`
	Model       string   `yaml:"model" json:"model"`
	Temperature *float64 `yaml:"temperature" json:"temperature"`
	TopP        *float64 `yaml:"top_p" json:"top_p"`
	MaxTokens   *int     `yaml:"max_tokens" json:"max_tokens"`
	NumCtx      *int     `yaml:"num_ctx" json:"num_ctx"`
	Thinking    *struct {
		Enabled      *bool  `yaml:"enabled" json:"enabled"`
		Effort       string `yaml:"effort" json:"effort"`
		BudgetTokens *int   `yaml:"budget_tokens" json:"budget_tokens"`
	} `yaml:"thinking" json:"thinking"`
	// ReasoningReplay is none, tool_calls or all; empty uses the adapter's
	// default (tool_calls for DeepSeek, none elsewhere).
	ReasoningReplay string `yaml:"reasoning_replay" json:"reasoning_replay"`
	// Extra fields go into the provider request body as they are (Ollama:
	// keep_alive, options).
	Extra map[string]any `yaml:"extra" json:"extra"`
}

// Load reads the routing file at path, or the built-in default when path is
// empty.
func Load(path string) (*Table, error) {
	if path == "" {
		return Parse(defaultYAML)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("routing: read %s: %w", path, err)
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("routing: %s: %w", path, err)
	}
	return t, nil
}

// Parse parses and validates a routing file (YAML, or JSON, which is YAML).
// Unknown fields are errors, so a typo does not silently change routing.
func Parse(b []byte) (*Table, error) {
	var t Table
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&t); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("routing: parse: %w", err)
	}
	if err := t.validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

func (t *Table) validate() error {
	if t.Providers == nil {
		t.Providers = map[string]*Provider{}
	}
	var problems []string
	for name, p := range t.Providers {
		if p == nil {
			p = &Provider{}
			t.Providers[name] = p
		}
		p.Name = name
		if p.Type == "" && knownTypes[name] {
			p.Type = name
		}
		if !knownTypes[p.Type] {
			problems = append(problems, fmt.Sprintf("providers.%s.type %q is not one of deepseek, qwen, ollama, openai, sim", name, p.Type))
		}
	}
	if len(t.Models) == 0 {
		problems = append(problems, "models: no logical models defined")
	}
	for name, chain := range t.Models {
		if strings.TrimSpace(name) == "" {
			problems = append(problems, "models: empty logical model name")
		}
		for i, tg := range chain {
			where := fmt.Sprintf("models.%s[%d]", name, i)
			if tg == nil {
				problems = append(problems, where+": empty target")
				continue
			}
			if tg.Model == "" {
				problems = append(problems, where+".model is required")
			}
			if _, ok := t.Providers[tg.Provider]; !ok {
				if knownTypes[tg.Provider] {
					t.Providers[tg.Provider] = &Provider{Name: tg.Provider, Type: tg.Provider}
				} else {
					problems = append(problems, fmt.Sprintf("%s.provider %q is not defined under providers", where, tg.Provider))
				}
			}
			switch llm.ReasoningReplay(tg.ReasoningReplay) {
			case llm.ReplayDefault, llm.ReplayNone, llm.ReplayToolCalls, llm.ReplayAll:
			default:
				problems = append(problems, fmt.Sprintf("%s.reasoning_replay %q is not one of none, tool_calls, all", where, tg.ReasoningReplay))
			}
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return errors.New("routing: " + strings.Join(problems, "; "))
	}
	return nil
}

// Names returns the logical model names, sorted.
func (t *Table) Names() []string {
	names := make([]string, 0, len(t.Models))
	for n := range t.Models {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Only restricts every chain to one provider. For a provider of type sim
// that no chain names, every logical model is served by it, with model id
// "sim-<logical name>". Chains left empty stay empty (the model is then
// listed as unavailable).
func (t *Table) Only(provider string) {
	p, ok := t.Providers[provider]
	if !ok && provider == TypeSim {
		p = &Provider{Name: TypeSim, Type: TypeSim}
		t.Providers[TypeSim] = p
	}
	for name, chain := range t.Models {
		var kept []*Target
		for _, tg := range chain {
			if tg.Provider == provider {
				kept = append(kept, tg)
			}
		}
		if len(kept) == 0 && p != nil && p.Type == TypeSim {
			kept = []*Target{{Provider: provider, Model: "sim-" + name}}
		}
		t.Models[name] = kept
	}
}

// Request applies the target's parameters to req as defaults: fields the
// request sets are kept. It returns a copy; req is not modified.
func (tg *Target) Request(req *llm.Request) *llm.Request {
	r := *req
	r.Model = tg.Model
	if r.Options.Temperature == nil {
		r.Options.Temperature = tg.Temperature
	}
	if r.Options.TopP == nil {
		r.Options.TopP = tg.TopP
	}
	if r.Options.MaxTokens == nil {
		r.Options.MaxTokens = tg.MaxTokens
	}
	if r.Options.NumCtx == nil {
		r.Options.NumCtx = tg.NumCtx
	}
	if th := tg.Thinking; th != nil {
		if r.Thinking.Enabled == nil {
			r.Thinking.Enabled = th.Enabled
		}
		if r.Thinking.Effort == "" {
			r.Thinking.Effort = th.Effort
		}
		if r.Thinking.BudgetTokens == nil {
			r.Thinking.BudgetTokens = th.BudgetTokens
		}
	}
	r.Replay = llm.ReasoningReplay(tg.ReasoningReplay)
	r.Extra = tg.Extra
	return &r
}
