package jobservice_test

import (
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

// The model gateway replica relaying the planning call dies mid-call (its
// connections cut, as a kill -9 does): the call is sent again and the
// analysis completes, instead of failing on "error reading from server:
// EOF" as it did in the cluster suite. The connection, made as the
// service makes it (grpcx.Dial), sends the call again.
func TestModelGatewayDeathMidCallIsRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.sim.When(providersim.Match{WithTools: true, LastRole: "user", LastUserContains: "BHP"}).Named("hung plan").Hang().Times(1)
	e.scriptBHPPlan()
	e.scriptSynthesis(stockAnswer)
	addr, cutter := testkit.StartCutter(t, e.gwAddr)
	e.gwAddr = addr
	e.start(analysis.Hooks{})

	root := e.submit("Analyse BHP for investment", "stock_analysis")
	testkit.Eventually(t, 10*time.Second, func() bool { return e.sim.Count() >= 1 }, "the planning call to reach the provider")
	cutter.Cut()

	final := e.waitStatus(root.GetId(), complete, 30*time.Second)
	plans := childrenOf(final, typePlanning)
	if len(plans) != 1 || plans[0].GetAttempts() != 1 {
		t.Errorf("planning jobs %v, want one, in its first attempt (the call was sent again, not the job)", plans)
	}
	planned := 0
	for _, r := range e.sim.ChatRequests() {
		if len(r.Tools) > 0 {
			planned++
		}
	}
	if planned != 2 {
		t.Errorf("the provider saw %d planning calls, want the cut one and its second sending", planned)
	}
}
