package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat/chattest"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/memstore"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/mongostore"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/retrieval"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/strategy"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

var testScope = &commonv1.Scope{TenantId: "acme", ProjectId: "chat"}

// storeKinds are the storage modes every loop test runs over.
var storeKinds = []struct {
	name string
	open func(t *testing.T) conversation.Store
}{
	{"memory", func(*testing.T) conversation.Store { return memstore.New() }},
	{"mongo", func(t *testing.T) conversation.Store {
		s, err := mongostore.New(context.Background(), testkit.MongoDB(t))
		if err != nil {
			t.Fatalf("mongostore.New: %v", err)
		}
		return s
	}},
}

// forEachStore runs body once per storage mode, in parallel subtests.
func forEachStore(t *testing.T, body func(t *testing.T, open func(t *testing.T) conversation.Store)) {
	t.Helper()
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			body(t, k.open)
		})
	}
}

// env is a loop over a real store and the real model gateway in front of
// a scripted simulator, with one conversation ready.
type env struct {
	model *chattest.Model
	sim   *providersim.Server
	store conversation.Store
	loop  *chat.Loop
	conv  string
}

type envOptions struct {
	store    conversation.Store
	sim      providersim.Options
	cfg      chat.Config
	tools    []tools.Tool
	strategy string
	search   chat.Searcher
	toolOpts tools.Options
	models   []string // extra logical models routed to the simulator
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	if o.store == nil {
		o.store = memstore.New()
	}
	model := chattest.StartModel(t, o.sim, o.models...)
	reg, err := tools.NewRegistry(o.toolOpts, o.tools...)
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	set, err := strategy.NewSet("deepseek_single", strategy.Builtin()...)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.Model == "" {
		o.cfg.Model = chattest.ModelName
	}
	if o.cfg.Holder == "" {
		o.cfg.Holder = "test-replica"
	}
	loop, err := chat.New(o.cfg, chat.Deps{Store: o.store, Model: model.Client, Tools: reg, Strategies: set, Search: o.search})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{model: model, sim: model.Sim, store: o.store, loop: loop}
	e.conv = e.newConversation(t, o.strategy)
	return e
}

func (e *env) newConversation(t *testing.T, strat string) string {
	t.Helper()
	if strat == "" {
		strat = "deepseek_single"
	}
	id := fmt.Sprintf("conv-%d", time.Now().UnixNano())
	now := time.Now()
	err := e.store.Create(context.Background(), &conversation.Conversation{
		ID: id, Scope: conversation.Scope{TenantID: testScope.TenantId, ProjectID: testScope.ProjectId},
		Caller: "alice", Strategy: strat, CreateTime: now, UpdateTime: now,
	})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return id
}

// send runs one turn and returns its events.
func (e *env) send(t *testing.T, ctx context.Context, content string) (*chat.Outcome, *chattest.Recorder, error) {
	t.Helper()
	rec := &chattest.Recorder{}
	out, err := e.loop.Send(ctx, chat.Request{Scope: testScope, ConversationID: e.conv, Content: content}, rec.Emit)
	return out, rec, err
}

// userMessages returns the contents of the conversation's stored user
// messages, in order.
func (e *env) userMessages(t *testing.T) []string {
	t.Helper()
	var users []string
	for _, m := range e.messages(t) {
		if m.Role == conversation.RoleUser {
			users = append(users, m.Content)
		}
	}
	return users
}

