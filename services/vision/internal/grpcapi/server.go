// Package grpcapi serves agentmesh.vision.v1.VisionService: it validates
// requests, converts them for the analysis package and maps its failures to
// gRPC status codes.
package grpcapi

import (
	"context"
	"log/slog"

	visionv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/vision/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/vision/internal/analysis"
)

// Server implements visionv1.VisionServiceServer on an analysis.Analyzer.
// It is safe for concurrent use.
type Server struct {
	visionv1.UnimplementedVisionServiceServer
	analyzer *analysis.Analyzer
	log      *slog.Logger
}

var _ visionv1.VisionServiceServer = (*Server)(nil)

// New returns a Server running analyses with analyzer and logging to log.
func New(analyzer *analysis.Analyzer, log *slog.Logger) *Server {
	return &Server{analyzer: analyzer, log: log}
}

// AnalyzeImages runs stage 1 and, for a content type other than GENERIC,
// stage 2 on the request's images. Errors: InvalidArgument naming the field
// (scope.tenant_id, images, content_type); Unavailable, ResourceExhausted,
// DeadlineExceeded or FailedPrecondition when the vision model fails.
func (s *Server) AnalyzeImages(ctx context.Context, req *visionv1.AnalyzeImagesRequest) (*visionv1.AnalyzeImagesResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	ct, err := contentType(req.GetContentType())
	if err != nil {
		return nil, err
	}
	in := analysis.Request{
		ContextText:    req.GetContextText(),
		ContentType:    ct,
		GeneralSummary: req.GetGeneralSummary(),
	}
	for _, img := range req.GetImages() {
		in.Images = append(in.Images, analysis.Image{Name: img.GetName(), Data: img.GetData(), MIMEType: img.GetMimeType()})
	}
	res, err := s.analyzer.Analyze(ctx, in)
	if err != nil {
		return nil, toStatus(err)
	}
	s.log.DebugContext(ctx, "images analysed", "tenant", scope.GetTenantId(), "project", scope.GetProjectId(),
		"images", len(in.Images), "content_type", req.GetContentType().String(), "reused_summary", in.GeneralSummary != "")

	out := &visionv1.AnalyzeImagesResponse{
		GeneralSummary:      res.GeneralSummary,
		TypeSpecificDetails: res.TypeSpecificDetails,
		Model:               res.Model,
		Tokens:              res.Tokens,
	}
	for _, r := range res.Images {
		out.Images = append(out.Images, &visionv1.ImageAnalysis{
			Name:                r.Name,
			GeneralDescription:  r.GeneralDescription,
			TypeSpecificDetails: r.TypeSpecificDetails,
			SkippedReason:       r.SkippedReason,
		})
	}
	return out, nil
}

// contentType maps the proto enum; UNSPECIFIED and GENERIC both mean
// "no stage 2".
func contentType(ct visionv1.ContentType) (analysis.ContentType, error) {
	switch ct {
	case visionv1.ContentType_CONTENT_TYPE_UNSPECIFIED, visionv1.ContentType_CONTENT_TYPE_GENERIC:
		return analysis.Generic, nil
	case visionv1.ContentType_CONTENT_TYPE_EMAIL:
		return analysis.Email, nil
	case visionv1.ContentType_CONTENT_TYPE_TICKET:
		return analysis.Ticket, nil
	case visionv1.ContentType_CONTENT_TYPE_WIKI:
		return analysis.Wiki, nil
	case visionv1.ContentType_CONTENT_TYPE_LOG:
		return analysis.Log, nil
	}
	return 0, grpcx.InvalidArgument("content_type", "unknown content type %d", int32(ct))
}
