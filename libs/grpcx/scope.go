package grpcx

import (
	"context"
	"errors"
	"fmt"
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
// naming it in the body; and when the authenticated scope names a project
// (a project-scoped API key), a request naming another project is refused
// the same way. An authenticated scope without a project (a tenant-wide key)
// may name any project of its tenant. Each part must be a valid scope id
// (see ValidScopeID); a missing tenant is InvalidArgument naming
// scope.tenant_id.
func Scope(ctx context.Context, s *commonv1.Scope) (*commonv1.Scope, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	mdTenant, mdProject := first(md, TenantMetadataKey), first(md, ProjectMetadataKey)
	if err := scopeAgrees(ctx, s); err != nil {
		return nil, err
	}
	out := &commonv1.Scope{TenantId: strings.TrimSpace(s.GetTenantId()), ProjectId: strings.TrimSpace(s.GetProjectId())}
	if mdTenant != "" {
		out.TenantId = mdTenant
		if out.ProjectId == "" {
			out.ProjectId = mdProject
		}
	}
	if out.TenantId == "" {
		return nil, InvalidArgument("scope.tenant_id", "is required")
	}
	if err := ValidScopeID(out.TenantId); err != nil {
		return nil, InvalidArgument("scope.tenant_id", "%v", err)
	}
	if out.ProjectId != "" {
		if err := ValidScopeID(out.ProjectId); err != nil {
			return nil, InvalidArgument("scope.project_id", "%v", err)
		}
	}
	return out, nil
}

// scopeAgrees refuses a scope that names another tenant than the one the
// gateway authenticated, or another project than a project-scoped key's.
// Without authenticated metadata (a call inside the mesh) any scope agrees.
func scopeAgrees(ctx context.Context, s *commonv1.Scope) error {
	md, _ := metadata.FromIncomingContext(ctx)
	mdTenant, mdProject := first(md, TenantMetadataKey), first(md, ProjectMetadataKey)
	if mdTenant == "" {
		return nil
	}
	if t := strings.TrimSpace(s.GetTenantId()); t != "" && t != mdTenant {
		return InvalidArgument("scope.tenant_id", "does not match the authenticated tenant")
	}
	if p := strings.TrimSpace(s.GetProjectId()); p != "" && mdProject != "" && p != mdProject {
		return InvalidArgument("scope.project_id", "does not match the project of the API key")
	}
	return nil
}

// MaxScopeIDLen is the longest tenant or project id.
const MaxScopeIDLen = 128

// scopeIDRule is what a tenant or project id must be, besides its length.
const scopeIDRule = "must be printable ASCII without '.', '*', '>' or whitespace"

// ValidScopeID reports why s cannot be a tenant or project id, or nil. NATS
// subjects carry tenants (am.evt.<tenant>...), so an id is 1 to
// MaxScopeIDLen printable ASCII characters without subject syntax ('.', '*',
// '>') or whitespace. The scope.proto constraints say the same for requests.
func ValidScopeID(s string) error {
	if s == "" {
		return errors.New("is empty")
	}
	if len(s) > MaxScopeIDLen {
		return fmt.Errorf("is longer than %d characters", MaxScopeIDLen)
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c > '~' || c == '.' || c == '*' || c == '>' {
			return errors.New(scopeIDRule)
		}
	}
	return nil
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return strings.TrimSpace(v[0])
	}
	return ""
}
