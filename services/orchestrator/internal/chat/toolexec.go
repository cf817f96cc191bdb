package chat

import (
	"encoding/json"
	"sort"
	"sync"
	"time"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

// cancelledResult is what a tool call interrupted by the client's
// disconnect records.
const cancelledResult = "error: cancelled: the client disconnected before the tool finished"

// toolOutcome is the result of one call, in call order.
type toolOutcome struct {
	call   tools.Call
	result tools.Result
	done   bool // false: interrupted, result is cancelledResult
}

// runTools executes one iteration's tool calls, at most ToolParallelism at
// a time, emitting ToolCallStart and ToolCallResult for each. It returns the
// outcomes in call order and the time during which at least one tool was
// running. If ctx ends first it returns at once: calls not finished by then
// are marked interrupted (a tool that ignores its context keeps running in
// the background, but its result is discarded).
func (t *turn) runTools(iteration int, calls []*modelv1.ToolCall) ([]toolOutcome, time.Duration) {
	out := make([]toolOutcome, len(calls))
	for i, c := range calls {
		out[i] = toolOutcome{
			call: tools.Call{ID: c.GetId(), Name: c.GetName(), Arguments: json.RawMessage(c.GetArgumentsJson()), Scope: t.req.Scope, ConversationID: t.conv.ID},
		}
	}
	var (
		mu        sync.Mutex // guards out[i].result, out[i].done and spans
		spans     [][2]time.Time
		remaining = len(calls)
		allDone   = make(chan struct{})
		sem       = make(chan struct{}, t.l.cfg.ToolParallelism)
	)
	for i := range out {
		go func() {
			select {
			case sem <- struct{}{}:
			case <-t.ctx.Done():
				return
			}
			defer func() { <-sem }()
			call := out[i].call
			t.events.toolStart(iteration, call)
			start := time.Now()
			res := t.tools.Execute(t.ctx, call)
			end := time.Now()
			if t.ctx.Err() != nil && res.IsError {
				res.Content = cancelledResult
			}
			// Sent before the call counts as done: the last one done lets
			// the turn go on, and a result sent after the turn's next
			// events (its completion, even) arrived out of place or not at
			// all.
			t.events.toolResult(call, res)
			mu.Lock()
			out[i].result, out[i].done = res, true
			spans = append(spans, [2]time.Time{start, end})
			remaining--
			if remaining == 0 {
				close(allDone)
			}
			mu.Unlock()
		}()
	}
	select {
	case <-allDone:
	case <-t.ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	res := make([]toolOutcome, len(out))
	for i, o := range out {
		if !o.done {
			o.result = tools.Result{Content: cancelledResult, IsError: true}
		}
		res[i] = o
	}
	return res, union(spans)
}

// union returns the total length of the union of the spans.
func union(spans [][2]time.Time) time.Duration {
	sort.Slice(spans, func(i, j int) bool { return spans[i][0].Before(spans[j][0]) })
	var total time.Duration
	var cur [2]time.Time
	for i, s := range spans {
		switch {
		case i == 0:
			cur = s
		case s[0].After(cur[1]):
			total += cur[1].Sub(cur[0])
			cur = s
		case s[1].After(cur[1]):
			cur[1] = s[1]
		}
	}
	if len(spans) > 0 {
		total += cur[1].Sub(cur[0])
	}
	return total
}
