package httpgateway_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	"github.com/agentmesh/agentmesh/gateway/httpgateway/httpgatewaytest"
	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// waitLimit bounds every wait in these tests.
const waitLimit = 10 * time.Second

// The fakes below stand in for the remote services: the gateway's job is
// translation, so each is a function the test sets, on a real gRPC server.

type modelFake struct {
	modelv1.UnimplementedModelServiceServer
	list   func(context.Context, *modelv1.ListModelsRequest) (*modelv1.ListModelsResponse, error)
	stream func(*modelv1.ChatStreamRequest, grpc.ServerStreamingServer[modelv1.ChatStreamResponse]) error
}

func (f *modelFake) ListModels(ctx context.Context, r *modelv1.ListModelsRequest) (*modelv1.ListModelsResponse, error) {
	return f.list(ctx, r)
}

func (f *modelFake) ChatStream(r *modelv1.ChatStreamRequest, s grpc.ServerStreamingServer[modelv1.ChatStreamResponse]) error {
	return f.stream(r, s)
}

type conversationFake struct {
	orchestratorv1.UnimplementedConversationServiceServer
	create func(context.Context, *orchestratorv1.CreateConversationRequest) (*orchestratorv1.CreateConversationResponse, error)
	get    func(context.Context, *orchestratorv1.GetConversationRequest) (*orchestratorv1.GetConversationResponse, error)
	list   func(context.Context, *orchestratorv1.ListConversationsRequest) (*orchestratorv1.ListConversationsResponse, error)
	stream func(*orchestratorv1.StreamMessageRequest, grpc.ServerStreamingServer[orchestratorv1.StreamMessageResponse]) error
	watch  func(*orchestratorv1.WatchTurnRequest, grpc.ServerStreamingServer[orchestratorv1.WatchTurnResponse]) error
}

func (f *conversationFake) CreateConversation(ctx context.Context, r *orchestratorv1.CreateConversationRequest) (*orchestratorv1.CreateConversationResponse, error) {
	return f.create(ctx, r)
}

func (f *conversationFake) GetConversation(ctx context.Context, r *orchestratorv1.GetConversationRequest) (*orchestratorv1.GetConversationResponse, error) {
	return f.get(ctx, r)
}

func (f *conversationFake) ListConversations(ctx context.Context, r *orchestratorv1.ListConversationsRequest) (*orchestratorv1.ListConversationsResponse, error) {
	return f.list(ctx, r)
}

func (f *conversationFake) StreamMessage(r *orchestratorv1.StreamMessageRequest, s grpc.ServerStreamingServer[orchestratorv1.StreamMessageResponse]) error {
	return f.stream(r, s)
}

func (f *conversationFake) WatchTurn(r *orchestratorv1.WatchTurnRequest, s grpc.ServerStreamingServer[orchestratorv1.WatchTurnResponse]) error {
	return f.watch(r, s)
}

type jobFake struct {
	orchestratorv1.UnimplementedJobServiceServer
	watch func(*orchestratorv1.WatchJobRequest, grpc.ServerStreamingServer[orchestratorv1.WatchJobResponse]) error
}

func (f *jobFake) WatchJob(r *orchestratorv1.WatchJobRequest, s grpc.ServerStreamingServer[orchestratorv1.WatchJobResponse]) error {
	return f.watch(r, s)
}

type classifierFake struct {
	classifierv1.UnimplementedClassifierServiceServer
	start   func(*classifierv1.StartRunRequest, grpc.ServerStreamingServer[classifierv1.StartRunResponse]) error
	resume  func(*classifierv1.ResumeRunRequest, grpc.ServerStreamingServer[classifierv1.ResumeRunResponse]) error
	command func(*classifierv1.SendCommandRequest, grpc.ServerStreamingServer[classifierv1.SendCommandResponse]) error
}

func (f *classifierFake) StartRun(r *classifierv1.StartRunRequest, s grpc.ServerStreamingServer[classifierv1.StartRunResponse]) error {
	return f.start(r, s)
}

func (f *classifierFake) ResumeRun(r *classifierv1.ResumeRunRequest, s grpc.ServerStreamingServer[classifierv1.ResumeRunResponse]) error {
	return f.resume(r, s)
}

func (f *classifierFake) SendCommand(r *classifierv1.SendCommandRequest, s grpc.ServerStreamingServer[classifierv1.SendCommandResponse]) error {
	return f.command(r, s)
}

type sqlFake struct {
	sqlagentv1.UnimplementedSqlAgentServiceServer
	create func(context.Context, *sqlagentv1.CreateSessionRequest) (*sqlagentv1.CreateSessionResponse, error)
	getJob func(context.Context, *sqlagentv1.GetSqlJobRequest) (*sqlagentv1.GetSqlJobResponse, error)
}

func (f *sqlFake) GetSqlJob(ctx context.Context, r *sqlagentv1.GetSqlJobRequest) (*sqlagentv1.GetSqlJobResponse, error) {
	return f.getJob(ctx, r)
}

