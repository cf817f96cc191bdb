// Package grpcapi implements agentmesh.sqlagent.v1.SqlAgentService on top of
// the session agent and the connection registry, and maps domain errors to
// gRPC status codes.
package grpcapi

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
)

// Connections is what the API needs to list connections.
type Connections interface {
	List() []connections.Info
	Schemas(ctx context.Context, name string) ([]string, error)
	Visible(tenant, name string) bool
}

// Server implements SqlAgentService.
type Server struct {
	sqlagentv1.UnimplementedSqlAgentServiceServer
	agent *session.Agent
	conns Connections
	log   *slog.Logger
}

var _ sqlagentv1.SqlAgentServiceServer = (*Server)(nil)

// New returns a Server.
func New(agent *session.Agent, conns Connections, log *slog.Logger) *Server {
	return &Server{agent: agent, conns: conns, log: log}
}

// ListConnections lists the connections the caller's tenant may use, with
// dialect and schemas (never DSNs). A database that cannot be reached is
// listed without schemas.
func (s *Server) ListConnections(ctx context.Context, req *sqlagentv1.ListConnectionsRequest) (*sqlagentv1.ListConnectionsResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	out := &sqlagentv1.ListConnectionsResponse{}
	for _, c := range s.conns.List() {
		if !s.conns.Visible(scope.GetTenantId(), c.Name) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		schemas, err := s.conns.Schemas(sctx, c.Name)
		cancel()
		if err != nil {
			s.log.WarnContext(ctx, "list schemas failed", "connection", c.Name, "error", err)
		}
		out.Connections = append(out.Connections, &sqlagentv1.Connection{Name: c.Name, Dialect: c.Dialect, Schemas: schemas})
	}
	return out, nil
}

// CreateSession starts a session.
func (s *Server) CreateSession(ctx context.Context, req *sqlagentv1.CreateSessionRequest) (*sqlagentv1.CreateSessionResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	if len(req.GetText()) > 64<<10 {
		return nil, grpcx.InvalidArgument("text", "is longer than 64 KiB")
	}
	var kind string
	if k := req.GetJobKind(); k != sqlagentv1.JobKind_JOB_KIND_UNSPECIFIED {
		if kind = jobKindNames[k]; kind == "" {
			return nil, grpcx.InvalidArgument("job_kind", "%d is not a job kind", k)
		}
	}
	sess, reply, err := s.agent.Start(ctx, toScope(scope), session.StartRequest{Connection: req.GetConnection(), Text: req.GetText(), JobKind: kind})
	if err != nil {
		return nil, toStatus(err)
	}
	return &sqlagentv1.CreateSessionResponse{
		Session: toProto(sess), Reply: reply.Text, Options: toOptions(reply.Options), Action: actions[reply.Action],
	}, nil
}

// GetSession returns a session of the caller's scope.
func (s *Server) GetSession(ctx context.Context, req *sqlagentv1.GetSessionRequest) (*sqlagentv1.GetSessionResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetSessionId()) == "" {
		return nil, grpcx.InvalidArgument("session_id", "is required")
	}
	sess, err := s.agent.Get(ctx, toScope(scope), req.GetSessionId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &sqlagentv1.GetSessionResponse{Session: toProto(sess)}, nil
}

