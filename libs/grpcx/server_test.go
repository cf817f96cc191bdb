package grpcx_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/description"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
	"golang.org/x/net/http2"
	"golang.org/x/sync/errgroup"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/outage"
)

// testModels is a stand-in service whose ListModels behaves as each test needs.
type testModels struct {
	modelv1.UnimplementedModelServiceServer
	listModels func(ctx context.Context) (*modelv1.ListModelsResponse, error)
}

func (s *testModels) ListModels(ctx context.Context, _ *modelv1.ListModelsRequest) (*modelv1.ListModelsResponse, error) {
	return s.listModels(ctx)
}

func start(t *testing.T, impl *testModels, cfg grpcx.ServerConfig) (*grpcx.Server, *grpc.ClientConn, context.CancelFunc, chan error) {
	t.Helper()
	srv := grpcx.NewServer(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	modelv1.RegisterModelServiceServer(srv.GRPC(), impl)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	cc, err := grpcx.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cc.Close() })
	return srv, cc, cancel, done
}

func TestGracefulShutdownCompletesInFlightRPC(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	impl := &testModels{listModels: func(ctx context.Context) (*modelv1.ListModelsResponse, error) {
		close(entered)
		select {
		case <-time.After(300 * time.Millisecond):
			return &modelv1.ListModelsResponse{Models: []*modelv1.LogicalModel{{Name: "finished"}}}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	_, cc, cancel, done := start(t, impl, grpcx.ServerConfig{ShutdownTimeout: 5 * time.Second})
	res := make(chan error, 1)
	var got *modelv1.ListModelsResponse
	go func() {
		var err error
		got, err = modelv1.NewModelServiceClient(cc).ListModels(context.Background(), &modelv1.ListModelsRequest{})
		res <- err
	}()
	<-entered
	cancel() // as SIGTERM would
	if err := <-res; err != nil {
		t.Fatalf("in-flight RPC failed during graceful shutdown: %v", err)
	}
	if got.GetModels()[0].GetName() != "finished" {
		t.Fatalf("got %v", got)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v", err)
	}
}

func TestPanicBecomesInternal(t *testing.T) {
	t.Parallel()
	impl := &testModels{listModels: func(context.Context) (*modelv1.ListModelsResponse, error) { panic("boom") }}
	_, cc, _, _ := start(t, impl, grpcx.ServerConfig{})
	_, err := modelv1.NewModelServiceClient(cc).ListModels(context.Background(), &modelv1.ListModelsRequest{})
	if status.Code(err) != codes.Internal || status.Convert(err).Message() == "boom" {
		t.Fatalf("err = %v, want masked Internal", err)
	}
}

func TestDefaultDeadlineApplied(t *testing.T) {
	t.Parallel()
	impl := &testModels{listModels: func(ctx context.Context) (*modelv1.ListModelsResponse, error) {
		if _, ok := ctx.Deadline(); !ok {
			return nil, status.Error(codes.FailedPrecondition, "no deadline")
		}
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}}
	_, cc, _, _ := start(t, impl, grpcx.ServerConfig{DefaultTimeout: 50 * time.Millisecond})
	_, err := modelv1.NewModelServiceClient(cc).ListModels(context.Background(), &modelv1.ListModelsRequest{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
}

func TestUnexpectedErrorsAreMasked(t *testing.T) {
	t.Parallel()
	impl := &testModels{listModels: func(context.Context) (*modelv1.ListModelsResponse, error) {
		return nil, io.ErrUnexpectedEOF
	}}
	_, cc, _, _ := start(t, impl, grpcx.ServerConfig{})
	_, err := modelv1.NewModelServiceClient(cc).ListModels(context.Background(), &modelv1.ListModelsRequest{})
	if status.Code(err) != codes.Internal || status.Convert(err).Message() != "internal error" {
		t.Fatalf("err = %v", err)
	}
}

func TestHealthFollowsDependencies(t *testing.T) {
	t.Parallel()
	impl := &testModels{listModels: func(context.Context) (*modelv1.ListModelsResponse, error) { return nil, nil }}
	srv, cc, _, _ := start(t, impl, grpcx.ServerConfig{})
	hc := healthpb.NewHealthClient(cc)
	check := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		var st healthpb.HealthCheckResponse_ServingStatus
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
			if err == nil {
				return r.GetStatus()
			}
			time.Sleep(10 * time.Millisecond)
		}
		return st
	}
	srv.Health().Set("mongo", nil)
	srv.Health().Set("nats", nil)
	if got := check("agentmesh.model.v1.ModelService"); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("service status = %v", got)
	}
	srv.Health().Set("nats", io.EOF)
	if got := check(""); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("overall = %v, want NOT_SERVING while nats is down", got)
	}
	if got := check("dependency/nats"); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("nats = %v", got)
	}
	if got := check("dependency/mongo"); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("mongo = %v", got)
	}
	// A dependency being down must not make a liveness probe restart the pod.
	if got := check(grpcx.LivenessService); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("liveness = %v while nats is down, want SERVING", got)
	}
}

