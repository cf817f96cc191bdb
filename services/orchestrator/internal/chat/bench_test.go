package chat_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/agentmesh/agentmesh/libs/events"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat/chattest"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/mongostore"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/grpcapi"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/strategy"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

// toolIterations is how many tool-using iterations each benchmark turn has
// before the final answer.
const toolIterations = 4

// BenchmarkLoopIteration measures the orchestrator's own time per loop
// iteration, model and tool time excluded, with Mongo storage (the
// embedded FerretDB): turns of five iterations (four with an instant tool,
// then the answer) through the gRPC API, against the real model gateway in
// front of a simulator that answers at once.
//
// The loop times every iteration itself (IterationStats): the time spent
// waiting on ModelService and on tools is measured where it happens and
// subtracted, so what remains is our code: building requests, reading the
// stream, emitting events over gRPC, validating and dispatching tool calls,
// queueing messages for storage. It reports:
//
//   - overhead-p50-µs / overhead-p99-µs: that per-iteration time;
//   - turn-overhead-per-iter-p50-µs: a turn's wall time minus all its model
//     and tool time, divided by its iterations, so the per-turn costs
//     (taking and releasing the lease, loading history, the final flush to
//     Mongo) are included;
//   - model-p50-µs: the baseline in the same run, one instant model call
//     through the gateway, and overhead/model, the ratio against it;
//   - turn-wall-p50-µs: a whole turn as its client sees it.
//
// It runs without an event bus and with one (resumable turns: every event
// is published to JetStream before the client gets it, which the model
// time partly hides: answer chunks are published while the model streams),
// reporting for the latter publishes/turn.
func BenchmarkLoopIteration(b *testing.B) {
	for _, resumable := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "resumable"}[resumable]
		b.Run(name, func(b *testing.B) {
			var bus *events.Bus
			if resumable {
				bus = newBusB(b)
			}
			benchmarkLoopIteration(b, bus)
		})
	}
}

// newBusB connects to a fresh JetStream server with the mesh's streams.
func newBusB(b *testing.B) *events.Bus {
	b.Helper()
	bus, err := events.Connect(context.Background(), testkit.NewNATS(b).URL(), "chat-bench", slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bus.Close() })
	if err := bus.EnsureStreams(context.Background()); err != nil {
		b.Fatal(err)
	}
	return bus
}

func benchmarkLoopIteration(b *testing.B, bus *events.Bus) {
	model := chattest.StartModel(b, providersim.Options{Flavor: providersim.DeepSeek, NoRecord: true, ChunkRunes: 64})
	model.Sim.When(providersim.Match{Func: func(r *providersim.Request) bool { return toolResultsThisTurn(r) < toolIterations }}).
		Text("Looking.").ToolCall("lookup", map[string]any{"key": "k"})
	model.Sim.When(providersim.Match{}).Text("Here is the answer.")

	store, err := mongostore.New(context.Background(), testkit.MongoDB(b))
	if err != nil {
		b.Fatal(err)
	}
	reg, _ := tools.NewRegistry(tools.Options{}, lookupTool{})
	set, _ := strategy.NewSet("deepseek_single", strategy.Builtin()...)
	var (
		mu    sync.Mutex
		stats []chat.IterationStats
	)
	loop, err := chat.New(chat.Config{Model: chattest.ModelName}, chat.Deps{
		Store: store, Model: model.Client, Tools: reg, Strategies: set, Events: bus,
		Observe: func(s chat.IterationStats) { mu.Lock(); stats = append(stats, s); mu.Unlock() },
	})
	if err != nil {
		b.Fatal(err)
	}
	conn := testkit.StartGRPC(b, func(s *grpc.Server) {
		orchestratorv1.RegisterConversationServiceServer(s, grpcapi.NewConversations(store, loop, set))
	})
	client := orchestratorv1.NewConversationServiceClient(conn)
	ctx := context.Background()
	newConv := func() string {
		resp, err := client.CreateConversation(ctx, &orchestratorv1.CreateConversationRequest{Scope: testScope})
		if err != nil {
			b.Fatal(err)
		}
		return resp.GetConversation().GetId()
	}
	turn := func(conv string) time.Duration {
		start := time.Now()
		st, err := client.StreamMessage(ctx, &orchestratorv1.StreamMessageRequest{Scope: testScope, ConversationId: conv, Content: "What is k?"})
		if err != nil {
			b.Fatal(err)
		}
		for {
			ev, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if e := ev.GetError(); e != nil {
				b.Fatalf("turn failed: %v", e)
			}
		}
		return time.Since(start)
	}

	// Warm up connections, indexes and the simulator.
	conv := newConv()
	for range 3 {
		turn(conv)
	}
	mu.Lock()
	stats = nil
	mu.Unlock()

	var turnPerIter, walls []float64
	firstSeq := lastSeq(b, bus)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%10 == 0 {
			conv = newConv() // conversations of up to ten turns, so the history window fills
		}
		mu.Lock()
		before := len(stats)
		mu.Unlock()
		wall := turn(conv)
		mu.Lock()
		var waited time.Duration
		its := stats[before:]
		for _, s := range its {
			waited += s.Model + s.Tools
		}
		mu.Unlock()
		turnPerIter = append(turnPerIter, float64(wall-waited)/float64(len(its))/1e3)
		walls = append(walls, float64(wall)/1e3)
	}
	b.StopTimer()
	if bus != nil {
		b.ReportMetric(float64(lastSeq(b, bus)-firstSeq)/float64(b.N), "publishes/turn")
	}
	b.ReportMetric(percentile(walls, 0.50), "turn-wall-p50-µs")

	mu.Lock()
	defer mu.Unlock()
	var overhead, modelTime []float64
	for _, s := range stats {
		overhead = append(overhead, float64(s.Overhead())/1e3)
		modelTime = append(modelTime, float64(s.Model)/1e3)
	}
	p50 := percentile(overhead, 0.50)
	b.ReportMetric(p50, "overhead-p50-µs")
	b.ReportMetric(percentile(overhead, 0.99), "overhead-p99-µs")
	b.ReportMetric(percentile(turnPerIter, 0.50), "turn-overhead-per-iter-p50-µs")
	b.ReportMetric(percentile(modelTime, 0.50), "model-p50-µs")
	b.ReportMetric(p50/percentile(modelTime, 0.50), "overhead/model")
	b.ReportMetric(float64(len(stats))/float64(b.N), "iterations/turn")
}

// lastSeq is the last sequence of AM_EVENTS, 0 without a bus.
func lastSeq(b *testing.B, bus *events.Bus) uint64 {
	b.Helper()
	if bus == nil {
		return 0
	}
	s, err := bus.JetStream().Stream(context.Background(), events.StreamEvents)
	if err != nil {
		b.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// toolResultsThisTurn counts the tool results after the last user message.
func toolResultsThisTurn(r *providersim.Request) int {
	n := 0
	for i := len(r.Messages) - 1; i >= 0 && r.Messages[i].Role != "user"; i-- {
		if r.Messages[i].Role == "tool" {
			n++
		}
	}
	return n
}
