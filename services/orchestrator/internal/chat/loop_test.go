package chat_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

// TestSeveralIterationsOfToolUse has the model look up two keys one after
// the other, then answer: three iterations, every step streamed and stored,
// and each tool result in front of the model on the next call.
func TestSeveralIterationsOfToolUse(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(*testing.T) conversation.Store) {
		e := newEnv(t, envOptions{store: open(t), sim: providersim.Options{Flavor: providersim.DeepSeek}, tools: []tools.Tool{lookupTool{}}})
		e.sim.When(providersim.Match{LastRole: "user"}).ToolCall("lookup", map[string]any{"key": "a"}).
			Usage(providersim.Usage{PromptTokens: 10, CompletionTokens: 5})
		e.sim.When(providersim.Match{Func: func(r *providersim.Request) bool { return toolMessages(r) == 1 }}).
			Text("Checking b too.").ToolCall("lookup", map[string]any{"key": "b"}).
			Usage(providersim.Usage{PromptTokens: 20, CompletionTokens: 5})
		e.sim.When(providersim.Match{LastRole: "tool"}).Text("a is value-a and b is value-b.").
			Usage(providersim.Usage{PromptTokens: 30, CompletionTokens: 10})

		out, rec, err := e.send(t, ctxTimeout(t, 30*time.Second), "What are a and b?")
		if err != nil {
			t.Fatalf("Send: %v", err)
		}
		c := completed(t, rec)
		if c.GetIterations() != 3 || c.GetMaxIterationsReached() || c.GetTotalTokens() != 80 || c.GetDuration().AsDuration() <= 0 {
			t.Errorf("Completed = %v, want 3 iterations, 80 tokens, not cut off", c)
		}
		if got := text(rec); got != "Checking b too.a is value-a and b is value-b." {
			t.Errorf("streamed text = %q", got)
		}
		var starts []string
		for _, ev := range rec.Events() {
			if s := ev.GetToolCallStart(); s != nil {
				starts = append(starts, s.GetArgumentsJson())
				if s.GetIteration() != int32(len(starts)) {
					t.Errorf("tool call %s started in iteration %d, want %d", s.GetArgumentsJson(), s.GetIteration(), len(starts))
				}
			}
		}
		if diff := cmp.Diff([]string{`{"key":"a"}`, `{"key":"b"}`}, starts); diff != "" {
			t.Errorf("tool calls (-want +got):\n%s", diff)
		}

		reqs := e.sim.ChatRequests()
		if len(reqs) != 3 {
			t.Fatalf("simulator got %d requests, want 3", len(reqs))
		}
		third := reqs[2]
		var results []string
		for _, m := range third.Messages {
			if m.Role == "tool" {
				results = append(results, m.ToolCallID+"="+m.Content)
			}
		}
		firstCall := reqs[1].Messages[len(reqs[1].Messages)-2].ToolCalls
		if len(firstCall) != 1 || len(results) != 2 || results[0] != firstCall[0].ID+"=value-a" || !strings.HasSuffix(results[1], "=value-b") {
			t.Errorf("third request's tool results = %v, want value-a answering %v then value-b", results, firstCall)
		}
		if !third.HasTool("lookup") {
			t.Errorf("tools offered = %v, want lookup", third.Tools)
		}

		msgs := e.messages(t)
		var shape []string
		for _, m := range msgs {
			shape = append(shape, string(m.Role)+":"+m.Content)
		}
		want := []string{"user:What are a and b?", "assistant:", "tool:value-a", "assistant:Checking b too.", "tool:value-b", "assistant:a is value-a and b is value-b."}
		if diff := cmp.Diff(want, shape); diff != "" {
			t.Errorf("stored messages (-want +got):\n%s", diff)
		}
		if msgs[1].ToolCalls[0].Name != "lookup" || msgs[2].ToolCallID != msgs[1].ToolCalls[0].ID || msgs[5].ID != c.GetMessageId() || out.Message.ID != c.GetMessageId() {
			t.Errorf("stored turn does not hang together: %+v; completed message id %s", msgs, c.GetMessageId())
		}
	})
}