func TestScope(t *testing.T) {
	t.Parallel()
	md := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	tenantKey := md(grpcx.TenantMetadataKey, "acme")
	projectKey := md(grpcx.TenantMetadataKey, "acme", grpcx.ProjectMetadataKey, "alpha")
	tests := []struct {
		name        string
		ctx         context.Context
		in          *commonv1.Scope
		want        *commonv1.Scope
		wantField   string // the field an InvalidArgument names; "" = success
		wantMessage string
	}{
		{"from request", context.Background(), &commonv1.Scope{TenantId: "acme"}, &commonv1.Scope{TenantId: "acme"}, "", ""},
		{"from metadata", tenantKey, nil, &commonv1.Scope{TenantId: "acme"}, "", ""},
		{"missing", context.Background(), nil, nil, "scope.tenant_id", "is required"},
		{"tenant mismatch", tenantKey, &commonv1.Scope{TenantId: "evil"}, nil, "scope.tenant_id", "authenticated tenant"},
		{"bad characters", context.Background(), &commonv1.Scope{TenantId: "a.b"}, nil, "scope.tenant_id", "printable ASCII"},
		{"tenant too long", context.Background(), &commonv1.Scope{TenantId: strings.Repeat("t", 129)}, nil, "scope.tenant_id", "longer than 128"},
		{"tenant-wide key names a project", tenantKey, &commonv1.Scope{ProjectId: "beta"}, &commonv1.Scope{TenantId: "acme", ProjectId: "beta"}, "", ""},
		{"project key, no project named", projectKey, nil, &commonv1.Scope{TenantId: "acme", ProjectId: "alpha"}, "", ""},
		{"project key names its own project", projectKey, &commonv1.Scope{TenantId: "acme", ProjectId: "alpha"}, &commonv1.Scope{TenantId: "acme", ProjectId: "alpha"}, "", ""},
		{"project key names another project", projectKey, &commonv1.Scope{ProjectId: "beta"}, nil, "scope.project_id", "project of the API key"},
		{"project key, other project and tenant", projectKey, &commonv1.Scope{TenantId: "acme", ProjectId: " beta "}, nil, "scope.project_id", "project of the API key"},
		{"bad project characters", tenantKey, &commonv1.Scope{ProjectId: "a>b"}, nil, "scope.project_id", "printable ASCII"},
		{"project with a space", context.Background(), &commonv1.Scope{TenantId: "acme", ProjectId: "a b"}, nil, "scope.project_id", "printable ASCII"},
		{"project too long", context.Background(), &commonv1.Scope{TenantId: "acme", ProjectId: strings.Repeat("p", 129)}, nil, "scope.project_id", "longer than 128"},
		{"project not UTF-8", context.Background(), &commonv1.Scope{TenantId: "acme", ProjectId: "caf\xe9"}, nil, "scope.project_id", "printable ASCII"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := grpcx.Scope(tc.ctx, tc.in)
			if tc.wantField != "" {
				st := status.Convert(err)
				if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tc.wantField+": ") || !strings.Contains(st.Message(), tc.wantMessage) {
					t.Fatalf("err = %v, want InvalidArgument %q ... %q", err, tc.wantField, tc.wantMessage)
				}
				return
			}
			if err != nil || !proto.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestLargeMessagesUnderFixedWindows: the server and Dial fix their
// flow-control windows (no bandwidth estimation); a message many times the
// stream window still arrives whole, on several streams at once, and a
// client left at grpc-go's defaults is served too.
func TestLargeMessagesUnderFixedWindows(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("w", 12<<20)
	impl := &testModels{listModels: func(context.Context) (*modelv1.ListModelsResponse, error) {
		return &modelv1.ListModelsResponse{Models: []*modelv1.LogicalModel{{Name: big}}}, nil
	}}
	_, cc, _, _ := start(t, impl, grpcx.ServerConfig{})
	plain, err := grpc.NewClient(cc.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(32<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var g errgroup.Group
	for i := range 4 {
		conn := grpc.ClientConnInterface(cc)
		if i%2 == 1 {
			conn = plain
		}
		g.Go(func() error {
			resp, err := modelv1.NewModelServiceClient(conn).ListModels(ctx, &modelv1.ListModelsRequest{})
			if err != nil {
				return err
			}
			if got := resp.GetModels()[0].GetName(); got != big {
				return fmt.Errorf("call %d: got %d bytes, want %d", i, len(got), len(big))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestNoBandwidthPings: with fixed windows the server answers a run of
// small calls without a ping of its own per call (grpc-go's bandwidth
// estimator would send one, with a window update, after each).
func TestNoBandwidthPings(t *testing.T) {
	t.Parallel()
	srv := grpcx.NewServer(grpcx.ServerConfig{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	modelv1.RegisterModelServiceServer(srv.GRPC(), &testModels{listModels: func(context.Context) (*modelv1.ListModelsResponse, error) {
		return &modelv1.ListModelsResponse{}, nil
	}})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	lis := &teeListener{Listener: inner, w: pw}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Serve(ctx, lis) }()

	frames := make(chan http2.FrameType, 1024)
	go func() {
		defer close(frames)
		fr := http2.NewFramer(io.Discard, pr)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
				continue // answers to the client's own pings
			}
			frames <- f.Header().Type
		}
	}()

	cc, err := grpcx.Dial(inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := modelv1.NewModelServiceClient(cc)
	const calls = 20
	for range calls {
		if _, err := client.ListModels(ctx, &modelv1.ListModelsRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	cc.Close()
	cancel()
	_ = pw.Close()
	pings := 0
	for ft := range frames {
		if ft == http2.FramePing {
			pings++
		}
	}
	if pings > 0 {
		t.Fatalf("server sent %d pings over %d calls, want none", pings, calls)
	}
}

// teeListener copies what the server writes on its first connection to w.
type teeListener struct {
	net.Listener
	w    io.Writer
	once sync.Once
}

func (l *teeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tee := false
	l.once.Do(func() { tee = true })
	if !tee {
		return c, nil
	}
	return &teeConn{Conn: c, w: l.w}, nil
}

type teeConn struct {
	net.Conn
	w io.Writer
}

func (c *teeConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	_, _ = c.w.Write(b[:n])
	return n, err
}

func TestCaller(t *testing.T) {
	t.Parallel()
	authed := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcx.CallerMetadataKey, "alice"))
	tests := []struct {
		name, requested string
		ctx             context.Context
		want            string
		wantErr         bool
	}{
		{"from request", " bob ", context.Background(), "bob", false},
		{"none", "", context.Background(), "", false},
		{"authenticated fills an empty field", "", authed, "alice", false},
		{"authenticated and the same", "alice", authed, "alice", false},
		{"someone else", "bob", authed, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := grpcx.Caller(tc.ctx, "caller", tc.requested)
			if tc.wantErr {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "caller") {
					t.Fatalf("err = %v, want InvalidArgument naming caller", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestPageTokens(t *testing.T) {
	t.Parallel()
	tok := grpcx.EncodePageToken(&commonv1.PageToken{LastKey: "k9", Offset: 40, FilterHash: "h1"})
	pt, err := grpcx.DecodePageToken(tok, "h1")
	if err != nil || pt.GetLastKey() != "k9" || pt.GetOffset() != 40 {
		t.Fatalf("round trip = %v, %v", pt, err)
	}
	for name, c := range map[string]struct{ tok, hash string }{
		"another filter": {tok, "h2"},
		"not base64":     {"%%%", "h1"},
		"not a token":    {"AAEC", "h1"},
	} {
		_, err := grpcx.DecodePageToken(c.tok, c.hash)
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "page_token") {
			t.Errorf("%s: err = %v, want InvalidArgument naming page_token", name, err)
		}
	}
	// A filter's parts are kept apart: moving text between them is
	// another filter.
	if a, b := grpcx.PageFilter("list", "acme", "p1"), grpcx.PageFilter("list", "acmep", "1"); a == b || a != grpcx.PageFilter("list", "acme", "p1") {
		t.Errorf("PageFilter: %s and %s", a, b)
	}
}

// TestDependencyOutageIsUnavailable: a handler whose error holds a database
// or bus outage, marked by a store or still the driver's own, answers
// Unavailable with the outage reason and the dependency's name, whatever
// wraps it, and without the driver's text.
func TestDependencyOutageIsUnavailable(t *testing.T) {
	t.Parallel()
	const driverText = "dial tcp 10.1.2.3:27017: connect: connection refused"
	selection := topology.ServerSelectionError{Wrapped: context.DeadlineExceeded, Desc: description.Topology{}}
	for _, tc := range []struct {
		name       string
		err        error
		dependency string
	}{
		{"marked by a store", fmt.Errorf("load run: %w", &outage.Error{Dependency: outage.Mongo, Err: errors.New(driverText)}), outage.Mongo},
		{"the driver's own error", fmt.Errorf("load run: %w", selection), outage.Mongo},
		{"the bus's own error", fmt.Errorf("publish: %w", nats.ErrConnectionClosed), outage.NATS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			impl := &testModels{listModels: func(context.Context) (*modelv1.ListModelsResponse, error) { return nil, tc.err }}
			_, cc, _, _ := start(t, impl, grpcx.ServerConfig{})
			_, err := modelv1.NewModelServiceClient(cc).ListModels(context.Background(), &modelv1.ListModelsRequest{})
			st := status.Convert(err)
			if st.Code() != codes.Unavailable || strings.Contains(st.Message(), "10.1.2.3") || strings.Contains(st.Message(), "load run") {
				t.Fatalf("status %s %q, want Unavailable without the driver's text", st.Code(), st.Message())
			}
			if r := grpcx.Reason(err); r != outage.Reason {
				t.Fatalf("reason %q, want %s", r, outage.Reason)
			}
			if got := st.Details()[0].(*errdetails.ErrorInfo).GetMetadata()["dependency"]; got != tc.dependency {
				t.Fatalf("dependency %q, want %s", got, tc.dependency)
			}
		})
	}
}
