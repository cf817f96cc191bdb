package classifier

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/classifier/internal/meshtest"
)

// expectField checks an InvalidArgument naming field.
func expectField(t *testing.T, err error, field string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		t.Fatalf("error %v, want InvalidArgument on %s", err, field)
	}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 && br.GetFieldViolations()[0].GetField() == field {
			return
		}
	}
	t.Errorf("error %v does not name field %s", err, field)
}

// Requests are validated with the field named, commands in the wrong state
// are refused, and a tenant never sees another tenant's runs.
func TestRequestValidationAndErrors(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	s := startService(t, in, nil, nil)
	importSample(t, s.client)
	in.models.ScriptPlans(meshtest.NewPlan(3, nil))
	runID, _ := startRun(t, s.client, "classify")
	ctx := testCtx(t)
	c := s.client

	stream := func(st interface {
		Recv() (*classifierv1.StartRunResponse, error)
	}, err error) error {
		if err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	expectField(t, stream(c.StartRun(ctx, &classifierv1.StartRunRequest{Instruction: "x"})), "scope.tenant_id")
	expectField(t, stream(c.StartRun(ctx, &classifierv1.StartRunRequest{Scope: testScope, Instruction: "  "})), "instruction")
	expectField(t, stream(c.StartRun(ctx, &classifierv1.StartRunRequest{Scope: testScope, Instruction: strings.Repeat("x", 5000)})), "instruction")

	_, err := command(c, ctx, runID, classifierv1.CommandType_COMMAND_TYPE_UNSPECIFIED, "")
	expectField(t, err, "type")
	_, err = command(c, ctx, runID, approveFetch, "some feedback")
	expectField(t, err, "feedback")
	_, err = command(c, ctx, "", approveFetch, "")
	expectField(t, err, "run_id")
	_, err = command(c, ctx, runID, approveBatch, "")
	expectCode(t, err, codes.FailedPrecondition, "WRONG_STATE")
	_, err = command(c, ctx, "no-such-run", approveFetch, "")
	expectCode(t, err, codes.NotFound, "RUN_NOT_FOUND")
	_, err = resume(c, ctx, "no-such-run")
	expectCode(t, err, codes.NotFound, "RUN_NOT_FOUND")

	// Another tenant cannot see, list or command the run.
	other := &commonv1.Scope{TenantId: "globex"}
	_, err = c.GetRun(ctx, &classifierv1.GetRunRequest{Scope: other, RunId: runID})
	expectCode(t, err, codes.NotFound, "RUN_NOT_FOUND")
	st, err := c.SendCommand(ctx, &classifierv1.SendCommandRequest{Scope: other, RunId: runID, Type: stopCommand})
	if err == nil {
		_, err = st.Recv()
	}
	expectCode(t, err, codes.NotFound, "RUN_NOT_FOUND")
	list, err := c.ListRuns(ctx, &classifierv1.ListRunsRequest{Scope: other})
	if err != nil || len(list.GetRuns()) != 0 {
		t.Errorf("other tenant lists %d runs (%v)", len(list.GetRuns()), err)
	}
	// The gateway's authenticated tenant wins over a body naming another.
	mdCtx := metadata.AppendToOutgoingContext(ctx, grpcx.TenantMetadataKey, "globex")
	_, err = c.GetRun(mdCtx, &classifierv1.GetRunRequest{Scope: testScope, RunId: runID})
	expectField(t, err, "scope.tenant_id")
}

// ImportConversations reports every rejected line with the field and
// stores the rest; importing again replaces rather than duplicates.
func TestImportConversationsReport(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	s := startService(t, in, nil, nil)
	ctx := testCtx(t)
	jsonl := strings.Join([]string{
		`{"id":"c1","channel":"chat","customer":"u1","messages":[{"role":"customer","text":"Where is my order?","time":"2024-05-01T10:00:00Z"},{"role":"agent","text":"It ships today."}],"metadata":{"priority":"high"}}`,
		`{"id":"c2","messages":[{"role":"customer","text":"hello"}]}`,
		`not json`,
		``,
		`{"channel":"chat","messages":[{"role":"customer","text":"no id"}]}`,
		`{"id":"c3","messages":[{"role":"robot","text":"beep"}]}`,
		`{"id":"c1","messages":[{"role":"customer","text":"duplicate"}]}`,
		`{"id":"c4","messages":[]}`,
		`{"id":"c5","messages":[{"role":"customer","text":"x"}],"colour":"blue"}`,
		`{"id":"c6","messages":[{"role":"customer","text":"x"}],"metadata":{"$where":"1"}}`,
		`{"id":"bad id!","messages":[{"role":"customer","text":"x"}]}`,
	}, "\n")
	resp, err := s.client.ImportConversations(ctx, &classifierv1.ImportConversationsRequest{Scope: testScope, Jsonl: jsonl})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetImported() != 2 {
		t.Errorf("imported %d, want 2", resp.GetImported())
	}
	want := map[int32]string{
		3: "invalid JSON", 5: "id: is required", 6: `messages[0].role: "robot"`, 7: "duplicates line 1",
		8: "messages: at least one", 9: "colour", 10: "metadata", 11: "id: must be",
	}
	got := map[int32]string{}
	for _, r := range resp.GetRejected() {
		got[r.GetLine()] = r.GetReason()
	}
	if len(got) != len(want) {
		t.Errorf("rejected %v, want lines %v", got, want)
	}
	for line, frag := range want {
		if !strings.Contains(got[line], frag) {
			t.Errorf("line %d rejected with %q, want it to mention %q", line, got[line], frag)
		}
	}
	// Importing again replaces the conversations.
	resp, err = s.client.ImportConversations(ctx, &classifierv1.ImportConversationsRequest{Scope: testScope, Conversations: []*classifierv1.CustomerConversation{
		{Id: "c1", Messages: []*classifierv1.ConversationTurn{{Role: "customer", Text: "replaced"}}},
		{Id: "", Messages: []*classifierv1.ConversationTurn{{Role: "customer", Text: "x"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetImported() != 1 || len(resp.GetRejected()) != 1 || resp.GetRejected()[0].GetLine() != 2 {
		t.Errorf("list import: %v", resp)
	}
	n, err := in.db.Collection("classifier_conversations").CountDocuments(ctx, map[string]any{"tenant_id": testScope.GetTenantId()})
	if err != nil || n != 2 {
		t.Errorf("%d conversations stored (%v), want 2", n, err)
	}
	_, err = s.client.ImportConversations(ctx, &classifierv1.ImportConversationsRequest{Scope: testScope, Jsonl: jsonl,
		Conversations: []*classifierv1.CustomerConversation{{Id: "x"}}})
	expectField(t, err, "jsonl")
	_, err = s.client.ImportConversations(ctx, &classifierv1.ImportConversationsRequest{Scope: testScope})
	expectField(t, err, "conversations")
}

// ListRuns pages newest first and filters by state.
func TestListRuns(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	s := startService(t, in, nil, nil)
	importSample(t, s.client)
	in.models.ScriptPlans(meshtest.NewPlan(2, nil), meshtest.NewPlan(2, nil), meshtest.NewPlan(2, nil))
	var runIDs []string
	for i := range 3 {
		id, _ := startRun(t, s.client, fmt.Sprintf("run %d", i))
		runIDs = append(runIDs, id)
	}
	mustCommand(t, s.client, runIDs[1], stopCommand, "")
	ctx := context.Background()
	page1, err := s.client.ListRuns(ctx, &classifierv1.ListRunsRequest{Scope: testScope, PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page1.GetRuns()) != 2 || page1.GetNextPageToken() == "" || page1.GetRuns()[0].GetId() != runIDs[2] {
		t.Fatalf("page 1: %d runs, first %s, token %q", len(page1.GetRuns()), page1.GetRuns()[0].GetId(), page1.GetNextPageToken())
	}
	page2, err := s.client.ListRuns(ctx, &classifierv1.ListRunsRequest{Scope: testScope, PageSize: 2, PageToken: page1.GetNextPageToken()})
	if err != nil {
		t.Fatal(err)
	}
	if len(page2.GetRuns()) != 1 || page2.GetRuns()[0].GetId() != runIDs[0] || page2.GetNextPageToken() != "" {
		t.Errorf("page 2: %v", page2)
	}
	stopped, err := s.client.ListRuns(ctx, &classifierv1.ListRunsRequest{Scope: testScope, State: classifierv1.RunState_RUN_STATE_STOPPED})
	if err != nil {
		t.Fatal(err)
	}
	if len(stopped.GetRuns()) != 1 || stopped.GetRuns()[0].GetId() != runIDs[1] {
		t.Errorf("stopped runs: %v", stopped.GetRuns())
	}
	_, err = s.client.ListRuns(ctx, &classifierv1.ListRunsRequest{Scope: testScope, State: classifierv1.RunState_RUN_STATE_STOPPED, PageToken: page1.GetNextPageToken()})
	expectField(t, err, "page_token")

	// A time range: created at or after the second run, before the third.
	second := page1.GetRuns()[1]
	if second.GetId() != runIDs[1] {
		t.Fatalf("page 1 second run %s, want %s", second.GetId(), runIDs[1])
	}
	from, to := second.GetCreateTime(), page1.GetRuns()[0].GetCreateTime()
	ranged, err := s.client.ListRuns(ctx, &classifierv1.ListRunsRequest{Scope: testScope, CreateTimeFrom: from, CreateTimeTo: to})
	if err != nil {
		t.Fatal(err)
	}
	// Runs started in the same millisecond share a time: the expectation
	// follows the stored times.
	var want []string
	for _, r := range append(page1.GetRuns(), page2.GetRuns()...) {
		if c := r.GetCreateTime().AsTime(); !c.Before(from.AsTime()) && c.Before(to.AsTime()) {
			want = append(want, r.GetId())
		}
	}
	var got []string
	for _, r := range ranged.GetRuns() {
		got = append(got, r.GetId())
	}
	if !slices.Equal(got, want) || (from.AsTime().Before(to.AsTime()) && !slices.Contains(got, runIDs[1])) {
		t.Errorf("runs created in [%v, %v): %v, want %v", from.AsTime(), to.AsTime(), got, want)
	}
	since, err := s.client.ListRuns(ctx, &classifierv1.ListRunsRequest{Scope: testScope, CreateTimeFrom: from, PageSize: 1})
	if err != nil || len(since.GetRuns()) != 1 || since.GetRuns()[0].GetId() != runIDs[2] || since.GetNextPageToken() == "" {
		t.Fatalf("runs created from the second, page 1: %v, %v", since, err)
	}
	// A token is bound to its time range.
	_, err = s.client.ListRuns(ctx, &classifierv1.ListRunsRequest{Scope: testScope, PageToken: since.GetNextPageToken()})
	expectField(t, err, "page_token")
	_, err = s.client.ListRuns(ctx, &classifierv1.ListRunsRequest{Scope: testScope, CreateTimeFrom: to, CreateTimeTo: from})
	expectField(t, err, "create_time_from")
}
