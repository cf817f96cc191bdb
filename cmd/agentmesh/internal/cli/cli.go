// Package cli is the agentmesh command line: the verbs that talk to a
// running mesh (chat, jobs, docs, classify, sql, models, health, mcp, ...),
// built with cobra. By default every call goes to the gateway over REST and
// SSE (AGENTMESH_URL, AGENTMESH_API_KEY, or a named context of the contexts
// file), so the CLI works against an install that exposes only the gateway;
// --grpc (or a context's transport: grpc) calls the services directly at
// their *_ADDR addresses. The same generated gRPC clients serve both ways:
// package gatewayconn maps them onto the gateway's routes.
//
// Failures end with an exit code by class (see ExitCode), and errors name
// the address tried and the variable that sets it.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/services/classifier/classifycli"
)

// Config is what the environment says about where the mesh is; main loads
// it. Empty gateway settings fall back to the selected context, then to
// the defaults of `agentmesh up`.
type Config struct {
	// URL is the gateway's base URL.
	URL string `env:"AGENTMESH_URL" help:"gateway URL the CLI talks to (else the current context's, else http://localhost:8080)"`
	// APIKey authenticates to the gateway.
	APIKey string `env:"AGENTMESH_API_KEY" secret:"true" help:"API key the CLI sends to the gateway (else the current context's)"`
	// Context names the context of the contexts file to use.
	Context string `env:"AGENTMESH_CONTEXT" help:"context of the CLI's contexts file to use instead of its current one"`
	// ConfigFile is the contexts file.
	ConfigFile string `env:"AGENTMESH_CONFIG" help:"the CLI's contexts file (default $XDG_CONFIG_HOME/agentmesh/config.yaml)"`
	// Transport is gateway or grpc; empty means the context's, else gateway.
	Transport string `env:"AGENTMESH_TRANSPORT" oneof:"gateway,grpc" help:"how the CLI reaches the mesh: gateway (REST/SSE) or grpc (each service's *_ADDR)"`
	// OrchestratorAddr is the orchestrator's gRPC address.
	OrchestratorAddr string `env:"ORCHESTRATOR_ADDR" default:"localhost:9092" help:"orchestrator gRPC address"`
	// IndexerAddr is the indexer's gRPC address.
	IndexerAddr string `env:"INDEXER_ADDR" default:"localhost:9094" help:"indexer gRPC address"`
	// ClassifierAddr is the classifier's gRPC address.
	ClassifierAddr string `env:"CLASSIFIER_ADDR" default:"localhost:9095" help:"classifier gRPC address"`
	// SQLAgentAddr is the SQL agent's gRPC address.
	SQLAgentAddr string `env:"SQLAGENT_ADDR" default:"localhost:9096" help:"SQL agent gRPC address"`
	// ModelGatewayAddr is the model gateway's gRPC address.
	ModelGatewayAddr string `env:"MODELGATEWAY_ADDR" default:"localhost:9091" help:"model gateway gRPC address"`
	// Tenant is the tenant the CLI acts for.
	Tenant string `env:"AGENTMESH_TENANT" help:"tenant the CLI acts for (else the context's, else default); with an API key the key decides, but a tenant named here or by --tenant is sent, for an operator key to act for"`
	// Project is the project the CLI acts for.
	Project string `env:"AGENTMESH_PROJECT" help:"project the CLI acts for (agentmesh CLI)"`
}

// Exit codes, by class of failure. README's CLI section lists them.
const (
	ExitOK          = 0 // done
	ExitFailure     = 1 // anything else: an internal error, a watched job that failed
	ExitUsage       = 2 // wrong command, flag or argument
	ExitNotFound    = 3 // the job, document, run or session does not exist
	ExitUnavailable = 4 // the gateway or a service cannot be reached, or timed out
	ExitDenied      = 5 // no or a wrong API key, or not allowed
	ExitRefused     = 6 // the mesh refused the request: invalid, wrong state, conflict, limit
	ExitInterrupted = 7 // interrupted (Ctrl-C), or the input ended at a prompt
)

// ErrUsage marks a usage error; the message says how to call.
var ErrUsage = errors.New("usage")

// usagef is a usage error.
func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, args...)...)
}

// exitError carries an explicit exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// ExitCode classifies err: nil is ExitOK; usage errors ExitUsage; gRPC
// status codes (from the services, or from the gateway's error body) by
// class; everything else ExitFailure.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if errors.Is(err, ErrUsage) {
		return ExitUsage
	}
	if errors.Is(err, classifycli.ErrInputClosed) || errors.Is(err, context.Canceled) || errors.Is(err, io.ErrUnexpectedEOF) {
		return ExitInterrupted
	}
	st, ok := status.FromError(err)
	if !ok {
		return ExitFailure
	}
	switch st.Code() {
	case codes.NotFound:
		return ExitNotFound
	case codes.Unavailable, codes.DeadlineExceeded:
		return ExitUnavailable
	case codes.Unauthenticated, codes.PermissionDenied:
		return ExitDenied
	case codes.InvalidArgument, codes.FailedPrecondition, codes.AlreadyExists, codes.Aborted, codes.OutOfRange, codes.ResourceExhausted:
		return ExitRefused
	case codes.Canceled:
		return ExitInterrupted
	}
	return ExitFailure
}

// errorText is how an error reads on stderr: a status error's message
// with its code name (which users search for) instead of grpc-go's
// "rpc error: code = ... desc = ..." spelling.
func errorText(err error) string {
	if st, ok := status.FromError(err); ok && err.Error() == st.Err().Error() {
		return fmt.Sprintf("%s (%s)", st.Message(), st.Code())
	}
	return err.Error()
}

// callErr prefixes a failed call's message with what was done, keeping
// its status code for ExitCode.
func callErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok && err.Error() == st.Err().Error() {
		return status.Errorf(st.Code(), "%s: %s", what, st.Message())
	}
	return fmt.Errorf("%s: %w", what, err)
}
