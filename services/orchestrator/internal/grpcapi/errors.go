package grpcapi

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/outage"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/chat"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
)

// Reasons in google.rpc.ErrorInfo, for clients that branch on them.
const (
	ReasonConversationNotFound = "CONVERSATION_NOT_FOUND"
	ReasonConversationBusy     = "CONVERSATION_BUSY"
	ReasonTurnCancelled        = "TURN_CANCELLED"
	ReasonTurnNotFound         = "TURN_NOT_FOUND"
	ReasonTurnNotResumable     = "TURN_NOT_RESUMABLE"
)

// toStatus maps the domain's errors to gRPC statuses. Errors it does not
// know pass through unchanged: the server's interceptor masks those that
// are not statuses as Internal and logs them.
func toStatus(err error) error {
	if o := outage.Find(err); o != nil {
		// Before the context cases: the driver reports a database that
		// never answered as a deadline too.
		return o.GRPCStatus().Err()
	}
	var (
		busy *conversation.BusyError
		te   *chat.TurnError
		fe   *chat.FieldError
	)
	switch {
	case errors.As(err, &fe):
		return grpcx.InvalidArgument(fe.Field, "%s", fe.Reason)
	case errors.Is(err, chat.ErrTurnNotFound):
		return grpcx.Errorf(codes.NotFound, ReasonTurnNotFound, "turn_id: no such turn in this conversation (or its events have expired)")
	case errors.Is(err, chat.ErrNotResumable):
		return grpcx.Errorf(codes.FailedPrecondition, ReasonTurnNotResumable, "%v", err)
	case errors.As(err, &te):
		return te.GRPCStatus().Err()
	case errors.As(err, &busy):
		return grpcx.Errorf(codes.Aborted, ReasonConversationBusy,
			"the conversation is already processing a message (held by %s until %s unless it finishes first); wait for that turn to complete, then send again",
			busy.Holder, busy.Until.Format("15:04:05Z07:00"))
	case errors.Is(err, conversation.ErrBusy):
		return grpcx.Errorf(codes.Aborted, ReasonConversationBusy,
			"the conversation is already processing a message; wait for that turn to complete, then send again")
	case errors.Is(err, conversation.ErrNotFound):
		return grpcx.Errorf(codes.NotFound, ReasonConversationNotFound, "conversation not found")
	case errors.Is(err, conversation.ErrInvalidPageToken):
		return grpcx.InvalidArgument("page_token", "was not issued by a previous ListConversations with the same caller")
	case errors.Is(err, conversation.ErrAlreadyExists):
		return status.Error(codes.AlreadyExists, "conversation already exists")
	case errors.Is(err, chat.ErrCancelled), errors.Is(err, context.Canceled):
		return grpcx.Errorf(codes.Canceled, ReasonTurnCancelled, "the turn was cancelled by the client; its partial answer is stored, marked cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	}
	return err
}