// SendInput advances a session.
func (s *Server) SendInput(ctx context.Context, req *sqlagentv1.SendInputRequest) (*sqlagentv1.SendInputResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetSessionId()) == "" {
		return nil, grpcx.InvalidArgument("session_id", "is required")
	}
	if len(req.GetText()) > 64<<10 {
		return nil, grpcx.InvalidArgument("text", "is longer than 64 KiB")
	}
	in := session.Request{
		Text: req.GetText(), Selection: req.GetSelection(), ID: req.GetRequestId(), ExpectedVersion: req.ExpectedVersion,
	}
	sess, reply, err := s.agent.SendRequest(ctx, toScope(scope), req.GetSessionId(), in)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &sqlagentv1.SendInputResponse{
		Session: toProto(sess), Reply: reply.Text, Options: toOptions(reply.Options), SqlToConfirm: reply.SQLToConfirm,
		Action: actions[reply.Action], Job: jobProto(reply.Job),
		SchemaTablesShown: reply.SchemaShown, SchemaNote: reply.SchemaNote,
	}
	if reply.Result != nil {
		if resp.Result, err = toTable(reply.Result); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// ListSqlJobs lists the jobs that ran in the caller's scope, newest first.
func (s *Server) ListSqlJobs(ctx context.Context, req *sqlagentv1.ListSqlJobsRequest) (*sqlagentv1.ListSqlJobsResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	q := session.JobQuery{SessionID: strings.TrimSpace(req.GetSessionId()), Limit: int(req.GetPageSize())}
	hash := grpcx.PageFilter("sql_jobs", scope.GetTenantId(), scope.GetProjectId(), q.SessionID)
	if q.After, err = readPageToken(req.GetPageToken(), hash); err != nil {
		return nil, err
	}
	jobs, more, err := s.agent.ListJobs(ctx, toScope(scope), q)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &sqlagentv1.ListSqlJobsResponse{}
	if more && len(jobs) > 0 {
		out.NextPageToken = pageToken(jobs[len(jobs)-1].Cursor(), hash)
	}
	for i := range jobs {
		out.Jobs = append(out.Jobs, jobProto(&jobs[i]))
	}
	return out, nil
}

// pageToken is the token of the page after the item at c, its place
// written "<time in Unix ms>/<id>" (an id may hold slashes; the number
// never does).
func pageToken(c session.Cursor, hash string) string {
	key := strconv.FormatInt(c.Time.UnixMilli(), 10) + "/" + c.ID
	return grpcx.EncodePageToken(&commonv1.PageToken{LastKey: key, FilterHash: hash})
}

// readPageToken reads a token pageToken made for the listing hash; none
// for an empty one.
func readPageToken(tok, hash string) (*session.Cursor, error) {
	if tok == "" {
		return nil, nil
	}
	pt, err := grpcx.DecodePageToken(tok, hash)
	if err != nil {
		return nil, err
	}
	ms, id, ok := strings.Cut(pt.GetLastKey(), "/")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || id == "" {
		return nil, grpcx.InvalidArgument("page_token", "is not a token this service issued")
	}
	return &session.Cursor{Time: time.UnixMilli(n).UTC(), ID: id}, nil
}

// GetSqlJob returns one job of the caller's scope.
func (s *Server) GetSqlJob(ctx context.Context, req *sqlagentv1.GetSqlJobRequest) (*sqlagentv1.GetSqlJobResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetJobId()) == "" {
		return nil, grpcx.InvalidArgument("job_id", "is required")
	}
	j, err := s.agent.GetJob(ctx, toScope(scope), req.GetJobId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &sqlagentv1.GetSqlJobResponse{Job: jobProto(j)}, nil
}

// ListSqlPrompts lists the logged prompts of a session of the caller's
// scope.
func (s *Server) ListSqlPrompts(ctx context.Context, req *sqlagentv1.ListSqlPromptsRequest) (*sqlagentv1.ListSqlPromptsResponse, error) {
	scope, err := grpcx.Scope(ctx, req.GetScope())
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.GetSessionId()) == "" {
		return nil, grpcx.InvalidArgument("session_id", "is required")
	}
	hash := grpcx.PageFilter("sql_prompts", scope.GetTenantId(), scope.GetProjectId(), req.GetSessionId())
	after, err := readPageToken(req.GetPageToken(), hash)
	if err != nil {
		return nil, err
	}
	prompts, more, err := s.agent.ListPrompts(ctx, toScope(scope), req.GetSessionId(), after, int(req.GetPageSize()))
	if err != nil {
		return nil, toStatus(err)
	}
	out := &sqlagentv1.ListSqlPromptsResponse{}
	if more && len(prompts) > 0 {
		out.NextPageToken = pageToken(prompts[len(prompts)-1].Cursor(), hash)
	}
	for _, p := range prompts {
		sp := &sqlagentv1.SqlPrompt{Agent: p.Agent, Answer: p.Answer, Error: p.Error, Time: timestamppb.New(p.Time)}
		for _, m := range p.Messages {
			sp.Messages = append(sp.Messages, &sqlagentv1.PromptMessage{Role: m.Role, Content: m.Content})
		}
		out.Prompts = append(out.Prompts, sp)
	}
	return out, nil
}