// TestParallelToolCallsOverlap has the model ask for three calls in one
// iteration; each call only succeeds if all three run at the same time.
func TestParallelToolCallsOverlap(t *testing.T) {
	t.Parallel()
	gate := newGate()
	gate.peers = 3
	e := newEnv(t, envOptions{sim: providersim.Options{Flavor: providersim.DeepSeek}, tools: []tools.Tool{gate}, cfg: chat.Config{ToolParallelism: 3}})
	e.sim.When(providersim.Match{LastRole: "user"}).ToolCall("gate", `{"n":1}`).ToolCall("gate", `{"n":2}`).ToolCall("gate", `{"n":3}`)
	e.sim.When(providersim.Match{LastRole: "tool"}).Text("done")

	_, rec, err := e.send(t, ctxTimeout(t, 30*time.Second), "go")
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	res := toolResults(rec)
	if len(res) != 3 {
		t.Fatalf("%d tool results, want 3", len(res))
	}
	for _, r := range res {
		if r.GetIsError() {
			t.Errorf("call %s failed: %s", r.GetCallId(), r.GetResult())
		}
	}
	_, _, maxRun, spans := gate.stats()
	latestStart, earliestEnd := spans[0][0], spans[0][1]
	for _, s := range spans {
		if s[0].After(latestStart) {
			latestStart = s[0]
		}
		if s[1].Before(earliestEnd) {
			earliestEnd = s[1]
		}
	}
	if maxRun != 3 || !latestStart.Before(earliestEnd) {
		t.Errorf("calls ran %d at most at once; last start %v, first end %v: they did not overlap", maxRun, latestStart, earliestEnd)
	}
	if completed(t, rec).GetIterations() != 2 {
		t.Errorf("iterations = %d, want 2", completed(t, rec).GetIterations())
	}
}

// TestToolParallelismIsBounded asks for three calls with a bound of two:
// the third waits until one of the first two finishes.
func TestToolParallelismIsBounded(t *testing.T) {
	t.Parallel()
	gate := newGate()
	e := newEnv(t, envOptions{sim: providersim.Options{Flavor: providersim.DeepSeek}, tools: []tools.Tool{gate}, cfg: chat.Config{ToolParallelism: 2}})
	e.sim.When(providersim.Match{LastRole: "user"}).ToolCall("gate", `{"n":1}`).ToolCall("gate", `{"n":2}`).ToolCall("gate", `{"n":3}`)
	e.sim.When(providersim.Match{LastRole: "tool"}).Text("done")

	done := make(chan error, 1)
	go func() {
		_, _, err := e.send(t, ctxTimeout(t, 30*time.Second), "go")
		done <- err
	}()
	testkit.Eventually(t, 10*time.Second, func() bool { s, _, _, _ := gate.stats(); return s >= 2 }, "two calls running")
	close(gate.release)
	if err := <-done; err != nil {
		t.Fatalf("Send: %v", err)
	}
	started, _, maxRun, _ := gate.stats()
	if started != 3 || maxRun != 2 {
		t.Errorf("%d calls started, at most %d at once; want 3 and 2", started, maxRun)
	}
}

