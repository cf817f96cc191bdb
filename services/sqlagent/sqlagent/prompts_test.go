package sqlagent_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// TestPromptLogging turns prompt logging on, sends a request carrying a
// password, and reads the session's prompts back: one per model call (the
// router's, then the SQL writer's), each with the answer, the password
// masked everywhere. Another scope sees nothing; a server with logging off
// says so.
func TestPromptLogging(t *testing.T) {
	t.Parallel()
	const request = "read the customers from music, my password=hunter2"
	sim, modelAddr := startModel(t)
	route(sim, "my password=", map[string]string{"job_kind": "READ_SQL", "connection": "music", "question": "the customers, password=hunter2"})
	sim.When(providersim.Match{SystemContains: "You write one read-only"}).Text("```sql\nSELECT FirstName FROM Customer\n```")
	conns := "music=sqlite:" + chinookCopy(t)
	c := startAgent(t, modelAddr, conns, map[string]string{"SQLAGENT_PROMPT_LOGGING": "true"})

	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Text: request})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	wantStage(t, created, "ASK_SQL_METHOD")
	wantStage(t, send(t, c, id, "sel:generate"), "CONFIRM_GENERATED_SQL")

	got, err := c.ListSqlPrompts(ctxTimeout(t), &sqlagentv1.ListSqlPromptsRequest{Scope: scopeA, SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	prompts := got.GetPrompts()
	if len(prompts) != len(sim.ChatRequests()) || len(prompts) != 2 || prompts[0].GetAgent() != "job_agent" || prompts[1].GetAgent() != "sql_agent" {
		t.Fatalf("%d prompts logged for %d model calls: %v", len(prompts), len(sim.ChatRequests()), prompts)
	}
	if !strings.Contains(prompts[0].GetAnswer(), "READ_SQL") || prompts[1].GetAnswer() != "```sql\nSELECT FirstName FROM Customer\n```" {
		t.Fatalf("answers = %q, %q", prompts[0].GetAnswer(), prompts[1].GetAnswer())
	}
	var all strings.Builder
	for _, p := range prompts {
		all.WriteString(p.GetAnswer())
		for _, m := range p.GetMessages() {
			all.WriteString(m.GetRole() + ": " + m.GetContent() + "\n")
		}
	}
	if s := all.String(); strings.Contains(s, "hunter2") || !strings.Contains(s, "password=***") || !strings.Contains(s, "Customer(") {
		t.Fatalf("logged prompts leak the password or lack the masked request or the schema:\n%s", s)
	}
	// The model itself was sent the words as typed: only the log is masked.
	if !strings.Contains(sim.ChatRequests()[0].LastUserText(), "hunter2") {
		t.Fatal("the router was not sent the request")
	}

	// Pages of one: the same two prompts, then the end; a page's token
	// is for its session only.
	first, err := c.ListSqlPrompts(ctxTimeout(t), &sqlagentv1.ListSqlPromptsRequest{Scope: scopeA, SessionId: id, PageSize: 1})
	if err != nil || len(first.GetPrompts()) != 1 || first.GetPrompts()[0].GetAgent() != "job_agent" || first.GetNextPageToken() == "" {
		t.Fatalf("first page of one: %v, %v", first, err)
	}
	second, err := c.ListSqlPrompts(ctxTimeout(t), &sqlagentv1.ListSqlPromptsRequest{Scope: scopeA, SessionId: id, PageSize: 1, PageToken: first.GetNextPageToken()})
	if err != nil || len(second.GetPrompts()) != 1 || second.GetPrompts()[0].GetAgent() != "sql_agent" {
		t.Fatalf("second page of one: %v, %v", second, err)
	}
	if tok := second.GetNextPageToken(); tok != "" {
		last, err := c.ListSqlPrompts(ctxTimeout(t), &sqlagentv1.ListSqlPromptsRequest{Scope: scopeA, SessionId: id, PageSize: 1, PageToken: tok})
		if err != nil || len(last.GetPrompts()) != 0 || last.GetNextPageToken() != "" {
			t.Fatalf("past the last prompt: %v, %v", last, err)
		}
	}
	if _, err := c.ListSqlPrompts(ctxTimeout(t), &sqlagentv1.ListSqlPromptsRequest{Scope: scopeA, SessionId: "another", PageToken: first.GetNextPageToken()}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a token of another session: %v, want InvalidArgument", err)
	}

	other := &commonv1.Scope{TenantId: "globex", ProjectId: "music"}
	if _, err := c.ListSqlPrompts(ctxTimeout(t), &sqlagentv1.ListSqlPromptsRequest{Scope: other, SessionId: id}); status.Code(err) != codes.NotFound {
		t.Fatalf("prompts from another scope: %v, want NotFound", err)
	}
	off := startAgent(t, modelAddr, conns, nil)
	s, err := off.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "music"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := off.ListSqlPrompts(ctxTimeout(t), &sqlagentv1.ListSqlPromptsRequest{Scope: scopeA, SessionId: s.GetSession().GetId()}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("prompts with logging off: %v, want FailedPrecondition", err)
	}
}
