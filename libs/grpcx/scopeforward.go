package grpcx

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/telemetry"
)

// scopedServices are the services whose calls carry the caller's scope in
// metadata (withCallScope): the model gateway, and vision, which calls
// the model gateway on its caller's behalf.
var scopedServices = []string{"/agentmesh.model.v1.ModelService/", "/agentmesh.vision.v1.VisionService/"}

type scopeKey struct{}

// WithScope returns ctx carrying s as the scope work is done for, for
// work that did not arrive as an RPC from the gateway (a work-queue
// delivery, a resumed run): model calls made under ctx name its tenant.
// A nil or tenant-less s leaves ctx as it is.
func WithScope(ctx context.Context, s *commonv1.Scope) context.Context {
	if strings.TrimSpace(s.GetTenantId()) == "" {
		return ctx
	}
	return context.WithValue(ctx, scopeKey{}, s)
}

// ScopeFrom returns the scope WithScope put in ctx, or nil.
func ScopeFrom(ctx context.Context) *commonv1.Scope {
	s, _ := ctx.Value(scopeKey{}).(*commonv1.Scope)
	return s
}

// callScope is the tenant and project a call out of ctx is made for: the
// scope the work carries (WithScope), else the authenticated scope of the
// RPC being served (the gateway's metadata); empty when neither.
func callScope(ctx context.Context) (tenant, project string) {
	if s := ScopeFrom(ctx); s != nil {
		return strings.TrimSpace(s.GetTenantId()), strings.TrimSpace(s.GetProjectId())
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return first(md, TenantMetadataKey), first(md, ProjectMetadataKey)
}

// withCallScope adds the call's scope to the outgoing metadata of a call
// to one of the scopedServices, unless the caller already set a tenant
// there (the gateway does).
//
// Model requests have no scope field, so the model gateway learns the
// tenant (for its usage counts) from metadata alone, also through vision.
// The other services take the scope from their requests and check it
// against this metadata, which for them stays what the gateway
// authenticated.
func withCallScope(ctx context.Context, method string) context.Context {
	if !slices.ContainsFunc(scopedServices, func(p string) bool { return strings.HasPrefix(method, p) }) {
		return ctx
	}
	if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get(TenantMetadataKey)) > 0 {
		return ctx
	}
	tenant, project := callScope(ctx)
	if tenant == "" {
		return ctx
	}
	kv := []string{TenantMetadataKey, tenant}
	if project != "" {
		kv = append(kv, ProjectMetadataKey, project)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// withRequestID passes the request id of the RPC being served (the one
// the gateway answered the HTTP client with) on to a call made while
// serving it, so the called service's log lines carry it too
// (telemetry.RequestIDMetadata).
func withRequestID(ctx context.Context) context.Context {
	in, _ := metadata.FromIncomingContext(ctx)
	id := first(in, telemetry.RequestIDMetadata)
	if id == "" {
		return ctx
	}
	if out, ok := metadata.FromOutgoingContext(ctx); ok && len(out.Get(telemetry.RequestIDMetadata)) > 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, telemetry.RequestIDMetadata, id)
}

// forwardScopeUnary and forwardScopeStream are the client interceptors of
// withCallScope and withRequestID, installed by Dial on every connection:
// one place instead of every call site.
func forwardScopeUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(withRequestID(withCallScope(ctx, method)), method, req, reply, cc, opts...)
}

func forwardScopeStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(withRequestID(withCallScope(ctx, method)), desc, cc, method, opts...)
}
