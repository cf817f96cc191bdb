package sqlgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// routeSchema constrains the router's answer: a job kind out of the four
// (or UNKNOWN) and the parameters the text names.
const routeSchema = `{
  "type": "object",
  "properties": {
    "job_kind": {"type": "string", "enum": ["READ_SQL", "WRITE_DATA", "SEND_EMAIL", "COMPARE_SQL", "UNKNOWN"]},
    "connection": {"type": "string", "description": "a database connection the user names, else empty"},
    "question": {"type": "string", "description": "the data the user asks for, in their words, else empty"}
  },
  "required": ["job_kind"],
  "additionalProperties": false
}`

// ErrNoJobKind means the model's answer names no job kind (garbage, or
// UNKNOWN).
var ErrNoJobKind = errors.New("no job kind in the answer")

// Routed is the router's reading of free text.
type Routed struct {
	// JobKind is READ_SQL, WRITE_DATA, SEND_EMAIL or COMPARE_SQL.
	JobKind string
	// Connection is a connection the text names, if any (the caller
	// checks it against the configured ones).
	Connection string
	// Question is the data the text asks for, in plain words, if any.
	Question string
}

// RouteMessages builds the router's prompt: the job kinds and the
// connection names as the system message, the user's text as the user
// message.
func RouteMessages(text string, connections []string) []*modelv1.Message {
	sys := `You route a user's request to a database job. Answer with JSON only:
{"job_kind": ..., "connection": ..., "question": ...}
job_kind is one of:
- READ_SQL: read or query data ("show", "list", "how many", "read data from ...")
- WRITE_DATA: write the result of a query to a table
- SEND_EMAIL: e-mail a table or a result
- COMPARE_SQL: compare the results of two queries
- UNKNOWN: none of these
connection: one of these names if the user names it, else "": ` + strings.Join(connections, ", ") + `
question: for READ_SQL, the data the user asks for, in their words; else "".`
	return []*modelv1.Message{
		{Role: modelv1.Role_ROLE_SYSTEM, Content: sys},
		{Role: modelv1.Role_ROLE_USER, Content: "Request: " + strings.TrimSpace(text)},
	}
}

// Route asks the model which job text asks for (session.Router). An
// answer that is not the schema's JSON, or names no known job kind, is
// ErrNoJobKind (the agent then asks); the gateway refusing the
// answer after its repair attempt is too. Other failures are ErrModel.
func (g *Generator) Route(ctx context.Context, text string, connections []string) (Routed, error) {
	temp := 0.0
	resp, err := g.chat(ctx, AgentJob, &modelv1.ChatRequest{
		Model:    g.model,
		Messages: RouteMessages(text, connections),
		Options:  &modelv1.GenerationOptions{Temperature: &temp},
		ResponseFormat: &modelv1.ResponseFormat{
			Type: modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, JsonSchema: routeSchema, SchemaName: "sql_job_route",
		},
	})
	if status.Code(err) == codes.FailedPrecondition {
		return Routed{}, fmt.Errorf("%w: %v", ErrNoJobKind, status.Convert(err).Message())
	}
	if err != nil {
		return Routed{}, fmt.Errorf("%w: %w", ErrModel, err)
	}
	var ans struct {
		JobKind    string `json:"job_kind"`
		Connection string `json:"connection"`
		Question   string `json:"question"`
	}
	if err := json.Unmarshal([]byte(Extract(resp.GetMessage().GetContent())), &ans); err != nil {
		return Routed{}, fmt.Errorf("%w: %v", ErrNoJobKind, err)
	}
	switch ans.JobKind {
	case "READ_SQL", "WRITE_DATA", "SEND_EMAIL", "COMPARE_SQL":
	default:
		return Routed{}, fmt.Errorf("%w: %q", ErrNoJobKind, ans.JobKind)
	}
	return Routed{JobKind: ans.JobKind, Connection: strings.TrimSpace(ans.Connection), Question: strings.TrimSpace(ans.Question)}, nil
}