// toStatus maps domain errors to gRPC statuses. Unknown errors pass through
// and are masked as Internal by the server's interceptor.
func toStatus(err error) error {
	var in *session.InputError
	var changed *session.SessionChangedError
	switch {
	case errors.As(err, &in):
		return grpcx.InvalidArgument(in.Field, "%s", in.Message)
	case errors.Is(err, session.ErrBadCursor):
		return grpcx.InvalidArgument("page_token", "is not a token this service issued")
	case errors.Is(err, session.ErrPromptLoggingOff):
		return grpcx.Errorf(codes.FailedPrecondition, "PROMPT_LOGGING_OFF", "prompts are not logged on this server (SQLAGENT_PROMPT_LOGGING)")
	case errors.Is(err, session.ErrUnknownConnection):
		return grpcx.Errorf(codes.NotFound, "CONNECTION_NOT_FOUND", "connection: %v", err)
	case errors.Is(err, session.ErrJobNotFound):
		return grpcx.Errorf(codes.NotFound, "JOB_NOT_FOUND", "job not found")
	case errors.Is(err, session.ErrNotFound):
		return grpcx.Errorf(codes.NotFound, "SESSION_NOT_FOUND", "session not found")
	case errors.Is(err, session.ErrInputSuperseded):
		return grpcx.Errorf(codes.FailedPrecondition, "INPUT_SUPERSEDED", "request_id: this input was applied before, and the session has moved on since; reload the session")
	case errors.As(err, &changed):
		msg := "expected_version: the session changed since version %d (it is at %d), so nothing ran; read the session again"
		if changed.PendingSQL != "" {
			msg += " and show the user what waits for approval now"
		}
		return grpcx.Errorf(codes.FailedPrecondition, "SESSION_CHANGED", msg, changed.Expected, changed.Now)
	case errors.Is(err, session.ErrFinished):
		return grpcx.Errorf(codes.FailedPrecondition, "SESSION_FINISHED", "the session is finished; create a new one")
	case errors.Is(err, session.ErrExecuting):
		return grpcx.Errorf(codes.FailedPrecondition, "SQL_RUNNING", "the confirmed SQL of this session is running; reload the session for its result")
	case errors.Is(err, session.ErrConflict):
		return grpcx.Errorf(codes.Aborted, "SESSION_CONFLICT", "the session changed while this input was handled; reload it and retry")
	case errors.Is(err, session.ErrNothingWritten):
		return grpcx.Errorf(codes.FailedPrecondition, "NOTHING_WRITTEN", "selection: SEND_EMAIL needs a table written by WRITE_DATA in this session first; write the result to a table, then e-mail it")
	case errors.Is(err, session.ErrEmailOff):
		return grpcx.Errorf(codes.FailedPrecondition, "EMAIL_NOT_CONFIGURED", "selection: e-mail is not configured on this server (SQLAGENT_SMTP_ADDR)")
	case errors.Is(err, session.ErrUnavailable):
		return grpcx.Errorf(codes.Unavailable, "DEPENDENCY_UNAVAILABLE", "%v", err)
	}
	return err
}

func toScope(s *commonv1.Scope) session.Scope {
	return session.Scope{TenantID: s.GetTenantId(), ProjectID: s.GetProjectId()}
}

