// Package sqlgen turns a plain-English question into one SQL query by asking
// the model gateway's logical model "sql", with the connection's live schema
// in the prompt. It only proposes SQL: the caller checks it with package
// safety and shows it to the user before anything runs.
package sqlgen

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// Errors returned by Generate.
var (
	// ErrModel means the model gateway failed; it wraps the gRPC error.
	ErrModel = errors.New("model call failed")
	// ErrNoSQL means the model answered without a query; the error text
	// carries its reason.
	ErrNoSQL = errors.New("the model did not write a query")
)

// Request is what the model is asked.
type Request struct {
	// Dialect is "sqlite", "postgres" or "mysql".
	Dialect string
	// Schema is the connection's tables and columns, one line per table.
	Schema string
	// Question is the user's question.
	Question string
	// PreviousSQL and Feedback, when set, ask for a corrected query: the
	// last proposal and what the user (or the database) said about it.
	PreviousSQL string
	Feedback    string
}

// Generator asks the model gateway for SQL. It is safe for concurrent use.
type Generator struct {
	client modelv1.ModelServiceClient
	model  string
	log    PromptLog
}

// New returns a Generator calling model (a logical model name, "sql" by
// default) through client.
func New(client modelv1.ModelServiceClient, model string) *Generator {
	if model == "" {
		model = "sql"
	}
	return &Generator{client: client, model: model}
}

// cannotPrefix marks an answer in which the model declines.
const cannotPrefix = "CANNOT:"

// Generate returns the model's query for req with code fences and trailing
// semicolons removed. ErrNoSQL when the model declines or answers empty,
// ErrModel when the call fails.
func (g *Generator) Generate(ctx context.Context, req Request) (string, error) {
	temp := 0.1
	resp, err := g.chat(ctx, AgentSQL, &modelv1.ChatRequest{
		Model:    g.model,
		Messages: Messages(req),
		Options:  &modelv1.GenerationOptions{Temperature: &temp},
	})
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrModel, err)
	}
	sql := Extract(resp.GetMessage().GetContent())
	if sql == "" {
		return "", fmt.Errorf("%w: empty answer", ErrNoSQL)
	}
	if rest, ok := strings.CutPrefix(sql, cannotPrefix); ok {
		return "", fmt.Errorf("%w: %s", ErrNoSQL, strings.TrimSpace(rest))
	}
	return sql, nil
}

// Messages builds the prompt: the rules and the schema as the system
// message, the question (and any correction) as the user message.
func Messages(req Request) []*modelv1.Message {
	dialect := "SQLite"
	switch req.Dialect {
	case "postgres":
		dialect = "PostgreSQL"
	case "mysql":
		dialect = "MariaDB/MySQL (backticks quote names)"
	}
	sys := fmt.Sprintf(`You write one read-only %s query that answers the user's question.
Rules:
- Answer with the SQL only, in a single `+"```sql"+` block, no explanation.
- One SELECT statement (WITH ... SELECT is fine). Never INSERT, UPDATE, DELETE, DDL or PRAGMA.
- Use only the tables and columns of the schema below; quote identifiers only when needed.
- If the schema cannot answer the question, answer "%s <reason>" instead.

Schema (table(column TYPE, ...)):
%s`, dialect, cannotPrefix, strings.TrimSpace(req.Schema))
	user := "Question: " + strings.TrimSpace(req.Question)
	if req.PreviousSQL != "" {
		user += "\n\nYour previous query was:\n```sql\n" + req.PreviousSQL + "\n```\nCorrection: " + strings.TrimSpace(req.Feedback) +
			"\nWrite the corrected query."
	}
	return []*modelv1.Message{
		{Role: modelv1.Role_ROLE_SYSTEM, Content: sys},
		{Role: modelv1.Role_ROLE_USER, Content: user},
	}
}

var fenceRE = regexp.MustCompile("(?s)```[a-zA-Z]*\\s*\\n?(.*?)```")

// Extract pulls the query out of a model answer: the first fenced block if
// there is one, else the whole text; trailing semicolons and white space are
// removed. Reasoning models' <think> sections are dropped first.
func Extract(answer string) string {
	if i := strings.LastIndex(answer, "</think>"); i >= 0 {
		answer = answer[i+len("</think>"):]
	}
	if m := fenceRE.FindStringSubmatch(answer); m != nil {
		answer = m[1]
	}
	return strings.TrimRight(strings.TrimSpace(answer), "; \n\t")
}
