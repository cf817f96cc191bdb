package strategy_test

import (
	"strings"
	"testing"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/strategy"
)

func TestParseMode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]strategy.Mode{"PROGRESSIVE": strategy.Progressive, " final_only ": strategy.FinalOnly} {
		if got, err := strategy.ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := strategy.ParseMode("STREAMING"); err == nil {
		t.Error("ParseMode accepted an unknown mode")
	}
}

func TestSet(t *testing.T) {
	t.Parallel()
	set, err := strategy.NewSet("qwen_single_instruct", strategy.Builtin()...)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(set.Names(), ","); got != "deepseek_single,ollama_single,qwen_single_instruct,qwen_single_thinking" {
		t.Errorf("Names() = %s", got)
	}
	if s, ok := set.Lookup(""); !ok || s.Name() != "qwen_single_instruct" {
		t.Errorf("Lookup(\"\") = %v, want the default", s)
	}
	if _, ok := set.Lookup("gpt_magic"); ok {
		t.Error("Lookup found an unknown strategy")
	}
	if _, err := strategy.NewSet("gpt_magic", strategy.Builtin()...); err == nil || !strings.Contains(err.Error(), "deepseek_single") {
		t.Errorf("unknown default: %v, want an error listing the strategies", err)
	}
	if _, err := strategy.NewSet("deepseek_single", strategy.DeepSeekSingle{}, strategy.DeepSeekSingle{}); err == nil {
		t.Error("a strategy listed twice was accepted")
	}
}

// TestPrepare pins what each strategy asks of its provider family.
func TestPrepare(t *testing.T) {
	t.Parallel()
	on, off := true, false
	tests := []struct {
		s          strategy.Strategy
		mode       strategy.Mode
		wantStream bool
		thinking   *bool
		toolChoice bool
	}{
		{strategy.DeepSeekSingle{}, strategy.Progressive, true, nil, true},
		{strategy.DeepSeekSingle{}, strategy.FinalOnly, false, nil, true},
		{strategy.QwenSingleThinking{}, strategy.Progressive, true, &on, true},
		{strategy.QwenSingleThinking{}, strategy.FinalOnly, true, &on, true}, // DashScope rejects thinking without streaming
		{strategy.QwenSingleInstruct{}, strategy.FinalOnly, false, &off, true},
		{strategy.OllamaSingle{}, strategy.Progressive, true, nil, false}, // Ollama /v1 rejects tool_choice
	}
	for _, tc := range tests {
		t.Run(tc.s.Name()+"/"+tc.mode.String(), func(t *testing.T) {
			req := &modelv1.ChatRequest{ToolChoice: &modelv1.ToolChoice{Mode: modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO}}
			stream := tc.s.Prepare(req, tc.mode)
			if stream != tc.wantStream {
				t.Errorf("stream = %v, want %v", stream, tc.wantStream)
			}
			switch {
			case tc.thinking == nil && req.GetThinking() != nil:
				t.Errorf("thinking = %v, want the route's default", req.GetThinking())
			case tc.thinking != nil && (req.GetThinking() == nil || req.GetThinking().GetEnabled() != *tc.thinking):
				t.Errorf("thinking = %v, want enabled=%v", req.GetThinking(), *tc.thinking)
			}
			if (req.GetToolChoice() != nil) != tc.toolChoice {
				t.Errorf("tool choice = %v, want present=%v", req.GetToolChoice(), tc.toolChoice)
			}
		})
	}
}
