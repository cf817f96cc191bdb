// Package strategy is how one iteration of the chat loop talks to the
// model. A Strategy names a configuration value and shapes the request for
// its provider family (thinking on or off, what the provider rejects, whether
// the call must stream upstream); Run performs the call through ModelService
// in the configured streaming mode and reports what the model answered.
//
// Adding a strategy means adding one small type implementing Strategy and
// listing it in Builtin; its Name is the configuration value.
package strategy

import (
	"fmt"
	"slices"
	"strings"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// Mode is how a turn's output reaches the client.
type Mode int

// The modes.
const (
	// Progressive streams token deltas of content and reasoning as they
	// arrive (chat UIs).
	Progressive Mode = iota + 1
	// FinalOnly emits each iteration's reasoning and the final answer
	// whole, once complete (internal callers, batch use).
	FinalOnly
)

// String returns the configuration spelling.
func (m Mode) String() string {
	switch m {
	case Progressive:
		return "PROGRESSIVE"
	case FinalOnly:
		return "FINAL_ONLY"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses "PROGRESSIVE" or "FINAL_ONLY", in any case.
func ParseMode(s string) (Mode, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "PROGRESSIVE":
		return Progressive, nil
	case "FINAL_ONLY":
		return FinalOnly, nil
	}
	return 0, fmt.Errorf("unknown streaming mode %q: want PROGRESSIVE or FINAL_ONLY", s)
}

// Strategy shapes the model request of one loop iteration. Implementations
// are stateless and safe for concurrent use.
type Strategy interface {
	// Name is the configuration value that selects the strategy, e.g.
	// "deepseek_single".
	Name() string
	// Prepare adjusts req (already holding model, messages and tools) for
	// the strategy's provider family and reports whether the call must
	// stream upstream; a non-streamed call is one unary Chat.
	Prepare(req *modelv1.ChatRequest, mode Mode) (stream bool)
}

// Builtin returns the built-in strategies.
func Builtin() []Strategy {
	return []Strategy{DeepSeekSingle{}, QwenSingleThinking{}, QwenSingleInstruct{}, OllamaSingle{}}
}

// DeepSeekSingle is one DeepSeek chat model per iteration with the route's
// default thinking setting. Reasoning, when the model produces it, is
// streamed, stored, and sent back with the turn's tool calls, which DeepSeek
// requires.
type DeepSeekSingle struct{}

// Name implements Strategy.
func (DeepSeekSingle) Name() string { return "deepseek_single" }

// Prepare implements Strategy.
func (DeepSeekSingle) Prepare(_ *modelv1.ChatRequest, mode Mode) bool { return mode == Progressive }

// QwenSingleThinking is one Qwen model with thinking on. DashScope rejects
// thinking on non-streaming calls, so it always streams upstream; in
// FINAL_ONLY mode the stream is aggregated before anything is emitted.
type QwenSingleThinking struct{}

// Name implements Strategy.
func (QwenSingleThinking) Name() string { return "qwen_single_thinking" }

// Prepare implements Strategy.
func (QwenSingleThinking) Prepare(req *modelv1.ChatRequest, _ Mode) bool {
	req.Thinking = &modelv1.ThinkingOptions{Enabled: ptr(true)}
	return true
}

// QwenSingleInstruct is one Qwen model with thinking off.
type QwenSingleInstruct struct{}

// Name implements Strategy.
func (QwenSingleInstruct) Name() string { return "qwen_single_instruct" }

// Prepare implements Strategy.
func (QwenSingleInstruct) Prepare(req *modelv1.ChatRequest, mode Mode) bool {
	req.Thinking = &modelv1.ThinkingOptions{Enabled: ptr(false)}
	return mode == Progressive
}

// OllamaSingle is one local Ollama model with its default thinking
// setting. It never sends a tool choice, which Ollama's OpenAI-compatible
// endpoint rejects.
type OllamaSingle struct{}

// Name implements Strategy.
func (OllamaSingle) Name() string { return "ollama_single" }

// Prepare implements Strategy.
func (OllamaSingle) Prepare(req *modelv1.ChatRequest, mode Mode) bool {
	req.ToolChoice = nil
	return mode == Progressive
}

func ptr[T any](v T) *T { return &v }

// Set is the strategies a service offers, with a default. It is immutable
// and safe for concurrent use.
type Set struct {
	byName map[string]Strategy
	names  []string
	def    Strategy
}

// NewSet returns a Set of strategies whose default is the one named
// defaultName. It fails on a duplicate name or an unknown default.
func NewSet(defaultName string, strategies ...Strategy) (*Set, error) {
	s := &Set{byName: map[string]Strategy{}}
	for _, st := range strategies {
		if _, dup := s.byName[st.Name()]; dup {
			return nil, fmt.Errorf("strategy %q listed twice", st.Name())
		}
		s.byName[st.Name()] = st
		s.names = append(s.names, st.Name())
	}
	slices.Sort(s.names)
	def, ok := s.byName[defaultName]
	if !ok {
		return nil, fmt.Errorf("unknown strategy %q: want one of %s", defaultName, strings.Join(s.names, ", "))
	}
	s.def = def
	return s, nil
}

// Lookup returns the strategy called name, the default for "".
func (s *Set) Lookup(name string) (Strategy, bool) {
	if name == "" {
		return s.def, true
	}
	st, ok := s.byName[name]
	return st, ok
}

// Default returns the default strategy.
func (s *Set) Default() Strategy { return s.def }

// Names lists the strategy names, sorted.
func (s *Set) Names() []string { return slices.Clone(s.names) }
