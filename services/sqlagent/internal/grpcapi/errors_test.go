package grpcapi

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
)

// Clients branch on code and reason: a confirmation that lost to another
// is told the SQL is running (wait and reload) or that the session moved
// on (reload), never an internal error.
func TestToStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{fmt.Errorf("send: %w", session.ErrExecuting), codes.FailedPrecondition, "SQL_RUNNING"},
		{session.ErrConflict, codes.Aborted, "SESSION_CONFLICT"},
		{session.ErrFinished, codes.FailedPrecondition, "SESSION_FINISHED"},
		{session.ErrInputSuperseded, codes.FailedPrecondition, "INPUT_SUPERSEDED"},
		{session.ErrNotFound, codes.NotFound, "SESSION_NOT_FOUND"},
		{&session.SessionChangedError{Expected: 4, Now: 5, PendingSQL: "SELECT 1"}, codes.FailedPrecondition, "SESSION_CHANGED"},
	}
	for _, tc := range tests {
		t.Run(tc.reason, func(t *testing.T) {
			err := toStatus(tc.err)
			if status.Code(err) != tc.code || grpcx.Reason(err) != tc.reason {
				t.Errorf("toStatus(%v) = %v (%s), want %s %s", tc.err, err, grpcx.Reason(err), tc.code, tc.reason)
			}
		})
	}
	changed := toStatus(&session.SessionChangedError{Expected: 4, Now: 5, PendingSQL: "SELECT 1"})
	if want := "expected_version: the session changed since version 4 (it is at 5), so nothing ran; read the session again and show the user what waits for approval now"; status.Convert(changed).Message() != want {
		t.Errorf("SESSION_CHANGED says %q, want %q", status.Convert(changed).Message(), want)
	}
	if err := toStatus(errors.New("x")); status.Code(err) != codes.Unknown {
		t.Errorf("an unknown error is passed on for the interceptor to mask: %v", err)
	}
}