func (e *env) messages(t *testing.T) []conversation.Message {
	t.Helper()
	msgs, err := e.store.Messages(context.Background(), conversation.Scope{TenantID: testScope.TenantId, ProjectID: testScope.ProjectId}, e.conv, 0)
	if err != nil {
		t.Fatalf("Messages: %v", err)
	}
	return msgs
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// --- reading events -------------------------------------------------------

func completed(t *testing.T, rec *chattest.Recorder) *orchestratorv1.Completed {
	t.Helper()
	evs := rec.Events()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	c := evs[len(evs)-1].GetCompleted()
	if c == nil {
		t.Fatalf("last event is %v, want Completed", evs[len(evs)-1].StreamMessageResponse)
	}
	return c
}

// text joins the ResponseChunk contents.
func text(rec *chattest.Recorder) string {
	var b strings.Builder
	for _, e := range rec.Events() {
		b.WriteString(e.GetResponseChunk().GetContent())
	}
	return b.String()
}

// reasoningByIteration joins ReasoningChunk contents per iteration and
// counts the chunks.
func reasoningByIteration(rec *chattest.Recorder) (map[int32]string, int) {
	out, n := map[int32]string{}, 0
	for _, e := range rec.Events() {
		if r := e.GetReasoningChunk(); r != nil {
			out[r.GetIteration()] += r.GetContent()
			n++
		}
	}
	return out, n
}

func toolResults(rec *chattest.Recorder) []*orchestratorv1.ToolCallResult {
	var out []*orchestratorv1.ToolCallResult
	for _, e := range rec.Events() {
		if r := e.GetToolCallResult(); r != nil {
			out = append(out, r)
		}
	}
	return out
}

func statuses(rec *chattest.Recorder) map[string]string {
	out := map[string]string{}
	for _, e := range rec.Events() {
		if s := e.GetStatusUpdate(); s != nil {
			out[s.GetKind()] = s.GetMessage()
		}
	}
	return out
}

// toolMessages counts the tool results in a request the simulator received.
func toolMessages(r *providersim.Request) int {
	n := 0
	for _, m := range r.Messages {
		if m.Role == "tool" {
			n++
		}
	}
	return n
}

// --- tools ---------------------------------------------------------------

// lookupTool answers {"key": k} with "value-<k>", and fails for "boom".
type lookupTool struct{}

func (lookupTool) Name() string        { return "lookup" }
func (lookupTool) Description() string { return "Looks up a key." }
func (lookupTool) Schema() string {
	return `{"type":"object","properties":{"key":{"type":"string"}},"required":["key"],"additionalProperties":false}`
}
func (lookupTool) Execute(_ context.Context, c tools.Call) (string, error) {
	var a struct{ Key string }
	if err := json.Unmarshal(c.Arguments, &a); err != nil {
		return "", err
	}
	if a.Key == "boom" {
		return "", errors.New("the lookup backend is down")
	}
	return "value-" + a.Key, nil
}

// gateTool records when each call runs and holds it until released (or its
// context ends).
type gateTool struct {
	mu      sync.Mutex // guards the fields below
	running int
	maxRun  int
	started int
	spans   [][2]time.Time
	release chan struct{}
	// peers, if > 0, makes a call wait until that many calls are running at
	// once instead of waiting for release.
	peers int
}

func newGate() *gateTool { return &gateTool{release: make(chan struct{})} }

func (*gateTool) Name() string        { return "gate" }
func (*gateTool) Description() string { return "Waits." }
func (*gateTool) Schema() string      { return `{"type":"object","properties":{"n":{"type":"integer"}}}` }
func (g *gateTool) Execute(ctx context.Context, _ tools.Call) (string, error) {
	start := time.Now()
	g.mu.Lock()
	g.running++
	g.started++
	g.maxRun = max(g.maxRun, g.running)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.spans = append(g.spans, [2]time.Time{start, time.Now()})
		g.mu.Unlock()
	}()
	if g.peers > 0 {
		deadline := time.NewTimer(10 * time.Second)
		defer deadline.Stop()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			g.mu.Lock()
			together := g.started >= g.peers
			g.mu.Unlock()
			if together {
				return "met my peers", nil
			}
			select {
			case <-tick.C:
			case <-deadline.C:
				return "", errors.New("peers never started: calls did not run in parallel")
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
	}
	select {
	case <-g.release:
		return "released", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (g *gateTool) stats() (started, running, maxRun int, spans [][2]time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.started, g.running, g.maxRun, append([][2]time.Time(nil), g.spans...)
}

// downIndexer is a Searcher whose indexer address has nobody listening.
func downIndexer(t *testing.T) *retrieval.Searcher {
	t.Helper()
	conn, err := grpc.NewClient(chattest.UnreachableAddr(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return retrieval.New(indexerv1.NewSearchServiceClient(conn), retrieval.Options{Timeout: 5 * time.Second})
}
