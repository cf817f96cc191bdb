package providersim

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Flavor is the provider dialect the simulator speaks on its OpenAI-style
// endpoints. The Ollama native endpoints (/api/...) are served by every
// flavour.
type Flavor string

// The flavours.
const (
	// OpenAI is a plain OpenAI-compatible server (vLLM, llama.cpp, LM Studio).
	OpenAI Flavor = "openai"
	// DeepSeek is api.deepseek.com: reasoning_content, cache-hit usage.
	DeepSeek Flavor = "deepseek"
	// Qwen is DashScope's compatible mode: reasoning_content, "usage": null
	// on every chunk but the last.
	Qwen Flavor = "qwen"
	// Ollama is an Ollama server: its native API, and on /v1 reasoning in a
	// field named "reasoning".
	Ollama Flavor = "ollama"
)

// Options configures a Sim. The zero value is a clean OpenAI-compatible server
// that accepts any model and any (or no) API key.
type Options struct {
	// Flavor is the dialect; empty means OpenAI.
	Flavor Flavor
	// Models are the model ids listed by /models and /api/tags. When set, chat
	// and embedding requests for other models get 404 (model not found).
	// Empty: every model is accepted and "sim" is listed.
	Models []string
	// APIKeys, when set, are the only accepted `Authorization: Bearer` keys
	// on the OpenAI-style endpoints; anything else gets 401.
	APIKeys []string
	// Latency is waited before each response's headers.
	Latency time.Duration
	// ChunkDelay is waited between stream chunks.
	ChunkDelay time.Duration
	// ChunkRunes is how many runes of text go in one stream delta (default 8).
	ChunkRunes int
	// EmbeddingDim is the default embedding length (default 64).
	EmbeddingDim int
	// NoRecord turns request recording off (load tests).
	NoRecord bool
	// Faults switches on provider quirks.
	Faults Faults
}

// Faults are provider behaviours a client must survive. Each is off by
// default; Preset turns on the ones the provider is documented to have.
type Faults struct {
	// KeepAliveComments is how many ": keep-alive" SSE comments, each followed
	// by a blank line, precede the first event of a stream (DeepSeek while
	// queued).
	KeepAliveComments int
	// BlankLinesBeforeJSON is how many blank lines precede a non-streaming
	// JSON body (DeepSeek under load).
	BlankLinesBeforeJSON int
	// DataWithoutSpace writes "data:{...}" instead of "data: {...}".
	DataWithoutSpace bool
	// UsageWithChoices attaches the usage to the chunk that carries the finish
	// reason instead of a final chunk with `choices: []`.
	UsageWithChoices bool
	// EmptyIDsOnLaterToolDeltas sends `"id": ""` and an empty name on every
	// tool-call delta after the first of each call (Qwen).
	EmptyIDsOnLaterToolDeltas bool
	// RepeatToolIDs repeats the id and name on every tool-call delta (some
	// Qwen models).
	RepeatToolIDs bool
	// InterleaveToolDeltas interleaves the argument fragments of parallel
	// tool calls, so consecutive deltas belong to different indexes.
	InterleaveToolDeltas bool
	// ToolArgsInOneChunk sends each call's whole arguments in its first delta.
	ToolArgsInOneChunk bool
	// RequireReasoningAfterToolCalls answers 400 when an assistant message
	// that made tool calls comes back without reasoning_content (DeepSeek
	// thinking mode).
	RequireReasoningAfterToolCalls bool
	// RejectReasoningInHistory answers 400 when any message carries
	// reasoning_content (older DeepSeek reasoner models).
	RejectReasoningInHistory bool
	// RejectNonStreamingThinking answers 400 invalid_parameter_error to a
	// non-streaming request with enable_thinking true (Qwen).
	RejectNonStreamingThinking bool
	// RequireJSONWordInPrompt answers 400 to json_object requests whose
	// messages never say "json" (DeepSeek).
	RequireJSONWordInPrompt bool
	// BlankJSONModeContent is how many JSON-mode answers come back with blank
	// content and finish_reason "stop" before real ones (DeepSeek).
	BlankJSONModeContent int
	// RejectToolChoice answers 400 when tool_choice is sent (Ollama /v1).
	RejectToolChoice bool
}

// Preset returns Options for flavour f with that provider's documented
// quirks switched on.
func Preset(f Flavor) Options {
	o := Options{Flavor: f}
	switch f {
	case DeepSeek:
		o.Faults = Faults{
			KeepAliveComments:              2,
			BlankLinesBeforeJSON:           2,
			RequireReasoningAfterToolCalls: true,
			RequireJSONWordInPrompt:        true,
		}
	case Qwen:
		o.Faults = Faults{
			EmptyIDsOnLaterToolDeltas:  true,
			RejectNonStreamingThinking: true,
		}
	case Ollama:
		o.Faults = Faults{RejectToolChoice: true}
	}
	return o
}

// Sim is a scripted provider. Create it with New or Start.
type Sim struct {
	opts Options

	mu          sync.Mutex // guards the fields below and every Rule's mutable state
	rules       []*Rule
	requests    []Request
	chatCount   int
	blankLeft   int
	disconnects int
	seq         int
}

// New returns a Sim with opts.
func New(opts Options) *Sim {
	if opts.Flavor == "" {
		opts.Flavor = OpenAI
	}
	if opts.ChunkRunes <= 0 {
		opts.ChunkRunes = 8
	}
	if opts.EmbeddingDim <= 0 {
		opts.EmbeddingDim = 64
	}
	return &Sim{opts: opts, blankLeft: opts.Faults.BlankJSONModeContent}
}

