package chat_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat/chattest"
)

// A model streams a token at a time; the turn sends the first delta of a
// run of text at once and gathers the rest, so a long answer is a few
// events (each stored on the event bus for resumption), not one per token,
// with the same text.
func TestTextDeltasAreGathered(t *testing.T) {
	t.Parallel()
	const reasoning, answer = "Let me think about the question first.", "The answer is forty-two, as the guide says."
	// One rune per delta, 2 ms apart: about 0.2 s of streaming.
	e := newEnv(t, envOptions{sim: providersim.Options{Flavor: providersim.DeepSeek, ChunkRunes: 1, ChunkDelay: 2 * time.Millisecond}})
	e.sim.When(providersim.Match{}).Reasoning(reasoning).Text(answer)

	rec := &chattest.Recorder{}
	if _, err := e.loop.Send(ctxTimeout(t, 20*time.Second), chat.Request{Scope: testScope, ConversationID: e.conv, Content: "Why?"}, rec.Emit); err != nil {
		t.Fatal(err)
	}
	var answers, thoughts []string
	for _, ev := range rec.Events() {
		if c := ev.GetResponseChunk(); c != nil {
			answers = append(answers, c.GetContent())
		}
		if c := ev.GetReasoningChunk(); c != nil {
			thoughts = append(thoughts, c.GetContent())
		}
	}
	if strings.Join(answers, "") != answer || strings.Join(thoughts, "") != reasoning {
		t.Fatalf("text %q, reasoning %q; want the model's", strings.Join(answers, ""), strings.Join(thoughts, ""))
	}
	if len(answers) > 12 || len(thoughts) > 12 {
		t.Errorf("%d answer and %d reasoning events for %d and %d deltas; want them gathered", len(answers), len(thoughts),
			len([]rune(answer)), len([]rune(reasoning)))
	}
	completed(t, rec)
}

// Gathered text is not held back until the model sends more: it goes when
// the window ends. Deltas spaced wider than the window each go alone
// (held until the next delta or the end, they would come as one event).
func TestGatheredTextGoesWhenTheWindowEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{sim: providersim.Options{Flavor: providersim.DeepSeek, ChunkRunes: 4, ChunkDelay: 150 * time.Millisecond}})
	e.sim.When(providersim.Match{}).Text("One Two Thr Four")

	rec := &chattest.Recorder{}
	if _, err := e.loop.Send(ctxTimeout(t, 20*time.Second), chat.Request{Scope: testScope, ConversationID: e.conv, Content: "Count"}, rec.Emit); err != nil {
		t.Fatal(err)
	}
	var answers []string
	for _, ev := range rec.Events() {
		if c := ev.GetResponseChunk(); c != nil {
			answers = append(answers, c.GetContent())
		}
	}
	if strings.Join(answers, "") != "One Two Thr Four" || len(answers) < 3 {
		t.Errorf("answer events %q; want the 4 deltas, most of them alone", answers)
	}
}