func (f *sqlFake) CreateSession(ctx context.Context, r *sqlagentv1.CreateSessionRequest) (*sqlagentv1.CreateSessionResponse, error) {
	return f.create(ctx, r)
}

// fakes selects the services a test implements; the others answer
// Unimplemented.
type fakes struct {
	model         *modelFake
	conversations *conversationFake
	jobs          *jobFake
	classifier    *classifierFake
	sql           *sqlFake
	graph         indexerv1.GraphServiceServer
}

// mesh is the gateway in front of six in-process gRPC servers.
type mesh struct {
	url      string
	backends httpgateway.Backends
	servers  map[string]*grpcx.Server // by /healthz name
	addrs    map[string]string
	stops    map[string]func()
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startBackend serves one service on 127.0.0.1:0 with the mesh's real server
// bootstrap (so health has the per-dependency entries) and dials it.
func startBackend(t *testing.T, register func(*grpc.Server)) (srv *grpcx.Server, cc *grpc.ClientConn, addr string, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv = grpcx.NewServer(grpcx.ServerConfig{ShutdownTimeout: 2 * time.Second}, discard())
	register(srv.GRPC())
	srv.Health().Set("mongo", nil)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("backend Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	cc, err = grpcx.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return srv, cc, lis.Addr().String(), stop
}

// startBackends starts the six services with the given fakes.
func startBackends(t *testing.T, f fakes) *mesh {
	t.Helper()
	m := &mesh{servers: map[string]*grpcx.Server{}, addrs: map[string]string{}, stops: map[string]func(){}}
	start := func(name string, register func(*grpc.Server)) *grpc.ClientConn {
		srv, cc, addr, stop := startBackend(t, register)
		m.servers[name], m.addrs[name], m.stops[name] = srv, addr, stop
		return cc
	}
	m.backends = httpgateway.Backends{
		Model: start("modelgateway", func(s *grpc.Server) {
			if f.model != nil {
				modelv1.RegisterModelServiceServer(s, f.model)
			}
		}),
		Orchestrator: start("orchestrator", func(s *grpc.Server) {
			if f.conversations != nil {
				orchestratorv1.RegisterConversationServiceServer(s, f.conversations)
			}
			if f.jobs != nil {
				orchestratorv1.RegisterJobServiceServer(s, f.jobs)
			}
		}),
		Vision: start("vision", func(*grpc.Server) {}),
		Indexer: start("indexer", func(s *grpc.Server) {
			if f.graph != nil {
				indexerv1.RegisterGraphServiceServer(s, f.graph)
			}
		}),
		Classifier: start("classifier", func(s *grpc.Server) {
			if f.classifier != nil {
				classifierv1.RegisterClassifierServiceServer(s, f.classifier)
			}
		}),
		SQLAgent: start("sqlagent", func(s *grpc.Server) {
			if f.sql != nil {
				sqlagentv1.RegisterSqlAgentServiceServer(s, f.sql)
			}
		}),
	}
	return m
}

// startMesh starts the backends and the gateway's Handler on httptest.
func startMesh(t *testing.T, cfg httpgateway.Config, f fakes) *mesh {
	t.Helper()
	m := startBackends(t, f)
	h, err := httpgateway.Handler(&cfg, m.backends, discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	m.url = hs.URL
	return m
}

// do sends a request and returns the response with its body read.
func do(t *testing.T, method, url, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	resp := send(t, context.Background(), method, url, body, header)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// send sends a request and returns the response unread.
func send(t *testing.T, ctx context.Context, method, url, body string, header map[string]string) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(ctx, waitLimit)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v // the name the request was sent to, as a browser's would carry it
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// decode unmarshals JSON into a generic map.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, b)
	}
	return m
}

// incoming returns the first value of an incoming metadata key.
func incoming(ctx context.Context, key string) []string {
	md, _ := metadata.FromIncomingContext(ctx)
	return md.Get(key)
}

// event is one Server-Sent Event as a browser's EventSource dispatches it,
// or a comment line (comment != "").
type event struct {
	id, name, data string
	comment        string
}

// readEvents parses a text/event-stream body the way EventSource does
// (httpgatewaytest.Events), sending each event, and each comment, as soon
// as its line arrives. The channel closes at the end of the body.
func readEvents(body io.Reader) <-chan event {
	out := make(chan event, 64)
	go func() {
		defer close(out)
		for ev := range httpgatewaytest.Events(body) {
			out <- event{id: ev.ID, name: ev.Name, data: ev.Data, comment: ev.Comment}
		}
	}()
	return out
}

// nextEvent returns the next event, skipping comments, or fails after the
// wait limit. ok is false at the end of the stream.
func nextEvent(t *testing.T, events <-chan event) (event, bool) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return event{}, false
			}
			if ev.comment != "" {
				continue
			}
			return ev, true
		case <-deadline:
			t.Fatal("no event within the wait limit")
		}
	}
}

// allEvents reads events until the stream ends.
func allEvents(t *testing.T, events <-chan event) []event {
	t.Helper()
	var out []event
	for {
		ev, ok := nextEvent(t, events)
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

// waitFor fails the test unless ch is closed or yields within the limit.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}
