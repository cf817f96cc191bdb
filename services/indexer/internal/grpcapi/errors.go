// Package grpcapi implements the indexer's gRPC services — DocumentService,
// SearchService, GraphService — on top of the intake pipeline: it resolves
// the scope of every request, validates input (InvalidArgument names the
// field), and maps domain errors to status codes in one place.
package grpcapi

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	"github.com/agentmesh/agentmesh/services/indexer/internal/graph"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intake"
)

// toStatus maps a domain error to a gRPC status error. Errors that already
// carry a status keep it; context errors pass through (the server
// interceptor reports them); anything else is returned as is and masked
// as Internal by the interceptor, which logs it once.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var st interface{ GRPCStatus() *status.Status }
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, document.ErrNotFound):
		return grpcx.Errorf(codes.NotFound, "NOT_FOUND", "not found")
	case errors.Is(err, graph.ErrNotFound):
		return grpcx.Errorf(codes.NotFound, "NODE_NOT_FOUND", "graph node not found")
	case errors.Is(err, intake.ErrDeleting):
		return grpcx.Errorf(codes.FailedPrecondition, "DOCUMENT_DELETING", "the document is being deleted; ingest it again once the delete has finished")
	case errors.Is(err, intake.ErrEventsExpired):
		return grpcx.Errorf(codes.FailedPrecondition, "INTAKE_EVENTS_EXPIRED", "%v; GetDocument returns the pipeline", err)
	case errors.Is(err, intake.ErrNoEventBus):
		return grpcx.Errorf(codes.Unavailable, "NO_EVENT_BUS", "this indexer cannot read intake events")
	case errors.Is(err, document.ErrConflict):
		return grpcx.Errorf(codes.Aborted, "CONCURRENT_WRITE", "the document was changed concurrently; retry")
	case errors.As(err, &st) && st.GRPCStatus().Code() == codes.Unavailable:
		// A peer (model gateway, vision) is down.
		return grpcx.Errorf(codes.Unavailable, "DEPENDENCY_UNAVAILABLE", "a dependency is unavailable: %s", st.GRPCStatus().Message())
	}
	return err
}

// Paging limits.
const (
	defaultPageSize = 50
	maxPageSize     = 500
)

// pageSize applies the default and the maximum (larger sizes are
// coerced down, as AIP-158 asks; the contract refuses negative ones).
func pageSize(n int32) int {
	switch {
	case n <= 0:
		return defaultPageSize
	case n > maxPageSize:
		return maxPageSize
	}
	return int(n)
}

func encodeToken(lastKey, hash string) string {
	return grpcx.EncodePageToken(&commonv1.PageToken{LastKey: lastKey, FilterHash: hash})
}

// decodeToken returns the last key of a token made for the same filter.
func decodeToken(tok, hash string) (string, error) {
	if tok == "" {
		return "", nil
	}
	pt, err := grpcx.DecodePageToken(tok, hash)
	return pt.GetLastKey(), err
}