// TestMaxIterationsCutOff has a model that never stops calling tools: the
// loop stops at the limit, asks for a closing answer without tools, and
// says so in the answer and the Completed event.
func TestMaxIterationsCutOff(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(*testing.T) conversation.Store) {
		e := newEnv(t, envOptions{store: open(t), sim: providersim.Options{Flavor: providersim.DeepSeek}, tools: []tools.Tool{lookupTool{}}, cfg: chat.Config{MaxIterations: 3}})
		e.sim.When(providersim.Match{WithTools: true}).ToolCall("lookup", map[string]any{"key": "again"})
		e.sim.When(providersim.Match{NoTools: true}).Text("Best effort: value-again.")

		out, rec, err := e.send(t, ctxTimeout(t, 30*time.Second), "Keep looking")
		if err != nil {
			t.Fatalf("Send: %v", err)
		}
		c := completed(t, rec)
		if !c.GetMaxIterationsReached() || c.GetIterations() != 3 {
			t.Errorf("Completed = %v, want max_iterations_reached after 3", c)
		}
		if _, ok := statuses(rec)[chat.StatusMaxIterations]; !ok {
			t.Errorf("no %s status update in %v", chat.StatusMaxIterations, statuses(rec))
		}
		if n := len(toolResults(rec)); n != 3 {
			t.Errorf("%d tool executions, want 3", n)
		}
		reqs := e.sim.ChatRequests()
		if len(reqs) != 4 {
			t.Fatalf("simulator got %d requests, want 3 iterations and 1 closing call", len(reqs))
		}
		last := reqs[3]
		if len(last.Tools) != 0 || !strings.Contains(last.Messages[len(last.Messages)-1].Content, "limit of 3 tool-use iterations") {
			t.Errorf("closing request offers %v and ends with %q; want no tools and the limit notice", last.Tools, last.Messages[len(last.Messages)-1].Content)
		}
		final := out.Message.Content
		if !strings.HasPrefix(final, "I stopped after 3 tool-use iterations") || !strings.HasSuffix(final, "Best effort: value-again.") {
			t.Errorf("final message = %q, want the notice then the closing answer", final)
		}
		if got := text(rec); got != final {
			t.Errorf("streamed text %q differs from the stored answer %q", got, final)
		}
		msgs := e.messages(t)
		if n := len(msgs); n != 1+3*2+1 || msgs[n-1].Content != final {
			t.Errorf("stored %d messages ending %q; want user, 3 x (call, result), final", n, msgs[n-1].Content)
		}
	})
}

// TestFailingToolFedBack: a tool error and arguments that fail the schema
// both reach the model as tool results it can read, and the loop goes on.
func TestFailingToolFedBack(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(*testing.T) conversation.Store) {
		e := newEnv(t, envOptions{store: open(t), sim: providersim.Options{Flavor: providersim.DeepSeek}, tools: []tools.Tool{lookupTool{}}})
		e.sim.When(providersim.Match{LastRole: "user"}).
			ToolCall("lookup", map[string]any{"key": "boom"}).
			ToolCall("lookup", map[string]any{"key": 5}).
			ToolCall("nosuchtool", map[string]any{})
		e.sim.When(providersim.Match{LastRole: "tool"}).Text("The backend is down; I could not look it up.")

		_, rec, err := e.send(t, ctxTimeout(t, 30*time.Second), "Look up boom")
		if err != nil {
			t.Fatalf("Send: %v", err)
		}
		want := []string{"the lookup backend is down", "invalid arguments for lookup", `unknown tool "nosuchtool"`}
		res := toolResults(rec)
		if len(res) != 3 {
			t.Fatalf("%d tool results, want 3", len(res))
		}
		byID := map[string]string{}
		for _, r := range res {
			byID[r.GetCallId()] = r.GetResult()
			if !r.GetIsError() {
				t.Errorf("result %q not marked as an error", r.GetResult())
			}
		}
		second := e.sim.ChatRequests()[1]
		var fed []string
		for _, m := range second.Messages {
			if m.Role == "tool" {
				fed = append(fed, m.Content)
				if byID[m.ToolCallID] != m.Content {
					t.Errorf("model read %q for %s, event said %q", m.Content, m.ToolCallID, byID[m.ToolCallID])
				}
			}
		}
		for i, w := range want {
			if i >= len(fed) || !strings.Contains(fed[i], w) || !strings.HasPrefix(fed[i], "error: ") {
				t.Errorf("tool result %d fed to the model = %q, want an error containing %q", i, fed, w)
			}
		}
		stored := 0
		for _, m := range e.messages(t) {
			if m.Role == conversation.RoleTool && m.ToolError {
				stored++
			}
		}
		if stored != 3 || completed(t, rec).GetIterations() != 2 {
			t.Errorf("%d failed tool results stored, %d iterations; want 3 and 2", stored, completed(t, rec).GetIterations())
		}
	})
}

