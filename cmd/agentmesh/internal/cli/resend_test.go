package cli_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/cli"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
)

// flakySQLAgent loses the answer to the first input it gets, as a replica
// killed after applying it would, and records every input.
type flakySQLAgent struct {
	sqlagentv1.UnimplementedSqlAgentServiceServer
	mu     sync.Mutex
	inputs []*sqlagentv1.SendInputRequest
}

func (f *flakySQLAgent) CreateSession(context.Context, *sqlagentv1.CreateSessionRequest) (*sqlagentv1.CreateSessionResponse, error) {
	return &sqlagentv1.CreateSessionResponse{Session: &sqlagentv1.Session{Id: "s1", Stage: "NEED_NATURAL_LANGUAGE"}, Reply: "Ask a question."}, nil
}

func (f *flakySQLAgent) SendInput(_ context.Context, req *sqlagentv1.SendInputRequest) (*sqlagentv1.SendInputResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inputs = append(f.inputs, req)
	if len(f.inputs) == 1 {
		return nil, status.Error(codes.Unavailable, "connection reset by peer")
	}
	stage := "NEED_NATURAL_LANGUAGE"
	if req.GetText() == "bye" {
		stage = "DONE"
	}
	return &sqlagentv1.SendInputResponse{Session: &sqlagentv1.Session{Id: "s1", Stage: stage}, Reply: "ok"}, nil
}

// TestSQLInputIsSentAgainUnderItsRequestID: an input whose answer was lost
// is sent again by the CLI under the same request id (so the SQL agent
// answers it as it did rather than applying it twice), and the next input
// gets an id of its own.
func TestSQLInputIsSentAgainUnderItsRequestID(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	agent := &flakySQLAgent{}
	srv := grpc.NewServer()
	sqlagentv1.RegisterSqlAgentServiceServer(srv, agent)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	cfg := cli.Config{Transport: "grpc", SQLAgentAddr: ln.Addr().String(), ConfigFile: t.TempDir() + "/config.yaml"}
	r := run(t, cfg, "how many customers?\nbye\n", "sql", "--connection", "sample")
	if r.code != 0 {
		t.Fatalf("agentmesh sql: %s", r)
	}
	if !strings.Contains(r.err, "sending the same input again") {
		t.Errorf("the resend is not said:\n%s", r.err)
	}
	agent.mu.Lock()
	defer agent.mu.Unlock()
	var got []string
	for _, in := range agent.inputs {
		got = append(got, in.GetText()+"@"+in.GetRequestId())
	}
	if len(agent.inputs) != 3 {
		t.Fatalf("inputs %q, want the question twice and bye once", got)
	}
	first, again, next := agent.inputs[0], agent.inputs[1], agent.inputs[2]
	if first.GetRequestId() == "" || again.GetRequestId() != first.GetRequestId() || again.GetText() != first.GetText() {
		t.Errorf("the resend is not the same input under the same id: %q", got)
	}
	if next.GetRequestId() == "" || next.GetRequestId() == first.GetRequestId() {
		t.Errorf("the next input has no id of its own: %q", got)
	}
}

// lossyJobs loses the answer to the first submission it gets, as a
// gateway or orchestrator killed after storing the analysis would, and
// records every submission.
type lossyJobs struct {
	orchestratorv1.UnimplementedJobServiceServer
	mu   sync.Mutex
	reqs []*orchestratorv1.SubmitAnalysisRequest
}

func (f *lossyJobs) SubmitAnalysis(_ context.Context, req *orchestratorv1.SubmitAnalysisRequest) (*orchestratorv1.SubmitAnalysisResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	if len(f.reqs) == 1 {
		return nil, status.Error(codes.Unavailable, "connection reset by peer")
	}
	return &orchestratorv1.SubmitAnalysisResponse{Job: &orchestratorv1.Job{Id: "a1", Status: orchestratorv1.JobStatus_JOB_STATUS_PENDING}}, nil
}

// TestSubmissionIsSentAgainUnderItsRequestID: `agentmesh jobs submit`
// names its submission with a request id and, when the answer is lost,
// sends it again under that id, which the orchestrator answers with the
// analysis the first created (TestResentSubmissionStartsOneAnalysis).
func TestSubmissionIsSentAgainUnderItsRequestID(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	jobs := &lossyJobs{}
	srv := grpc.NewServer()
	orchestratorv1.RegisterJobServiceServer(srv, jobs)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	cfg := cli.Config{Transport: "grpc", OrchestratorAddr: ln.Addr().String(), ConfigFile: t.TempDir() + "/config.yaml"}
	r := run(t, cfg, "", "jobs", "submit", "How is BHP doing?")
	if r.code != 0 || !strings.Contains(r.out, "a1") {
		t.Fatalf("agentmesh jobs submit: %s", r)
	}
	if !strings.Contains(r.err, "sending the same submission again") {
		t.Errorf("the resend is not said:\n%s", r.err)
	}
	jobs.mu.Lock()
	defer jobs.mu.Unlock()
	if len(jobs.reqs) != 2 || jobs.reqs[0].GetRequestId() == "" || jobs.reqs[1].GetRequestId() != jobs.reqs[0].GetRequestId() ||
		jobs.reqs[1].GetQuery() != jobs.reqs[0].GetQuery() {
		t.Errorf("submissions %v: want the same one twice under one request id", jobs.reqs)
	}
}

// cutWatch sends two events whose ids are not in ascending order (event
// ids are opaque), then loses the stream.
type cutWatch struct {
	orchestratorv1.UnimplementedJobServiceServer
}

func (cutWatch) WatchJob(_ *orchestratorv1.WatchJobRequest, s grpc.ServerStreamingServer[orchestratorv1.WatchJobResponse]) error {
	for _, id := range []uint64{900, 5} {
		ev := &orchestratorv1.JobEvent{RootId: "a1", Job: &orchestratorv1.Job{Id: "a1", Status: orchestratorv1.JobStatus_JOB_STATUS_RUNNING}}
		if err := s.Send(&orchestratorv1.WatchJobResponse{Sequence: id, Event: ev}); err != nil {
			return err
		}
	}
	return status.Error(codes.Unavailable, "connection reset by peer")
}

// TestWatchCutSaysToResumeAfterTheLastEvent: the resume hint of a cut
// watch names the id of the last event received, not the largest id.
func TestWatchCutSaysToResumeAfterTheLastEvent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	orchestratorv1.RegisterJobServiceServer(srv, cutWatch{})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	cfg := cli.Config{Transport: "grpc", OrchestratorAddr: ln.Addr().String(), ConfigFile: t.TempDir() + "/config.yaml"}
	r := run(t, cfg, "", "jobs", "watch", "a1")
	if r.code == 0 || !strings.Contains(r.err, "agentmesh jobs watch a1 --after-sequence 5)") {
		t.Fatalf("a cut watch: %s; want a hint to resume after 5, the last event", r)
	}
}
