package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
)

// Stages and choices of the SQL agent's READ_SQL stage machine that the SQL
// tools drive (services/sqlagent, package session).
const (
	stageConfirmGenerated = "CONFIRM_GENERATED_SQL"
	stageConfirmUser      = "CONFIRM_USER_SQL"
	choiceGenerate        = "generate"
	choiceUserSQL         = "user_sql"
	choiceConfirm         = "confirm"
	// stageExecuteSQL asks a confirmed read for its job name;
	// choiceDefaultName takes the name the agent offers.
	stageExecuteSQL   = "EXECUTE_SQL"
	choiceDefaultName = "default"
)

// Connection is a database the SQL agent may query.
type Connection struct {
	Name    string   `json:"name"`
	Dialect string   `json:"dialect"`
	Schemas []string `json:"schemas,omitempty"`
}

// ConnectionsOutput is sql_list_connections' result.
type ConnectionsOutput struct {
	Connections []Connection `json:"connections"`
}

// maxInputBytes bounds a question or SQL: SendInputRequest.text's limit.
const maxInputBytes = 65536

// PrepareInput is sql_prepare_query's arguments.
type PrepareInput struct {
	Connection string `json:"connection" jsonschema:"database connection name, from sql_list_connections"`
	Question   string `json:"question,omitempty" jsonschema:"a question in plain English; the agent writes the SQL"`
	SQL        string `json:"sql,omitempty" jsonschema:"or: your own single read-only SELECT"`
}

// PrepareOutput is sql_prepare_query's result: the SQL waiting for approval.
type PrepareOutput struct {
	SessionID    string `json:"session_id"`
	SQLToConfirm string `json:"sql_to_confirm"`
	Message      string `json:"message"`
}

// RunInput is sql_run_confirmed's arguments.
type RunInput struct {
	SessionID string `json:"session_id" jsonschema:"the session_id sql_prepare_query returned"`
	SQL       string `json:"sql" jsonschema:"exactly the sql_to_confirm the user approved"`
	JobName   string `json:"job_name,omitempty" jsonschema:"a name for the job in the SQL agent's job list; the agent's default when empty"`
}

// RunOutput is the result of a confirmed read.
type RunOutput struct {
	Columns   []string `json:"columns"`
	Rows      [][]any  `json:"rows"`
	RowCount  int      `json:"row_count"`
	Truncated bool     `json:"truncated"`
	Message   string   `json:"message"`
}