// TestReasoningStreamedStoredAndSentBack: DeepSeek's reasoning arrives as
// ReasoningChunk deltas, is stored with its assistant turn, and goes back
// to the provider with the turn's tool calls (DeepSeek answers 400
// otherwise, which the preset simulator enforces).
func TestReasoningStreamedStoredAndSentBack(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(*testing.T) conversation.Store) {
		sim := providersim.Preset(providersim.DeepSeek)
		sim.ChunkDelay = 2 * time.Millisecond // deltas arrive apart, as from a real model, so the gateway cannot merge them
		e := newEnv(t, envOptions{store: open(t), sim: sim, tools: []tools.Tool{lookupTool{}}})
		r1 := "The user wants a. I should look it up first."
		r2 := "The lookup returned value-a, so I can answer."
		e.sim.When(providersim.Match{LastRole: "user"}).Reasoning(r1).ToolCall("lookup", map[string]any{"key": "a"})
		e.sim.When(providersim.Match{LastRole: "tool"}).Reasoning(r2).Text("a is value-a.")

		_, rec, err := e.send(t, ctxTimeout(t, 30*time.Second), "What is a?")
		if err != nil {
			t.Fatalf("Send: %v", err)
		}
		got, chunks := reasoningByIteration(rec)
		if diff := cmp.Diff(map[int32]string{1: r1, 2: r2}, got); diff != "" {
			t.Errorf("reasoning by iteration (-want +got):\n%s", diff)
		}
		if chunks < 4 {
			t.Errorf("reasoning came in %d chunks, want it streamed in deltas", chunks)
		}
		msgs := e.messages(t)
		if msgs[1].Reasoning != r1 || msgs[3].Reasoning != r2 {
			t.Errorf("stored reasoning = %q, %q; want %q, %q", msgs[1].Reasoning, msgs[3].Reasoning, r1, r2)
		}
		second := e.sim.ChatRequests()[1]
		if back := second.Messages[len(second.Messages)-2]; back.Role != "assistant" || back.Reasoning != r1 {
			t.Errorf("assistant turn sent back = %+v, want its reasoning %q", back, r1)
		}
	})
}

// TestRetrievalUnavailable: with the indexer down the turn goes on, says
// retrieval was skipped, and the model still answers.
func TestRetrievalUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{sim: providersim.Options{Flavor: providersim.DeepSeek}, search: downIndexer(t)})
	e.sim.When(providersim.Match{}).Text("Answer without context.")

	_, rec, err := e.send(t, ctxTimeout(t, 30*time.Second), "What does the handbook say?")
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	msg, ok := statuses(rec)[chat.StatusRetrievalSkipped]
	if !ok || !strings.Contains(msg, "Unavailable") {
		t.Errorf("status updates %v, want %s naming the failure", statuses(rec), chat.StatusRetrievalSkipped)
	}
	if evs := rec.Events(); evs[0].GetTurnStarted() == nil || evs[1].GetStatusUpdate() == nil {
		t.Errorf("first events are %v, %v, want TurnStarted, then the retrieval status", evs[0].StreamMessageResponse, evs[1].StreamMessageResponse)
	}
	req := e.sim.ChatRequests()[0]
	for _, m := range req.Messages {
		if m.Role == "system" {
			t.Errorf("a system message was sent without retrieval: %q", m.Content)
		}
	}
	if text(rec) != "Answer without context." {
		t.Errorf("answer = %q", text(rec))
	}
}

// TestHistoryWindow: the model sees only the last HistoryWindow stored
// messages before the new one.
func TestHistoryWindow(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, open func(*testing.T) conversation.Store) {
		e := newEnv(t, envOptions{store: open(t), sim: providersim.Options{Flavor: providersim.DeepSeek}, cfg: chat.Config{HistoryWindow: 4}})
		e.sim.When(providersim.Match{}).Text("ok")
		// Six earlier turns through the loop itself: 12 stored messages.
		for i := range 6 {
			if _, _, err := e.send(t, ctxTimeout(t, 30*time.Second), "question "+string(rune('A'+i))); err != nil {
				t.Fatalf("turn %d: %v", i, err)
			}
		}
		if _, _, err := e.send(t, ctxTimeout(t, 30*time.Second), "latest question"); err != nil {
			t.Fatalf("Send: %v", err)
		}
		reqs := e.sim.ChatRequests()
		var seen []string
		for _, m := range reqs[len(reqs)-1].Messages {
			seen = append(seen, m.Role+":"+m.Content)
		}
		want := []string{"user:question E", "assistant:ok", "user:question F", "assistant:ok", "user:latest question"}
		if diff := cmp.Diff(want, seen); diff != "" {
			t.Errorf("messages the model saw (-want +got):\n%s", diff)
		}
		if n := len(e.messages(t)); n != 14 {
			t.Errorf("%d messages stored, want all 14 (the window limits what the model sees, not what is kept)", n)
		}
	})
}

