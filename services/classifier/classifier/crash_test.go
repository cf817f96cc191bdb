package classifier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/config"
	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint"
	"github.com/agentmesh/agentmesh/services/classifier/internal/meshtest"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runevents"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// Environment of the child process the crash test runs the service in.
const (
	envChild      = "CLASSIFIER_TEST_CHILD"       // "1": this process is a service child
	envCrashAfter = "CLASSIFIER_TEST_CRASH_AFTER" // state after whose checkpoint the child exits
	envAddrFile   = "CLASSIFIER_TEST_ADDR_FILE"   // where the child writes its gRPC address
	crashExitCode = 3
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

// runChild serves the classifier as a separate process, configured by the
// environment like the real binary, and dies with os.Exit right after the
// checkpoint that enters the state named by CLASSIFIER_TEST_CRASH_AFTER.
func runChild() int {
	var cfg Config
	if err := config.Load("", &cfg, config.Env()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var hook func(context.Context, string, statemachine.State)
	if crashAfter := statemachine.State(os.Getenv(envCrashAfter)); crashAfter != "" {
		hook = func(_ context.Context, _ string, s statemachine.State) {
			if s == crashAfter {
				fmt.Fprintf(os.Stderr, "crashing right after checkpointing %s\n", s)
				os.Exit(crashExitCode)
			}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ready := func() {
		path := os.Getenv(envAddrFile)
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(lis.Addr().String()), 0o600); err == nil {
			_ = os.Rename(tmp, path)
		}
	}
	if err := run(ctx, &cfg, service.Runtime{Logger: childLogger(), Listener: lis, Ready: ready}, hook); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// child is one service process.
type child struct {
	addr   string // gRPC address
	cmd    *exec.Cmd
	out    *bytes.Buffer
	conn   *grpc.ClientConn
	client classifierv1.ClassifierServiceClient
	exited chan struct{}
	err    error // set when exited is closed
}

// startChild starts the test binary as a classifier process with env.
func startChild(t *testing.T, env map[string]string, crashAfter statemachine.State) *child {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=1", envAddrFile+"="+addrFile, envCrashAfter+"="+string(crashAfter))
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	c := &child{cmd: cmd, out: &bytes.Buffer{}, exited: make(chan struct{})}
	// One writer for both: exec then never writes to it concurrently. It is
	// read only once the process has exited.
	cmd.Stdout, cmd.Stderr = c.out, c.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.err = cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		if c.conn != nil {
			_ = c.conn.Close()
		}
		select {
		case <-c.exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-c.exited:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-c.exited
			}
		}
		if t.Failed() {
			t.Logf("child output:\n%s", c.out)
		}
	})
	var addr []byte
	testkit.Eventually(t, 30*time.Second, func() bool {
		if c.dead() {
			t.Fatalf("child exited during start: %v\n%s", c.err, c.out)
		}
		addr, _ = os.ReadFile(addrFile)
		return len(addr) > 0
	}, "child service ready")
	conn, err := grpc.NewClient(string(addr), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c.addr, c.conn = string(addr), conn
	c.client = classifierv1.NewClassifierServiceClient(conn)
	return c
}

func (c *child) dead() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

// waitCrash waits for the child to exit with the crash code.
func (c *child) waitCrash(t *testing.T) {
	t.Helper()
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("child did not exit\n%s", c.out)
	}
	var ee *exec.ExitError
	if !errors.As(c.err, &ee) || ee.ExitCode() != crashExitCode {
		t.Fatalf("child exited with %v, want code %d\n%s", c.err, crashExitCode, c.out)
	}
}

// scenario is a scripted run.
type scenario struct {
	name string
	// stopAtLabels sends Stop at a batch approval once that many are saved.
	stopAtLabels int
	// failSecondBatch answers the second batch with an unusable answer, so
	// the run goes to Error.
	failSecondBatch bool
}

var (
	normalRun = scenario{name: "complete"}
	stopRun   = scenario{name: "stop", stopAtLabels: 2}
	errorRun  = scenario{name: "error", failSecondBatch: true}
)

// outcome is what a run left behind.
type outcome struct {
	state      classifierv1.RunState
	labels     map[string]string
	modelCalls int
	events     []string // event types, resumed events left out
	classified map[string]int
}

// crashEnv is the infrastructure the processes of one scenario share.
type crashEnv struct {
	env    map[string]string
	models *meshtest.Models
	db     *mongo.Database
}

func newCrashEnv(t *testing.T, mongoURI string, natsURL string) *crashEnv {
	t.Helper()
	models := meshtest.StartModels(t)
	dbName := testkit.DatabaseName(t)
	client, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return &crashEnv{
		models: models,
		db:     client.Database(dbName),
		env: map[string]string{
			"MONGO_URI": mongoURI, "MONGO_DATABASE": dbName, "NATS_URL": natsURL, "MODELGATEWAY_ADDR": models.Addr,
			"GRPC_ADDR": "127.0.0.1:0", "METRICS_ADDR": "",
			"CLASSIFIER_MAX_BATCH": "4", "CLASSIFIER_BATCH_SIZE": "2", "CLASSIFIER_MAX_MODEL_CALLS": "20",
			"CLASSIFIER_LEASE_TTL": "1s", "CLASSIFIER_CHUNK_SIZE": "40",
		},
	}
}

// play runs scenario sc, crashing the first process right after it
// checkpoints crashAfter ("" for an uninterrupted run), restarting it and
// resuming until the run is finished.
func (e *crashEnv) play(t *testing.T, sc scenario, crashAfter statemachine.State) outcome {
	t.Helper()
	sample := sampleConversations(t)
	var ids []string
	for _, c := range sample {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	truth := sampleLabels(ids)
	e.models.ScriptPlans(meshtest.NewPlan(6, nil))
	if sc.failSecondBatch {
		e.models.ScriptClassifications(ids[:2], 2, truth)
		e.models.ScriptUnusableClassifications()
	} else {
		e.models.ScriptClassifications(ids, 2, truth)
	}
	e.models.ScriptSummary("## Summary\n\nSix conversations classified.")

	proc := startChild(t, e.env, crashAfter)
	importSample(t, proc.client)
	crashed := false
	restart := func() {
		t.Helper()
		switch {
		case !crashed && crashAfter != "":
			proc.waitCrash(t)
			crashed = true
		case !proc.dead():
			return
		default:
			t.Fatalf("the service process died unexpectedly: %v\n%s", proc.err, proc.out)
		}
		proc = startChild(t, e.env, "")
	}

	ctx := testCtx(t)
	var runID string
	for runID == "" {
		st, err := proc.client.StartRun(ctx, &classifierv1.StartRunRequest{Scope: testScope, Instruction: "classify six conversations"})
		if err == nil {
			var evs []*classifierv1.RunEvent
			evs, err = drain(st)
			if len(evs) > 0 {
				runID = evs[0].GetRunId()
			}
		}
		if runID == "" {
			if !proc.dead() && crashAfter == "" {
				t.Fatalf("StartRun: %v", err)
			}
			restart()
			runID = e.findRun(t, proc)
		}
	}
	for step := 0; ; step++ {
		if step == 60 {
			t.Fatalf("run %s did not finish", runID)
		}
		resp, err := proc.client.GetRun(ctx, &classifierv1.GetRunRequest{Scope: testScope, RunId: runID})
		if err != nil {
			restart()
			continue
		}
		r := resp.GetRun()
		switch r.GetState() {
		case classifierv1.RunState_RUN_STATE_COMPLETED, classifierv1.RunState_RUN_STATE_STOPPED:
			if crashAfter != "" && !crashed {
				t.Fatalf("the process never crashed after %s", crashAfter)
			}
			return e.outcome(t, runID, r)
		case classifierv1.RunState_RUN_STATE_AWAITING_FETCH_APPROVAL:
			_, err = command(proc.client, ctx, runID, approveFetch, "")
		case classifierv1.RunState_RUN_STATE_AWAITING_BATCH_APPROVAL:
			if sc.stopAtLabels > 0 && int(r.GetLabelledCount()) >= sc.stopAtLabels {
				_, err = command(proc.client, ctx, runID, stopCommand, "")
			} else {
				_, err = command(proc.client, ctx, runID, approveBatch, "")
			}
		default:
			// Left mid-step by a crash: resume, waiting out the dead
			// process's lease.
			_, err = resume(proc.client, ctx, runID)
			if status.Code(err) == codes.Aborted {
				pollPause()
				continue
			}
		}
		switch {
		case err == nil || status.Code(err) == codes.Aborted:
		case crashAfter != "" && !crashed:
			restart() // the call failed because the process crashed
		default:
			t.Fatalf("state %s: %v", r.GetState(), err)
		}
	}
}

// pollPause waits a little before polling again, on a ticker rather than a
// sleep so the wait is bounded by the loop's step limit.
func pollPause() {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	<-tick.C
}

// findRun returns the scenario's only run (after a crash during StartRun).
func (e *crashEnv) findRun(t *testing.T, proc *child) string {
	t.Helper()
	resp, err := proc.client.ListRuns(testCtx(t), &classifierv1.ListRunsRequest{Scope: testScope})
	if err != nil || len(resp.GetRuns()) != 1 {
		t.Fatalf("after the crash: %d runs (%v)", len(resp.GetRuns()), err)
	}
	return resp.GetRuns()[0].GetId()
}

func (e *crashEnv) outcome(t *testing.T, runID string, r *classifierv1.Run) outcome {
	t.Helper()
	o := outcome{state: r.GetState(), labels: savedLabels(t, e.db, runID), modelCalls: int(r.GetModelCalls()), classified: map[string]int{}}
	calls := e.models.Calls()
	for _, b := range calls.Batches {
		for _, id := range b {
			o.classified[id]++
		}
	}
	if got := calls.Total(); got != o.modelCalls {
		t.Errorf("the simulator answered %d model calls, the run counted %d", got, o.modelCalls)
	}
	if n := labelDocs(t, e.db, runID); int(n) != len(o.labels) {
		t.Errorf("%d label documents for %d conversations", n, len(o.labels))
	}
	return o
}

// Crash test: for every state, the service process dies right after
// checkpointing that state; a new process resumes the run. The saved labels
// equal those of an uninterrupted run, no batch is classified twice, no
// model call is repeated, and no event is lost or duplicated.
func TestCrashAndResumeFromEveryState(t *testing.T) {
	if testing.Short() {
		t.Skip("starts service processes")
	}
	t.Parallel()
	mongoSrv := testkit.NewMongo(t)
	nats := testkit.NewNATS(t)

	type crashCase struct {
		state statemachine.State
		sc    scenario
	}
	var cases []crashCase
	for _, s := range []statemachine.State{
		statemachine.Planning, statemachine.Fetching, statemachine.AwaitingFetchApproval, statemachine.Classifying,
		statemachine.AwaitingBatchApproval, statemachine.Saving, statemachine.Summarizing, statemachine.Completed,
	} {
		cases = append(cases, crashCase{s, normalRun})
	}
	cases = append(cases, crashCase{statemachine.Stopped, stopRun}, crashCase{statemachine.Error, errorRun})

	baselines := map[string]outcome{}
	var mu sync.Mutex
	t.Run("baselines", func(t *testing.T) {
		for _, sc := range []scenario{normalRun, stopRun, errorRun} {
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				e := newCrashEnv(t, mongoSrv.URI(), nats.URL())
				o := e.play(t, sc, "")
				e.checkEvents(t, &o)
				mu.Lock()
				baselines[sc.name] = o
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		return
	}
	want := map[string]classifierv1.RunState{
		normalRun.name: classifierv1.RunState_RUN_STATE_COMPLETED,
		stopRun.name:   classifierv1.RunState_RUN_STATE_STOPPED,
		errorRun.name:  classifierv1.RunState_RUN_STATE_STOPPED,
	}
	for name, o := range baselines {
		if o.state != want[name] || len(o.labels) == 0 {
			t.Fatalf("baseline %s ended %s with %d labels", name, o.state, len(o.labels))
		}
	}
	for _, tc := range cases {
		t.Run("crash after "+string(tc.state), func(t *testing.T) {
			t.Parallel()
			e := newCrashEnv(t, mongoSrv.URI(), nats.URL())
			got := e.play(t, tc.sc, tc.state)
			e.checkEvents(t, &got)
			base := baselines[tc.sc.name]
			if got.state != base.state {
				t.Errorf("final state %s, uninterrupted %s", got.state, base.state)
			}
			if !mapsEqual(got.labels, base.labels) {
				t.Errorf("labels %v\nuninterrupted %v", got.labels, base.labels)
			}
			for id, n := range got.classified {
				if n != 1 {
					t.Errorf("%s was classified %d times", id, n)
				}
			}
			if got.modelCalls != base.modelCalls {
				t.Errorf("%d model calls, uninterrupted %d", got.modelCalls, base.modelCalls)
			}
			if !slices.Equal(got.events, base.events) {
				t.Errorf("events differ from the uninterrupted run's:\n got  %v\n want %v", got.events, base.events)
			}
		})
	}
}

// checkEvents records the run's events as replayed from JetStream, without
// the resumed events a resume adds.
func (e *crashEnv) checkEvents(t *testing.T, o *outcome) {
	t.Helper()
	// The run is the only one in this database, live or archived.
	var doc struct {
		ID string `bson:"_id"`
	}
	err := e.db.Collection(checkpoint.Collection).FindOne(testCtx(t), map[string]any{}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		err = e.db.Collection(checkpoint.ArchiveCollection).FindOne(testCtx(t), map[string]any{}).Decode(&doc)
	}
	if err != nil {
		t.Fatal(err)
	}
	in := &infra{db: e.db, natsURL: e.env["NATS_URL"]}
	testkit.Eventually(t, 10*time.Second, func() bool { return pendingOutbox(t, in, doc.ID) == 0 }, "outbox published")
	for _, ev := range replayAll(t, in, doc.ID, 0, countEvents(t, in, doc.ID)) {
		if ev.GetType() != runevents.RunResumed {
			o.events = append(o.events, ev.GetType())
		}
	}
	if !strings.HasPrefix(strings.Join(o.events, " "), runevents.RunStarted) {
		t.Errorf("events %v", o.events)
	}
}

// childLogger logs to stderr, which the parent shows when a test fails.
func childLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// The service process is killed while it processes a command (a batch's
// classification call is in flight, its executor renewing the lease). A
// client of the original agent, which never retries, sends one resume to
// the restarted service: it waits for the dead executor's lease to lapse
// (within one TTL of its last renewal), takes the run over and redoes the
// batch, or follows the restarted process, which takes such a run over by
// itself, to the batch approval; the run then completes. A sole writer
// (agentmesh up) takes the dead executor's run at once: its lease, 30 s
// here, is waited for not at all.
func TestResumeAfterCrashMidCommandNeedsNoRetry(t *testing.T) {
	if testing.Short() {
		t.Skip("starts service processes")
	}
	t.Parallel()
	t.Run("many writers", func(t *testing.T) {
		t.Parallel()
		testResumeAfterCrashMidCommand(t, false)
	})
	t.Run("sole writer", func(t *testing.T) {
		t.Parallel()
		testResumeAfterCrashMidCommand(t, true)
	})
}

func testResumeAfterCrashMidCommand(t *testing.T, sole bool) {
	ttl, bound := 3*time.Second, 4*time.Second
	if sole {
		ttl, bound = 30*time.Second, 5*time.Second
	}
	e := newLeaseEnv(t, ttl, sole)
	proc := startChild(t, e.env, "")
	run := startHungRun(t, e, proc)
	runID := run.id
	if !sole {
		// Let the heartbeat renew the lease at least once before the kill.
		renewedBy := time.Now().Add(ttl / 2)
		testkit.Eventually(t, ttl, func() bool { return time.Now().After(renewedBy) }, "a lease renewal")
	}
	if err := proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-proc.exited
	killed := time.Now()

	proc = startChild(t, e.env, "")
	client := seedClient{t: t, url: startGateway(t, proc.addr, time.Second), key: gatewayKey}
	// The restarted process drives the run on by itself too (see
	// TestRunLeftMidStepIsDrivenOnWithoutAClient): a sole writer at once.
	if code, got := client.status(runID); code != http.StatusOK || (got["state"] != "Classifying" && got["state"] != "AwaitingBatchApproval") {
		t.Fatalf("after the crash: HTTP %d %v", code, got)
	}
	asked := time.Now()
	resp := client.request(testCtx(t), "POST", "/agents/classificationAgent/runs/"+runID+"/resume", "", nil)
	defer resp.Body.Close()
	var evs []sseEvent
	var firstEvent time.Time
	for ev := range sseEvents(resp.Body) {
		if ev.Comment != "" {
			continue
		}
		if firstEvent.IsZero() {
			firstEvent = time.Now()
		}
		evs = append(evs, ev)
	}
	if resp.StatusCode != http.StatusOK || len(evs) == 0 {
		t.Fatalf("resume: HTTP %d, events %v", resp.StatusCode, evs)
	}
	waited := firstEvent.Sub(asked)
	t.Logf("resume waited %s for the dead executor's lease (lease TTL %s; the process died %s before the resume was sent)",
		waited.Round(time.Millisecond), ttl, asked.Sub(killed).Round(time.Millisecond))
	if waited > bound {
		t.Errorf("resume waited %s, more than %s (lease TTL %s)", waited, bound, ttl)
	}
	// The resume took the run over, or followed the restarted process,
	// which takes such a run over by itself, to the batch approval.
	if evs[len(evs)-1].typ() != runevents.AwaitingBatchApproval || evs[len(evs)-1].Name == "error" {
		t.Fatalf("resume streamed %v", sseTypes(evs))
	}

	for step := 0; ; step++ {
		if step == 10 {
			t.Fatalf("run %s did not complete", runID)
		}
		code, evs := client.stream("POST", "/agents/classificationAgent/runs/"+runID+"/command", `{"type":"ApproveBatch"}`, nil)
		if code != http.StatusOK {
			t.Fatalf("ApproveBatch: HTTP %d %v", code, sseTypes(evs))
		}
		if slices.Contains(sseTypes(evs), runevents.RunCompleted) {
			break
		}
	}
	code, got := client.status(runID)
	if code != http.StatusOK || got["state"] != "Completed" || got["totalConversationsClassified"] != 4.0 {
		t.Fatalf("after the run: HTTP %d %v", code, got)
	}
	run.checkLabels(t)
	// The batch in flight at the crash was classified again, nothing else.
	if got := e.models.Calls().Batches; len(got) != 3 || !slices.Equal(got[0], got[1]) {
		t.Errorf("classification calls %v", got)
	}
}

func sseTypes(evs []sseEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.typ()
	}
	return out
}

// A run caught mid-step is driven on with no client involved: nobody
// resumes it, and it reaches its batch approval by itself, from its
// checkpoint, redoing only the batch in flight, then completes on the
// human's approvals.
//   - Killed, sole writer (agentmesh up): the next process takes it at its
//     start, whatever the dead executor's lease (30 s here).
//   - Killed, many writers: the next process takes it once the lease has
//     lapsed, within a third of a lease TTL more.
//   - Stopped, many writers (a rolling update): the stopping replica
//     releases the lease, and a replica already running takes the run
//     within a third of a lease TTL (6 s here).
func TestRunLeftMidStepIsDrivenOnWithoutAClient(t *testing.T) {
	if testing.Short() {
		t.Skip("starts service processes")
	}
	t.Parallel()
	for _, tc := range []struct {
		name  string
		sole  bool
		ttl   time.Duration
		stop  bool          // SIGTERM to a replica rather than a kill and a restart
		bound time.Duration // from the kill (many writers) or the restart or the stop
		after string        // what the bound counts from
	}{
		// The lease lapses at most one TTL after the kill, a sweep comes
		// within a third of one, then one classification call.
		{name: "killed, many writers", ttl: 3 * time.Second, bound: 7 * time.Second, after: "kill"},
		{name: "killed, sole writer", sole: true, ttl: 30 * time.Second, bound: 5 * time.Second, after: "restart"},
		{name: "stopped, another replica", stop: true, ttl: 6 * time.Second, bound: 5 * time.Second, after: "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newLeaseEnv(t, tc.ttl, tc.sole)
			var other *child
			if tc.stop {
				other = startChild(t, e.env, "")
			}
			proc := startChild(t, e.env, "")
			run := startHungRun(t, e, proc)
			if tc.stop {
				if err := proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			} else if err := proc.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-proc.exited
			since := time.Now()
			if tc.stop {
				proc = other
			} else {
				proc = startChild(t, e.env, "")
				if tc.sole {
					since = time.Now()
				}
			}
			driveOnWithoutAClient(t, run, proc, since, tc.bound, tc.after)
		})
	}
}

// driveOnWithoutAClient waits, sending nothing, for run to reach its batch
// approval within bound of since, checks what was redone and recorded,
// then approves the run to its end.
func driveOnWithoutAClient(t *testing.T, run hungRun, proc *child, since time.Time, bound time.Duration, what string) {
	t.Helper()
	ctx := testCtx(t)
	state := func() classifierv1.RunState {
		resp, err := proc.client.GetRun(ctx, &classifierv1.GetRunRequest{Scope: testScope, RunId: run.id})
		if err != nil {
			t.Fatalf("GetRun: %v", err)
		}
		return resp.GetRun().GetState()
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		return state() == classifierv1.RunState_RUN_STATE_AWAITING_BATCH_APPROVAL
	}, "the run at its batch approval, with no client resuming it")
	took := time.Since(since)
	t.Logf("the run reached its batch approval %s after the %s", took.Round(time.Millisecond), what)
	if took > bound {
		t.Errorf("the run reached its batch approval %s after the %s, more than %s", took, what, bound)
	}
	// The batch in flight was classified again, once.
	if got := run.e.models.Calls().Batches; len(got) != 2 || !slices.Equal(got[0], got[1]) {
		t.Errorf("classification calls %v", got)
	}
	in := &infra{db: run.e.db, natsURL: run.e.env["NATS_URL"]}
	testkit.Eventually(t, 10*time.Second, func() bool { return pendingOutbox(t, in, run.id) == 0 }, "outbox published")
	evs := replayAll(t, in, run.id, 0, countEvents(t, in, run.id))
	types := make([]string, len(evs))
	for i, ev := range evs {
		types[i] = ev.GetType()
		if ev.GetSequence() != uint64(i+1) {
			t.Errorf("event %d (%s) has sequence %d", i+1, ev.GetType(), ev.GetSequence())
		}
	}
	resumed := slices.Index(types, runevents.RunResumed)
	if resumed < 0 || slices.Index(types, runevents.ClassifyingStarted) > resumed ||
		types[len(types)-1] != runevents.AwaitingBatchApproval {
		t.Errorf("events %v", types)
	}

	for step := 0; state() != classifierv1.RunState_RUN_STATE_COMPLETED; step++ {
		if step == 10 {
			t.Fatalf("run %s did not complete", run.id)
		}
		if _, err := command(proc.client, ctx, run.id, approveBatch, ""); err != nil {
			t.Fatalf("ApproveBatch: %v", err)
		}
	}
	run.checkLabels(t)
}

// newLeaseEnv is a crash test's infrastructure with a lease TTL of ttl,
// for a sole writer or many.
func newLeaseEnv(t *testing.T, ttl time.Duration, sole bool) *crashEnv {
	t.Helper()
	e := newCrashEnv(t, testkit.NewMongo(t).URI(), testkit.NewNATS(t).URL())
	e.env["CLASSIFIER_LEASE_TTL"] = ttl.String()
	if sole {
		e.env["MONGO_SINGLE_WRITER"] = "true"
	}
	return e
}

// hungRun is a run of four conversations, in batches of two, whose first
// batch's classification call is answered only after its process is gone.
type hungRun struct {
	e     *crashEnv
	id    string
	ids   []string // the sample's, sorted
	truth map[string]string
}

// startHungRun scripts the models, starts the run on proc, approves its
// fetch and returns once the first batch's classification call is in
// flight.
func startHungRun(t *testing.T, e *crashEnv, proc *child) hungRun {
	t.Helper()
	h := hungRun{e: e}
	for _, c := range sampleConversations(t) {
		h.ids = append(h.ids, c.ID)
	}
	slices.Sort(h.ids)
	h.truth = sampleLabels(h.ids)
	e.models.ScriptPlans(meshtest.NewPlan(4, nil))
	hung := batchAnswer(e.models, h.ids[:2], h.truth, time.Hour)
	e.models.ScriptClassifications(h.ids, 2, h.truth)
	e.models.ScriptSummary("## Summary\n\nFour conversations classified.")
	importSample(t, proc.client)
	h.id, _ = startRun(t, proc.client, "classify four conversations")
	go func() { _, _ = command(proc.client, testCtx(t), h.id, approveFetch, "") }()
	testkit.Eventually(t, 10*time.Second, func() bool { return hung.Hits() == 1 }, "classification call in flight")
	return h
}

// checkLabels checks the labels saved for the run: the four
// conversations', each once.
func (h hungRun) checkLabels(t *testing.T) {
	t.Helper()
	want := map[string]string{}
	for _, id := range h.ids[:4] {
		want[id] = h.truth[id]
	}
	if labels := savedLabels(t, h.e.db, h.id); !mapsEqual(labels, want) {
		t.Errorf("labels %v, want %v", labels, want)
	}
}