// Options returns the options the Sim was created with (defaults applied).
func (s *Sim) Options() Options { return s.opts }

// Handler returns the HTTP handler serving every endpoint.
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, prefix := range []string{"", "/v1", "/compatible-mode/v1"} {
		mux.HandleFunc("POST "+prefix+"/chat/completions", s.serveOpenAIChat)
		mux.HandleFunc("POST "+prefix+"/embeddings", s.serveOpenAIEmbeddings)
		mux.HandleFunc("GET "+prefix+"/models", s.serveOpenAIModels)
	}
	mux.HandleFunc("POST /api/chat", s.serveOllamaChat)
	mux.HandleFunc("POST /api/embed", s.serveOllamaEmbed)
	mux.HandleFunc("GET /api/tags", s.serveOllamaTags)
	mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"version":"0.0.0-providersim"}`))
	})
	return mux
}

// Server is a Sim served by an httptest.Server.
type Server struct {
	*Sim
	// URL is the server's base URL, e.g. http://127.0.0.1:41234 (no trailing
	// slash). OpenAI-style clients may use URL or URL+"/v1".
	URL string
	srv *httptest.Server
}

// Start serves a new Sim on a random loopback port and closes it in t.Cleanup.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s := NewServer(opts)
	t.Cleanup(s.Close)
	return s
}

// NewServer serves a new Sim on a random loopback port. Close it when done.
func NewServer(opts Options) *Server {
	sim := New(opts)
	srv := httptest.NewServer(sim.Handler())
	return &Server{Sim: sim, URL: srv.URL, srv: srv}
}

// Close shuts the server down, cutting open streams.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// InMemory is a Sim served over in-process pipes instead of a network port.
type InMemory struct {
	// BaseURL is the base URL to give HTTP clients that use Transport.
	BaseURL string
	// Transport dials the in-memory server whatever the URL's host.
	Transport *http.Transport

	lis *pipeListener
	srv *http.Server
}

// InMemory starts serving s over in-process pipes. Close stops it.
func (s *Sim) InMemory() *InMemory {
	lis := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	tr := &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return lis.dial(ctx) },
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	return &InMemory{BaseURL: "http://providersim.internal", Transport: tr, lis: lis, srv: srv}
}

// Close stops the in-memory server and closes idle connections.
func (m *InMemory) Close() {
	m.Transport.CloseIdleConnections()
	_ = m.srv.Close()
}

// pipeListener hands out one end of a net.Pipe per dial.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.done:
		return nil, errors.New("providersim: in-memory server closed")
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "providersim" }

// Requests returns a copy of every recorded request, in arrival order.
func (s *Sim) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// ChatRequests returns the recorded chat requests (either wire format).
func (s *Sim) ChatRequests() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.Endpoint == EndpointChat {
			out = append(out, r)
		}
	}
	return out
}

// LastRequest returns the most recent recorded chat request.
func (s *Sim) LastRequest() (Request, bool) {
	reqs := s.ChatRequests()
	if len(reqs) == 0 {
		return Request{}, false
	}
	return reqs[len(reqs)-1], true
}

// Count returns how many chat requests arrived (recorded or not).
func (s *Sim) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chatCount
}

// Disconnects returns how many streams the client abandoned before the end.
func (s *Sim) Disconnects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.disconnects
}

// Reset forgets every rule and recorded request and re-arms the fault
// counters.
func (s *Sim) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = nil
	s.requests = nil
	s.chatCount = 0
	s.disconnects = 0
	s.blankLeft = s.opts.Faults.BlankJSONModeContent
}

// record stores r (unless recording is off) and, if pick, chooses the rule
// answering it (nil: the default answer).
func (s *Sim) record(r *Request, pick bool) *Rule {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	r.Seq = s.seq
	if r.Endpoint == EndpointChat {
		s.chatCount++
	}
	var hit *Rule
	for _, rule := range s.rules {
		if !pick {
			break
		}
		if rule.times > 0 && rule.hits >= rule.times {
			continue
		}
		if rule.match.matches(r) {
			hit = rule
			rule.hits++
			r.Rule = rule.name
			break
		}
	}
	if !s.opts.NoRecord {
		s.requests = append(s.requests, *r)
	}
	return hit
}

// takeBlank reports whether this JSON-mode answer should be blank.
func (s *Sim) takeBlank() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.blankLeft > 0 {
		s.blankLeft--
		return true
	}
	return false
}

func (s *Sim) noteDisconnect() {
	s.mu.Lock()
	s.disconnects++
	s.mu.Unlock()
}

func (s *Sim) knownModel(model string) bool {
	if len(s.opts.Models) == 0 {
		return true
	}
	for _, m := range s.opts.Models {
		if m == model {
			return true
		}
	}
	return false
}

func (s *Sim) listedModels() []string {
	if len(s.opts.Models) == 0 {
		return []string{"sim"}
	}
	return s.opts.Models
}

func (s *Sim) authorized(r *http.Request) bool {
	if len(s.opts.APIKeys) == 0 {
		return true
	}
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	for _, k := range s.opts.APIKeys {
		if k == key {
			return true
		}
	}
	return false
}

// wait sleeps for d unless ctx ends first; it reports whether ctx is still live.
func wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
