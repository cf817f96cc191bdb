package jobservice_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/planner"
)

// A model steered by what it read (a planner's query quoting a document,
// say) plans too much, or malformed calls, or answers at length: every
// analysis stays bounded. A plan of 40 tool calls is sent back (at most
// planner.MaxCalls) and the corrected plan of 2 runs; a plan whose call
// has arguments that are no JSON is corrected the same way (the
// correction round failed on them before); a plan of 40 again after the
// correction fails the analysis saying why; an answer past
// synthesis.MaxAnswerBytes fails it too, and nothing of it is stored.
func TestModelOutputIsBounded(t *testing.T) {
	t.Parallel()
	many := func(r *providersim.Rule) *providersim.Rule {
		for i := range 40 {
			r.ToolCall("get_stock_price", map[string]any{"ticker": fmt.Sprintf("T%03d", i)})
		}
		return r
	}
	good := stockAnswer

	t.Run("a plan of 40 calls, then of 2", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		many(e.sim.When(providersim.Match{WithTools: true, LastRole: "user", LastUserContains: "BHP"}).Named("big plan").Times(1))
		e.sim.When(providersim.Match{WithTools: true, LastRole: "user", LastUserContains: "at most"}).Named("small plan").
			ToolCall("get_stock_price", map[string]any{"ticker": "BHP"}).ToolCall("get_financials", `{"ticker": "BHP", "report_type": "quarterly"}`)
		e.scriptSynthesis(good)
		e.start(analysis.Hooks{})
		root := e.waitStatus(e.submit("Analyse BHP for investment", "stock_analysis").GetId(), complete, 30*time.Second)
		if n := len(childrenOf(root, typeTool)); n != 2 {
			t.Errorf("%d tool jobs, want the corrected plan's 2", n)
		}
		if got := e.market.snapshot(); len(got) != 2 {
			t.Errorf("the market served %v, want the 2 planned calls", got)
		}
	})

	t.Run("a call with arguments that are no JSON, then a valid plan", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.sim.When(providersim.Match{WithTools: true, LastRole: "user", LastUserContains: "BHP"}).Named("bad plan").Times(1).
			ToolCall("get_stock_price", "not json {")
		e.sim.When(providersim.Match{WithTools: true, LastRole: "user"}).Named("fixed plan").ToolCall("get_stock_price", map[string]any{"ticker": "BHP"})
		e.scriptSynthesis(good)
		e.start(analysis.Hooks{})
		e.waitStatus(e.submit("Analyse BHP for investment", "stock_analysis").GetId(), complete, 30*time.Second)
	})

	t.Run("a plan of 40 calls twice", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		many(e.sim.When(providersim.Match{WithTools: true}).Named("big plan"))
		e.start(analysis.Hooks{})
		root := e.waitStatus(e.submit("Analyse BHP for investment", "stock_analysis").GetId(), failed, 30*time.Second)
		if !strings.Contains(root.GetError(), fmt.Sprintf("at most %d", planner.MaxCalls)) {
			t.Errorf("the analysis failed with %q, want the plan's size named", root.GetError())
		}
		if got := e.market.snapshot(); len(got) != 0 {
			t.Errorf("the market served %v, want nothing", got)
		}
	})

	t.Run("an answer of 300 KiB", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.scriptBHPPlan()
		e.scriptSynthesis(map[string]any{"summary": "BHP.", "findings": []any{
			map[string]any{"statement": strings.Repeat("BHP is large. ", 300<<10/14), "source": "get_stock_price"}}})
		e.start(analysis.Hooks{})
		root := e.waitStatus(e.submit("Analyse BHP for investment", "generic_analysis").GetId(), failed, 30*time.Second)
		if !strings.Contains(root.GetError(), "more than the 262144") || root.GetOutput() != nil {
			t.Errorf("the analysis failed with %q, output %v; want the answer's size named and nothing stored", root.GetError(), root.GetOutput() != nil)
		}
	})
}