var jobKinds = map[string]sqlagentv1.JobKind{
	session.JobReadSQL:    sqlagentv1.JobKind_JOB_KIND_READ_SQL,
	session.JobWriteData:  sqlagentv1.JobKind_JOB_KIND_WRITE_DATA,
	session.JobSendEmail:  sqlagentv1.JobKind_JOB_KIND_SEND_EMAIL,
	session.JobCompareSQL: sqlagentv1.JobKind_JOB_KIND_COMPARE_SQL,
}

var jobKindNames = map[sqlagentv1.JobKind]string{}

func init() {
	for name, k := range jobKinds {
		jobKindNames[k] = name
	}
}

var actions = map[string]sqlagentv1.Action{
	session.ActionAsk:              sqlagentv1.Action_ACTION_ASK,
	session.ActionFetchConnections: sqlagentv1.Action_ACTION_FETCH_CONNECTIONS,
	session.ActionFetchSchemas:     sqlagentv1.Action_ACTION_FETCH_SCHEMAS,
	session.ActionAskJobKind:       sqlagentv1.Action_ACTION_ASK_JOB_KIND,
	session.ActionTool:             sqlagentv1.Action_ACTION_TOOL,
	session.ActionFetchTables:      sqlagentv1.Action_ACTION_FETCH_TABLES,
}

func stringStruct(m map[string]string) *structpb.Struct {
	out := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for k, v := range m {
		out.Fields[k] = structpb.NewStringValue(v)
	}
	return out
}

// jobProto converts a kept job; nil gives nil.
func jobProto(j *session.Job) *sqlagentv1.SqlJob {
	if j == nil {
		return nil
	}
	return &sqlagentv1.SqlJob{
		Id: j.ID, SessionId: j.SessionID, Kind: jobKinds[j.Kind], Name: j.Name, Connection: j.Connection,
		Sql: j.SQL, SecondSql: j.SecondSQL, Parameters: stringStruct(j.Params), RowCount: j.RowCount,
		Duration: durationpb.New(j.Duration), Destination: j.Destination, StartTime: timestamppb.New(j.Started),
	}
}

func toProto(s *session.Session) *sqlagentv1.Session {
	params := stringStruct(s.Params)
	out := &sqlagentv1.Session{
		Id: s.ID, Scope: &commonv1.Scope{TenantId: s.Scope.TenantID, ProjectId: s.Scope.ProjectID},
		JobKind: jobKinds[s.JobKind], Stage: string(s.Stage), Parameters: params, PendingSql: s.PendingSQL,
		CreateTime: timestamppb.New(s.Created), UpdateTime: timestamppb.New(s.Updated),
		SchemaTablesShown: s.SchemaShown, SchemaNote: s.SchemaNote, Version: s.Version,
	}
	for _, t := range s.Turns {
		out.Turns = append(out.Turns, &sqlagentv1.Turn{Role: t.Role, Text: t.Text, Time: timestamppb.New(t.Time)})
	}
	if last := s.LastInput; last != nil && s.Stage != session.StageExecuting && s.Stage != session.StageDone {
		out.Options, out.Action = toOptions(last.Reply.Options), actions[last.Reply.Action]
	}
	return out
}

func toOptions(opts []session.Option) []*sqlagentv1.Option {
	var out []*sqlagentv1.Option
	for _, o := range opts {
		out = append(out, &sqlagentv1.Option{Value: o.Value, Label: o.Label})
	}
	return out
}

func toTable(r *connections.Result) (*sqlagentv1.ResultTable, error) {
	t := &sqlagentv1.ResultTable{Columns: r.Columns, Truncated: r.Truncated}
	for _, row := range r.Rows {
		lv, err := structpb.NewList(row)
		if err != nil {
			return nil, grpcx.Errorf(codes.Internal, "RESULT_ENCODING", "cannot encode a result row: %v", err)
		}
		t.Rows = append(t.Rows, lv)
	}
	return t, nil
}