// TestModelFailure: a provider error ends the turn with an ErrorEvent, the
// user message stays stored, and the conversation is free again.
func TestModelFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{sim: providersim.Options{Flavor: providersim.DeepSeek}})
	e.sim.When(providersim.Match{}).Error(503, "Server overloaded").Times(1)
	e.sim.When(providersim.Match{}).Text("recovered")

	_, rec, err := e.send(t, ctxTimeout(t, 30*time.Second), "hello")
	var te *chat.TurnError
	if !errors.As(err, &te) {
		t.Fatalf("Send: %v, want a TurnError", err)
	}
	evs := rec.Events()
	last := evs[len(evs)-1].GetError()
	if last == nil || last.GetCode() != "UNAVAILABLE" || !strings.Contains(last.GetMessage(), "overloaded") {
		t.Errorf("last event = %v, want an UNAVAILABLE ErrorEvent quoting the provider", evs[len(evs)-1].StreamMessageResponse)
	}
	if msgs := e.messages(t); len(msgs) != 1 || msgs[0].Role != conversation.RoleUser {
		t.Errorf("stored %+v, want the user message only", msgs)
	}
	if _, _, err := e.send(t, ctxTimeout(t, 30*time.Second), "again"); err != nil {
		t.Errorf("next message after a failed turn: %v", err)
	}
	if msgs := e.messages(t); len(msgs) != 3 {
		t.Errorf("after the retry %d messages are stored, want 3", len(msgs))
	}
}

// TestMalformedOrTooManyToolCalls: a model steered by what it read asks
// for a tool with arguments that are no JSON, then for 40 calls in one
// step. The first is refused by the tool and the conversation goes on:
// its history, which the model gateway refuses with such arguments, sends
// "{}" for them (a malformed call broke every later turn of its
// conversation before). Of the 40, the first MaxToolCalls run, a status
// update says so, and only they are kept (a message of more than 256
// broke the conversation the same way).
func TestMalformedOrTooManyToolCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{sim: providersim.Options{Flavor: providersim.DeepSeek}, tools: []tools.Tool{lookupTool{}}, cfg: chat.Config{MaxToolCalls: 5}})
	e.sim.When(providersim.Match{LastRole: "user", LastUserContains: "broken"}).ToolCall("lookup", "not json {")
	storm := e.sim.When(providersim.Match{LastRole: "user", LastUserContains: "storm"})
	for i := range 40 {
		storm.ToolCall("lookup", map[string]any{"key": fmt.Sprint(i)})
	}
	e.sim.When(providersim.Match{LastRole: "tool"}).Text("done")
	e.sim.When(providersim.Match{LastRole: "user"}).Text("fine")

	for _, msg := range []string{"broken args", "next", "storm", "and now?"} {
		_, rec, err := e.send(t, ctxTimeout(t, 30*time.Second), msg)
		if err != nil {
			t.Fatalf("%q: %v", msg, err)
		}
		if msg == "storm" {
			if n := len(toolResults(rec)); n != 5 {
				t.Errorf("%d of 40 calls ran, want 5", n)
			}
			if _, ok := statuses(rec)[chat.StatusToolCallsCut]; !ok {
				t.Errorf("no %s status update in %v", chat.StatusToolCallsCut, statuses(rec))
			}
		}
	}
	last := e.sim.ChatRequests()[len(e.sim.ChatRequests())-1]
	var calls int
	for _, m := range last.Messages {
		calls += len(m.ToolCalls)
		for _, c := range m.ToolCalls {
			if !json.Valid([]byte(c.Arguments)) {
				t.Errorf("the history sends arguments %q", c.Arguments)
			}
		}
	}
	if calls != 1+5 {
		t.Errorf("the last request's history holds %d tool calls, want the malformed one and the 5 that ran", calls)
	}
}