func (t *tools) addSQLTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        "sql_list_connections",
		Title:       "List SQL connections",
		Description: "List the databases the SQL agent may query (names and dialects, never credentials).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, t.listConnections)
	mcp.AddTool(s, &mcp.Tool{
		Name:  "sql_prepare_query",
		Title: "Prepare a read-only SQL query",
		Description: "Prepare a read-only query on a database, from a plain-English question (the agent writes the SQL) " +
			"or from your own SELECT. Nothing runs: it returns the checked SQL (sql_to_confirm) and a session_id. Show " +
			"the SQL to the user; only once they approve it, call sql_run_confirmed with that session_id and SQL.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, t.prepareQuery)
	mcp.AddTool(s, &mcp.Tool{
		Name:  "sql_run_confirmed",
		Title: "Run an approved SQL query",
		Description: "Run the SQL that sql_prepare_query returned, after the user approved it. The sql argument must be " +
			"exactly that sql_to_confirm: anything else is refused. Only read-only queries can run; returns the rows.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, t.runConfirmed)
}

func (t *tools) listConnections(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, ConnectionsOutput, error) {
	ctx, scope, err := t.callScope(ctx)
	if err != nil {
		return nil, ConnectionsOutput{}, err
	}
	resp, err := t.sql.ListConnections(ctx, &sqlagentv1.ListConnectionsRequest{Scope: scope})
	if err != nil {
		return nil, ConnectionsOutput{}, serviceError("list connections", err)
	}
	out := ConnectionsOutput{Connections: []Connection{}}
	for _, c := range resp.GetConnections() {
		out.Connections = append(out.Connections, Connection{Name: c.GetName(), Dialect: c.GetDialect(), Schemas: c.GetSchemas()})
	}
	return nil, out, nil
}

// prepareQuery walks a new READ_SQL session to its confirmation stage: the
// connection, the method, then the question or the SQL. The agent checks
// the SQL (read-only, one statement) before it offers it; nothing runs.
func (t *tools) prepareQuery(ctx context.Context, _ *mcp.CallToolRequest, in PrepareInput) (*mcp.CallToolResult, PrepareOutput, error) {
	if err := required("connection", in.Connection); err != nil {
		return nil, PrepareOutput{}, errors.New("connection is required: sql_list_connections lists them")
	}
	question, sql := strings.TrimSpace(in.Question), strings.TrimSpace(in.SQL)
	if (question == "") == (sql == "") {
		return nil, PrepareOutput{}, errors.New("give exactly one of question and sql")
	}
	for name, v := range map[string]string{"question": question, "sql": sql} {
		if len(v) > maxInputBytes {
			return nil, PrepareOutput{}, fmt.Errorf("%s is %d bytes; at most %d", name, len(v), maxInputBytes)
		}
	}
	ctx, scope, err := t.callScope(ctx)
	if err != nil {
		return nil, PrepareOutput{}, err
	}
	created, err := t.sql.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{Scope: scope, Connection: in.Connection})
	if err != nil {
		return nil, PrepareOutput{}, serviceError("create session", err)
	}
	id := created.GetSession().GetId()
	method, text := choiceGenerate, question
	if sql != "" {
		method, text = choiceUserSQL, sql
	}
	if _, err := t.sql.SendInput(ctx, &sqlagentv1.SendInputRequest{Scope: scope, SessionId: id, Selection: method}); err != nil {
		return nil, PrepareOutput{}, serviceError("choose how to get the SQL", err)
	}
	resp, err := t.sql.SendInput(ctx, &sqlagentv1.SendInputRequest{Scope: scope, SessionId: id, Text: text})
	if err != nil {
		return nil, PrepareOutput{}, serviceError("prepare the SQL", err)
	}
	if resp.GetSqlToConfirm() == "" {
		// Refused (not read-only, not one statement) or no SQL written:
		// the agent's reply says which.
		return nil, PrepareOutput{}, fmt.Errorf("no SQL to run: %s", resp.GetReply())
	}
	return nil, PrepareOutput{SessionID: id, SQLToConfirm: resp.GetSqlToConfirm(), Message: resp.GetReply()}, nil
}

// runConfirmed confirms a session's pending SQL, only if it is exactly the
// SQL given, and returns the rows.
func (t *tools) runConfirmed(ctx context.Context, _ *mcp.CallToolRequest, in RunInput) (*mcp.CallToolResult, RunOutput, error) {
	if err := required("session_id", in.SessionID); err != nil {
		return nil, RunOutput{}, err
	}
	if err := required("sql", in.SQL); err != nil {
		return nil, RunOutput{}, err
	}
	ctx, scope, err := t.callScope(ctx)
	if err != nil {
		return nil, RunOutput{}, err
	}
	got, err := t.sql.GetSession(ctx, &sqlagentv1.GetSessionRequest{Scope: scope, SessionId: in.SessionID})
	if err != nil {
		return nil, RunOutput{}, serviceError("get session", err)
	}
	s := got.GetSession()
	if s.GetStage() != stageConfirmGenerated && s.GetStage() != stageConfirmUser {
		return nil, RunOutput{}, fmt.Errorf("session %s has no SQL waiting for approval (stage %s): prepare the query again", in.SessionID, s.GetStage())
	}
	if strings.TrimSpace(in.SQL) != strings.TrimSpace(s.GetPendingSql()) {
		return nil, RunOutput{}, fmt.Errorf("the sql differs from the SQL waiting for approval in session %s; nothing ran. Pass exactly its sql_to_confirm:\n%s", in.SessionID, s.GetPendingSql())
	}
	// The confirmation holds only for the session as read here: had
	// another input replaced the SQL since, it is refused (SESSION_CHANGED)
	// and nothing runs.
	resp, err := t.sql.SendInput(ctx, &sqlagentv1.SendInputRequest{Scope: scope, SessionId: in.SessionID, Selection: choiceConfirm,
		ExpectedVersion: ptr(s.GetVersion())})
	if err != nil {
		return nil, RunOutput{}, serviceError("run the SQL", err)
	}
	if resp.GetSession().GetStage() == stageExecuteSQL {
		// The confirmed read asks for its job name, then runs.
		name := &sqlagentv1.SendInputRequest{Scope: scope, SessionId: in.SessionID, Selection: choiceDefaultName,
			ExpectedVersion: ptr(resp.GetSession().GetVersion())}
		if n := strings.TrimSpace(in.JobName); n != "" {
			name.Selection, name.Text = "", n
		}
		if resp, err = t.sql.SendInput(ctx, name); err != nil {
			return nil, RunOutput{}, serviceError("run the SQL", err)
		}
	}
	res := resp.GetResult()
	if res == nil {
		return nil, RunOutput{}, fmt.Errorf("the query did not run: %s", resp.GetReply())
	}
	out := RunOutput{Columns: res.GetColumns(), Rows: [][]any{}, Truncated: res.GetTruncated(), Message: resp.GetReply()}
	if out.Columns == nil {
		out.Columns = []string{}
	}
	for _, r := range res.GetRows() {
		out.Rows = append(out.Rows, r.AsSlice())
	}
	out.RowCount = len(out.Rows)
	return nil, out, nil
}
