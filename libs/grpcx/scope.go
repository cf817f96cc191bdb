package grpcx

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

// Metadata keys by which the gateway passes the authenticated scope and
// caller.
const (
	TenantMetadataKey  = "x-agentmesh-tenant"
	ProjectMetadataKey = "x-agentmesh-project"
	CallerMetadataKey  = "x-agentmesh-caller"
)

// Caller resolves who makes a request: the caller the gateway authenticated
// (in metadata) or, without one, the request's own caller field. A request
// naming another caller than the authenticated one is InvalidArgument
// naming the field, so nobody can act in another's name.
func Caller(ctx context.Context, field, requested string) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	requested = strings.TrimSpace(requested)
	authenticated := first(md, CallerMetadataKey)
	if authenticated == "" {
		return requested, nil
	}
	if requested != "" && requested != authenticated {
		return "", InvalidArgument(field, "does not match the authenticated caller")
	}
	return authenticated, nil
}

// Scope resolves the scope of a request: the request's own scope, or when it
// has no tenant, the scope the gateway put in metadata. When both are
// present they must agree, so a caller cannot reach another tenant's data by
// naming it in the body. A missing tenant is InvalidArgument naming
// scope.tenant_id.
func Scope(ctx context.Context, s *commonv1.Scope) (*commonv1.Scope, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	mdTenant, mdProject := first(md, TenantMetadataKey), first(md, ProjectMetadataKey)
	out := &commonv1.Scope{TenantId: strings.TrimSpace(s.GetTenantId()), ProjectId: strings.TrimSpace(s.GetProjectId())}
	if mdTenant != "" {
		if out.TenantId != "" && out.TenantId != mdTenant {
			return nil, InvalidArgument("scope.tenant_id", "does not match the authenticated tenant")
		}
		out.TenantId = mdTenant
		if out.ProjectId == "" {
			out.ProjectId = mdProject
		}
	}
	if out.TenantId == "" {
		return nil, InvalidArgument("scope.tenant_id", "is required")
	}
	if strings.ContainsAny(out.TenantId, ".*> \t\n") {
		return nil, InvalidArgument("scope.tenant_id", "must not contain '.', '*', '>' or whitespace")
	}
	return out, nil
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return strings.TrimSpace(v[0])
	}
	return ""
}
