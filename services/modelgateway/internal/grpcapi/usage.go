package grpcapi

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/dispatch"
	tokenusage "github.com/agentmesh/agentmesh/services/modelgateway/internal/usage"
)

// callerTenant is the tenant a call is made for: the scope the gateway
// authenticated, or that a service forwarded for the work it does
// (grpcx.WithScope); "" for a call on no tenant's behalf.
func callerTenant(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, grpcx.TenantMetadataKey); len(v) > 0 {
		return strings.TrimSpace(v[0])
	}
	return ""
}

// forTenant names the caller's tenant to the dispatcher, which counts the
// call's tokens under it.
func forTenant(ctx context.Context) context.Context {
	return dispatch.WithTenant(ctx, callerTenant(ctx))
}

// GetUsage reports token usage over time: a scoped caller its own
// tenant's, an unscoped one every tenant's or the one it names.
func (s *Server) GetUsage(ctx context.Context, in *modelv1.GetUsageRequest) (*modelv1.GetUsageResponse, error) {
	res, resolution := tokenusage.Minutes, modelv1.UsageResolution_USAGE_RESOLUTION_MINUTE
	if in.GetResolution() == modelv1.UsageResolution_USAGE_RESOLUTION_HOUR {
		res, resolution = tokenusage.Hours, in.GetResolution()
	}
	caller := callerTenant(ctx)
	if project := metadata.ValueFromIncomingContext(ctx, grpcx.ProjectMetadataKey); len(project) > 0 && strings.TrimSpace(project[0]) != "" {
		// Usage is counted per tenant: what a project's key would read
		// holds the tenant's other projects.
		return nil, grpcx.Errorf(codes.PermissionDenied, "USAGE_IS_PER_TENANT",
			"usage is counted per tenant, across its projects: a key bound to project %q does not read it; a tenant-wide key does", strings.TrimSpace(project[0]))
	}
	f := tokenusage.Filter{Tenant: strings.TrimSpace(in.GetTenantId())}
	if f.Tenant != "" {
		if err := grpcx.ValidScopeID(f.Tenant); err != nil {
			// "*" among them: every tenant's usage is asked by naming none.
			return nil, grpcx.InvalidArgument("tenant_id", "%v (leave it empty for every tenant's usage, with an operator key)", err)
		}
	}
	switch {
	case caller == "":
		f.All = true
	case f.Tenant == "":
		f.Tenant = caller
	case f.Tenant != caller:
		return nil, status.Errorf(codes.PermissionDenied, "tenant_id: %q is not the caller's tenant; only an unscoped caller (an operator key of the gateway) reads another tenant's usage", f.Tenant)
	}
	rec := s.gw.Usage()
	points, from := rec.Series(res, f)
	out := &modelv1.GetUsageResponse{
		Resolution:  resolution,
		StartTime:   timestamppb.New(from),
		EndTime:     timestamppb.Now(),
		BucketWidth: durationpb.New(res.Width),
		TenantLimit: int32(rec.Limit()),
		Replicas:    1,
		Points:      make([]*modelv1.UsagePoint, len(points)),
	}
	for i, p := range points {
		out.Points[i] = &modelv1.UsagePoint{
			StartTime: timestamppb.New(p.Start), LogicalModel: p.Logical, Provider: p.Provider, TenantId: p.Tenant,
			Calls: p.Calls, PromptTokens: p.Prompt, CompletionTokens: p.Completion, ReasoningTokens: p.Reasoning,
		}
	}
	return out, nil
}
