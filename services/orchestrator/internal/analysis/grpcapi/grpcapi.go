// Package grpcapi implements the JobService gRPC server over the analysis
// engine: it resolves the caller's scope on every RPC, validates requests,
// converts between the contract and the domain, and maps domain errors to
// status codes in one place (toStatus).
package grpcapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/outage"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

// Page sizes of ListJobs.
const (
	defaultPageSize = 50
	maxPageSize     = 500
)

// Server implements orchestratorv1.JobServiceServer.
type Server struct {
	orchestratorv1.UnimplementedJobServiceServer
	engine *analysis.Engine
}

var _ orchestratorv1.JobServiceServer = (*Server)(nil)

// New returns a JobService server backed by engine.
func New(engine *analysis.Engine) *Server { return &Server{engine: engine} }

// SubmitAnalysis implements JobService.
func (s *Server) SubmitAnalysis(ctx context.Context, req *orchestratorv1.SubmitAnalysisRequest) (*orchestratorv1.SubmitAnalysisResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	j, err := s.engine.Submit(ctx, analysis.SubmitRequest{
		Tenant: scope.GetTenantId(), Project: scope.GetProjectId(),
		Query: req.GetQuery(), ResponseType: req.GetResponseType(),
		OutputSchema: req.GetOutputJsonSchema(), AllowedTools: req.GetAllowedTools(),
		RequestID: req.GetRequestId(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &orchestratorv1.SubmitAnalysisResponse{Job: analysis.ToProto(j, nil)}, nil
}

// GetJob implements JobService.
func (s *Server) GetJob(ctx context.Context, req *orchestratorv1.GetJobRequest) (*orchestratorv1.GetJobResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	j, children, err := s.engine.Get(ctx, scope.GetTenantId(), scope.GetProjectId(), req.GetJobId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &orchestratorv1.GetJobResponse{Job: analysis.ToProto(j, children)}, nil
}

// ListJobs implements JobService.
func (s *Server) ListJobs(ctx context.Context, req *orchestratorv1.ListJobsRequest) (*orchestratorv1.ListJobsResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = defaultPageSize
	case size > maxPageSize:
		size = maxPageSize
	}
	q := analysis.ListQuery{
		Tenant: scope.GetTenantId(), Project: scope.GetProjectId(),
		Status: analysis.StatusFromProto(req.GetStatus()), Type: analysis.TypeFromProto(req.GetType()),
		ParentID: req.GetParentId(), Limit: size,
	}
	if q.From, q.To, err = grpcx.CreateTimeRange(req.GetCreateTimeFrom(), req.GetCreateTimeTo()); err != nil {
		return nil, err
	}
	hash := filterHash(scope, req)
	if req.GetPageToken() != "" {
		pt, err := grpcx.DecodePageToken(req.GetPageToken(), hash)
		if err != nil {
			return nil, err
		}
		if pt.GetLastKey() == "" {
			return nil, grpcx.InvalidArgument("page_token", "is not a token this service issued")
		}
		q.After = pt.GetLastKey()
	}
	jobs, next, err := s.engine.List(ctx, q)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &orchestratorv1.ListJobsResponse{}
	for _, j := range jobs {
		resp.Jobs = append(resp.Jobs, analysis.ToProto(j, nil))
	}
	if next != "" {
		resp.NextPageToken = grpcx.EncodePageToken(&commonv1.PageToken{LastKey: next, FilterHash: hash})
	}
	return resp, nil
}

// WatchJob implements JobService.
func (s *Server) WatchJob(req *orchestratorv1.WatchJobRequest, stream orchestratorv1.JobService_WatchJobServer) error {
	ctx := stream.Context()
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return err
	}
	ids, err := s.engine.EventIDs(ctx)
	if err != nil {
		return toStatus(err)
	}
	err = s.engine.Watch(ctx, scope.GetTenantId(), scope.GetProjectId(), req.GetJobId(), ids.Seq(req.GetAfterSequence()),
		func(seq uint64, ev *orchestratorv1.JobEvent) error {
			return stream.Send(&orchestratorv1.WatchJobResponse{Sequence: ids.ID(seq), Event: ev})
		})
	if err != nil && ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return toStatus(err)
}

// CancelJob implements JobService.
func (s *Server) CancelJob(ctx context.Context, req *orchestratorv1.CancelJobRequest) (*orchestratorv1.CancelJobResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	j, err := s.engine.Cancel(ctx, scope.GetTenantId(), scope.GetProjectId(), req.GetJobId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &orchestratorv1.CancelJobResponse{Job: analysis.ToProto(j, nil)}, nil
}

// RetryJob implements JobService.
func (s *Server) RetryJob(ctx context.Context, req *orchestratorv1.RetryJobRequest) (*orchestratorv1.RetryJobResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	j, err := s.engine.Retry(ctx, scope.GetTenantId(), scope.GetProjectId(), req.GetJobId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &orchestratorv1.RetryJobResponse{Job: analysis.ToProto(j, nil)}, nil
}

// toStatus maps domain errors to gRPC status errors; unknown errors become
// Internal without their text (the interceptor logs the original).
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if o := outage.Find(err); o != nil {
		return o.GRPCStatus().Err()
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var fe *analysis.FieldError
	switch {
	case errors.As(err, &fe):
		return grpcx.InvalidArgument(fe.Field, "%s", fe.Reason)
	case errors.Is(err, analysis.ErrNotFound):
		return grpcx.Errorf(codes.NotFound, "JOB_NOT_FOUND", "job not found")
	case errors.Is(err, analysis.ErrWrongState):
		return grpcx.Errorf(codes.FailedPrecondition, "JOB_WRONG_STATE", "%v", err)
	case errors.Is(err, analysis.ErrRequestReused):
		return grpcx.Errorf(codes.AlreadyExists, "REQUEST_ID_REUSED", "request_id: %v; send a new request_id for a new analysis", err)
	case errors.Is(err, analysis.ErrConflict):
		return grpcx.Errorf(codes.Aborted, "JOB_CONFLICT", "the job changed concurrently; retry")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "cancelled")
	}
	return grpcx.Errorf(codes.Internal, "INTERNAL", "internal error")
}

// filterHash fingerprints the scope a ListJobs request lists (the key's,
// when the request names none) and its filter, so a page token is only
// accepted with the scope and filter it was issued for.
func filterHash(scope *commonv1.Scope, req *orchestratorv1.ListJobsRequest) string {
	f := &orchestratorv1.ListJobsRequest{
		Scope: scope, Status: req.GetStatus(), Type: req.GetType(), ParentId: req.GetParentId(),
		CreateTimeFrom: req.GetCreateTimeFrom(), CreateTimeTo: req.GetCreateTimeTo(),
	}
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(f)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
