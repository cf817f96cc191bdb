package grpcx_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/telemetry"
)

// scopeSeen answers ListModels and Search with nothing, keeping the scope
// metadata each call arrived with.
type scopeSeen struct {
	modelv1.UnimplementedModelServiceServer
	indexerv1.UnimplementedSearchServiceServer
	seen chan string
	// ids, if set, gets the request ids each call arrived with instead.
	ids chan string
}

func (s *scopeSeen) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	if s.ids != nil {
		s.ids <- strings.Join(md.Get(telemetry.RequestIDMetadata), ",")
		return
	}
	s.seen <- strings.Join(md.Get(grpcx.TenantMetadataKey), ",") + "/" + strings.Join(md.Get(grpcx.ProjectMetadataKey), ",")
}

func (s *scopeSeen) ListModels(ctx context.Context, _ *modelv1.ListModelsRequest) (*modelv1.ListModelsResponse, error) {
	s.record(ctx)
	return &modelv1.ListModelsResponse{}, nil
}

func (s *scopeSeen) Search(ctx context.Context, _ *indexerv1.SearchRequest) (*indexerv1.SearchResponse, error) {
	s.record(ctx)
	return &indexerv1.SearchResponse{}, nil
}

// call makes a model call (ListModels), or with search a call to another
// service (Search), on cc under ctx.
func call(t *testing.T, cc grpc.ClientConnInterface, ctx context.Context, search bool) {
	t.Helper()
	var err error
	if search {
		_, err = indexerv1.NewSearchServiceClient(cc).Search(ctx, &indexerv1.SearchRequest{Query: "q", Scope: &commonv1.Scope{TenantId: "globex"}})
	} else {
		_, err = modelv1.NewModelServiceClient(cc).ListModels(ctx, &modelv1.ListModelsRequest{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestModelCallsCarryTheScope: a model call names the tenant of the work
// it is made for (grpcx.WithScope) or of the request being served
// (incoming metadata), never overriding a tenant the caller set; calls to
// services that take the scope from their requests carry nothing added.
func TestModelCallsCarryTheScope(t *testing.T) {
	t.Parallel()
	impl := &scopeSeen{seen: make(chan string, 1)}
	cc := serveAndDial(t, func(s *grpc.Server) {
		modelv1.RegisterModelServiceServer(s, impl)
		indexerv1.RegisterSearchServiceServer(s, impl)
	})

	served := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcx.TenantMetadataKey, "acme", grpcx.ProjectMetadataKey, "web"))
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		search bool
		want   string
	}{
		{"queued work's scope", grpcx.WithScope(context.Background(), &commonv1.Scope{TenantId: "globex", ProjectId: "ops"}), false, "globex/ops"},
		{"served request's scope", served, false, "acme/web"},
		{"work's scope before the request's", grpcx.WithScope(served, &commonv1.Scope{TenantId: "globex"}), false, "globex/"},
		{"a tenant the caller set", metadata.AppendToOutgoingContext(served, grpcx.TenantMetadataKey, "initech"), false, "initech/"},
		{"a scope without tenant", grpcx.WithScope(context.Background(), &commonv1.Scope{ProjectId: "web"}), false, "/"},
		{"no scope", context.Background(), false, "/"},
		{"not a model call", grpcx.WithScope(served, &commonv1.Scope{TenantId: "globex"}), true, "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call(t, cc, tc.ctx, tc.search)
			if got := <-impl.seen; got != tc.want {
				t.Errorf("the callee saw tenant/project %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCallsCarryTheRequestID: a call made while serving an RPC passes that
// RPC's request id on, to every service, so the callee's log lines carry
// it; one the caller set is kept, and a call outside an RPC carries none.
func TestCallsCarryTheRequestID(t *testing.T) {
	t.Parallel()
	impl := &scopeSeen{ids: make(chan string, 1)}
	cc := serveAndDial(t, func(s *grpc.Server) {
		modelv1.RegisterModelServiceServer(s, impl)
		indexerv1.RegisterSearchServiceServer(s, impl)
	})
	served := metadata.NewIncomingContext(context.Background(), metadata.Pairs(telemetry.RequestIDMetadata, "req-42"))
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		search bool
		want   string
	}{
		{"model call", served, false, "req-42"},
		{"another service", served, true, "req-42"},
		{"an id the caller set", metadata.AppendToOutgoingContext(served, telemetry.RequestIDMetadata, "own"), true, "own"},
		{"no RPC served", context.Background(), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call(t, cc, tc.ctx, tc.search)
			if got := <-impl.ids; got != tc.want {
				t.Errorf("the callee saw request ids %q, want %q", got, tc.want)
			}
		})
	}
}
