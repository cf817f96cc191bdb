package httpgateway

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// replicaUsageTimeout bounds the question to one model gateway replica;
// a replica that does not answer in time is counted as unanswered.
const replicaUsageTimeout = 5 * time.Second

// everyReplicaUsage is ModelService as the REST API calls it, except that
// GetUsage asks every replica behind target and sums their answers: each
// replica counts only the calls it served, and the balanced connection
// would ask one of them at random.
type everyReplicaUsage struct {
	modelv1.ModelServiceClient
	target string // MODELGATEWAY_ADDR, as grpcx.Dial took it
}

// GetUsage implements modelv1.ModelServiceClient.
func (u everyReplicaUsage) GetUsage(ctx context.Context, in *modelv1.GetUsageRequest, opts ...grpc.CallOption) (*modelv1.GetUsageResponse, error) {
	endpoints, err := grpcx.Endpoints(ctx, u.target)
	if err != nil || len(endpoints) < 2 {
		// One replica, or a name this process cannot resolve itself: the
		// balanced connection reaches what there is.
		return u.ModelServiceClient.GetUsage(ctx, in, opts...)
	}
	answers := make([]*modelv1.GetUsageResponse, len(endpoints))
	errs := make([]error, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Go(func() {
			cc, err := grpcx.Dial(ep)
			if err != nil {
				errs[i] = err
				return
			}
			defer cc.Close()
			rctx, cancel := context.WithTimeout(ctx, replicaUsageTimeout)
			defer cancel()
			answers[i], errs[i] = modelv1.NewModelServiceClient(cc).GetUsage(rctx, in, opts...)
		})
	}
	wg.Wait()
	var got []*modelv1.GetUsageResponse
	var firstErr error
	for i, err := range errs {
		switch code := status.Code(err); {
		case err == nil:
			got = append(got, answers[i])
		case code == codes.InvalidArgument || code == codes.PermissionDenied || code == codes.Unauthenticated:
			return nil, err // the request's fault: every replica refuses it alike
		case firstErr == nil:
			firstErr = err
		}
	}
	if len(got) == 0 {
		return nil, firstErr
	}
	return sumUsage(got, len(endpoints)-len(got)), nil
}

// sumUsage adds up the answers of several replicas: the counts of the same
// bucket, model, provider and tenant summed, points ordered as one
// replica orders them (oldest first, then by model, provider and tenant),
// the window from the earliest start to the latest end.
func sumUsage(answers []*modelv1.GetUsageResponse, unanswered int) *modelv1.GetUsageResponse {
	type key struct {
		start                     int64
		logical, provider, tenant string
	}
	out := &modelv1.GetUsageResponse{
		Resolution: answers[0].GetResolution(), StartTime: answers[0].GetStartTime(), EndTime: answers[0].GetEndTime(),
		BucketWidth: answers[0].GetBucketWidth(), ReplicasUnanswered: int32(unanswered),
	}
	sums := map[key]*modelv1.UsagePoint{}
	for _, a := range answers {
		if a.GetStartTime().AsTime().Before(out.GetStartTime().AsTime()) {
			out.StartTime = a.GetStartTime()
		}
		if a.GetEndTime().AsTime().After(out.GetEndTime().AsTime()) {
			out.EndTime = a.GetEndTime()
		}
		out.TenantLimit = max(out.TenantLimit, a.GetTenantLimit())
		out.Replicas += max(a.GetReplicas(), 1) // a replica that predates the field is one
		for _, p := range a.GetPoints() {
			k := key{p.GetStartTime().AsTime().UnixNano(), p.GetLogicalModel(), p.GetProvider(), p.GetTenantId()}
			s := sums[k]
			if s == nil {
				s = &modelv1.UsagePoint{StartTime: p.GetStartTime(), LogicalModel: k.logical, Provider: k.provider, TenantId: k.tenant}
				sums[k] = s
				out.Points = append(out.Points, s)
			}
			s.Calls += p.GetCalls()
			s.PromptTokens += p.GetPromptTokens()
			s.CompletionTokens += p.GetCompletionTokens()
			s.ReasoningTokens += p.GetReasoningTokens()
		}
	}
	slices.SortFunc(out.Points, func(a, b *modelv1.UsagePoint) int {
		return cmp.Or(a.GetStartTime().AsTime().Compare(b.GetStartTime().AsTime()),
			cmp.Compare(a.GetLogicalModel(), b.GetLogicalModel()),
			cmp.Compare(a.GetProvider(), b.GetProvider()),
			cmp.Compare(a.GetTenantId(), b.GetTenantId()))
	})
	return out
}
