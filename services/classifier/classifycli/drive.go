package classifycli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

// DriveOptions configures Drive.
type DriveOptions struct {
	// Scope is the tenant and project. Required.
	Scope *commonv1.Scope
	// Instruction starts a new run with this request.
	Instruction string
	// RunID resumes this run instead.
	RunID string
	// AutoApprove approves every fetch and batch without asking.
	AutoApprove bool
}

// ErrInputClosed means the input ended while the run waited for a
// decision; the run stays waiting and can be resumed.
var ErrInputClosed = errors.New("input closed while the run waits for approval")

// Drive starts (or resumes) a run and follows it to the end: it prints
// every event's log line, streams the plan and summaries, draws a progress
// bar, and at each approval shows what is to be approved and asks on in:
// [a]pprove, [r]eject with feedback, or [s]top. It returns the run as it
// ended (Completed or Stopped). If in ends at a prompt, it returns the
// waiting run with ErrInputClosed; resume it later with RunID.
func Drive(ctx context.Context, client classifierv1.ClassifierServiceClient, opts DriveOptions, in io.Reader, out io.Writer) (*classifierv1.Run, error) {
	if (opts.Instruction == "") == (opts.RunID == "") {
		return nil, errors.New("classify: give either an instruction or a run id to resume")
	}
	d := &driver{client: client, scope: opts.Scope, auto: opts.AutoApprove, in: bufio.NewScanner(in), out: out}
	var err error
	if opts.RunID != "" {
		d.runID = opts.RunID
		fmt.Fprintf(out, "Resuming run %s\n", d.runID)
		err = d.follow(client.ResumeRun(ctx, &classifierv1.ResumeRunRequest{Scope: d.scope, RunId: d.runID}))
	} else {
		err = d.follow(client.StartRun(ctx, &classifierv1.StartRunRequest{Scope: d.scope, Instruction: opts.Instruction}))
	}
	for {
		if err != nil {
			return d.run(ctx), d.explain(err)
		}
		run := d.run(ctx)
		if run == nil {
			return nil, fmt.Errorf("classify: run %s: %w", d.runID, d.lastErr)
		}
		switch run.GetState() {
		case classifierv1.RunState_RUN_STATE_COMPLETED, classifierv1.RunState_RUN_STATE_STOPPED:
			return run, nil
		case classifierv1.RunState_RUN_STATE_AWAITING_FETCH_APPROVAL, classifierv1.RunState_RUN_STATE_AWAITING_BATCH_APPROVAL:
			cmd, feedback, perr := d.decide(run.GetState())
			if perr != nil {
				return run, perr
			}
			err = d.follow(client.SendCommand(ctx, &classifierv1.SendCommandRequest{Scope: d.scope, RunId: d.runID, Type: cmd, Feedback: feedback}))
		default:
			// Interrupted mid-step (the service restarted): pick it up.
			fmt.Fprintf(out, "Run is in %s; resuming it\n", stateName(run.GetState()))
			err = d.follow(client.ResumeRun(ctx, &classifierv1.ResumeRunRequest{Scope: d.scope, RunId: d.runID}))
		}
	}
}

// driver holds one Drive's state.
type driver struct {
	client  classifierv1.ClassifierServiceClient
	scope   *commonv1.Scope
	auto    bool
	in      *bufio.Scanner
	out     io.Writer
	runID   string
	inText  bool // a streamed text is being printed
	lastErr error
}

// eventStream is any of the event-streaming calls.
type eventStream[T interface{ GetEvent() *classifierv1.RunEvent }] interface {
	Recv() (T, error)
}

// follow prints a stream's events until it ends.
func (d *driver) follow(st any, err error) error {
	if err != nil {
		return err
	}
	switch s := st.(type) {
	case classifierv1.ClassifierService_StartRunClient:
		return followStream(d, s)
	case classifierv1.ClassifierService_ResumeRunClient:
		return followStream(d, s)
	case classifierv1.ClassifierService_SendCommandClient:
		return followStream(d, s)
	}
	return fmt.Errorf("classify: unexpected stream %T", st)
}

func followStream[T interface{ GetEvent() *classifierv1.RunEvent }](d *driver, s eventStream[T]) error {
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			d.endText()
			return nil
		}
		if err != nil {
			d.endText()
			return err
		}
		d.show(m.GetEvent())
	}
}

// run reads the run's state; nil if it cannot.
func (d *driver) run(ctx context.Context) *classifierv1.Run {
	if d.runID == "" {
		return nil
	}
	resp, err := d.client.GetRun(ctx, &classifierv1.GetRunRequest{Scope: d.scope, RunId: d.runID})
	if err != nil {
		d.lastErr = err
		return nil
	}
	return resp.GetRun()
}

// explain turns a gRPC failure into advice. It stays a status of the same
// code and details, which the CLI's exit code is taken from (3 not found, 4
// unavailable, 5 unauthenticated, 6 refused).
func (d *driver) explain(err error) error {
	if errors.Is(err, ErrInputClosed) {
		return err
	}
	st, _ := status.FromError(err)
	msg := "classify: " + st.Message()
	switch st.Code() {
	case codes.Aborted:
		msg = fmt.Sprintf("classify: run %s is being driven by another request; watch it there or resume it later: %s", d.runID, st.Message())
	case codes.Unavailable:
		if d.runID != "" {
			msg = fmt.Sprintf("classify: %s; resume with: agentmesh classify resume %s", st.Message(), d.runID)
		}
	}
	p := st.Proto()
	p.Message = msg
	return status.FromProto(p).Err()
}

// show prints one event.
func (d *driver) show(e *classifierv1.RunEvent) {
	typ := e.GetType()
	data := e.GetData().AsInterface()
	if d.runID == "" {
		// Over the gateway's SSE, which repeats the original agent's
		// events, the id travels only in agent.run.started's data.
		id := e.GetRunId()
		if m, ok := data.(map[string]any); ok && id == "" {
			id, _ = m["runId"].(string)
		}
		if id != "" {
			d.runID = id
			fmt.Fprintf(d.out, "Run %s\n", d.runID)
		}
	}
	switch {
	case strings.HasSuffix(typ, ".delta"):
		if !d.inText {
			fmt.Fprintln(d.out)
			d.inText = true
		}
		fmt.Fprint(d.out, e.GetData().GetStringValue())
		return
	case strings.HasSuffix(typ, "summary.done"):
		// The end of a streamed text: the text itself says it all.
		d.endText()
		return
	}
	d.endText()
	if msg := e.GetLogMessage(); msg != "" {
		fmt.Fprintf(d.out, "• %s\n", msg)
	}
	m, _ := data.(map[string]any)
	switch typ {
	case "agent.run.classifying.completed":
		// Classified, not yet saved: the bar shows where approval leads.
		fmt.Fprintf(d.out, "  %s\n", progressBar(num(m["progress"]), num(m["totalClassified"])+num(m["classified"]), num(m["target"])))
	case "agent.run.saving.completed":
		fmt.Fprintf(d.out, "  %s\n", progressBar(num(m["progress"]), num(m["totalClassified"]), num(m["target"])))
	case "agent.run.awaiting_fetch_approval":
		d.showFetch(data)
	case "agent.run.awaiting_batch_approval":
		d.showBatch(data)
	}
}

func (d *driver) endText() {
	if d.inText {
		fmt.Fprintln(d.out)
		d.inText = false
	}
}

func (d *driver) showFetch(data any) {
	m, _ := data.(map[string]any)
	plan, _ := m["plan"].(map[string]any)
	fetched, _ := m["fetchedData"].(map[string]any)
	fmt.Fprintf(d.out, "\n  Plan: %v conversations", plan["targetSampleSize"])
	if s, _ := plan["strategy"].(string); s != "" {
		fmt.Fprintf(d.out, " — %s", s)
	}
	fmt.Fprintln(d.out)
	if q, err := json.Marshal(plan["query"]); err == nil {
		fmt.Fprintf(d.out, "  Query: %s\n", q)
	}
	if s, _ := plan["additionalInstructions"].(string); s != "" {
		fmt.Fprintf(d.out, "  Instructions: %s\n", s)
	}
	ids := strs(fetched["conversationIds"])
	shown := ids[:min(10, len(ids))]
	fmt.Fprintf(d.out, "  Fetched %v conversations: %s", fetched["conversationCount"], strings.Join(shown, ", "))
	if len(ids) > len(shown) {
		fmt.Fprintf(d.out, ", … (%d more)", len(ids)-len(shown))
	}
	fmt.Fprintln(d.out)
	if s, ok := fetched["sampleConversation"].(map[string]any); ok {
		fmt.Fprintf(d.out, "  Sample %v (%v messages): %v\n", s["id"], s["messageCount"], s["summary"])
	}
}

func (d *driver) showBatch(data any) {
	list, _ := data.([]any)
	fmt.Fprintln(d.out)
	for _, x := range list {
		c, _ := x.(map[string]any)
		fmt.Fprintf(d.out, "  %-24v %v\n", c["id"], c["label"])
	}
}

// decide asks what to do with a waiting run.
func (d *driver) decide(state classifierv1.RunState) (classifierv1.CommandType, string, error) {
	approve, reject := classifierv1.CommandType_COMMAND_TYPE_APPROVE_FETCH, classifierv1.CommandType_COMMAND_TYPE_REJECT_FETCH
	what := "the fetched conversations"
	if state == classifierv1.RunState_RUN_STATE_AWAITING_BATCH_APPROVAL {
		approve, reject = classifierv1.CommandType_COMMAND_TYPE_APPROVE_BATCH, classifierv1.CommandType_COMMAND_TYPE_REJECT_BATCH
		what = "this batch"
	}
	if d.auto {
		fmt.Fprintf(d.out, "Approving %s (auto-approve)\n", what)
		return approve, "", nil
	}
	for {
		fmt.Fprintf(d.out, "Approve %s? [a]pprove / [r]eject with feedback / [s]top: ", what)
		answer, ok := d.readLine()
		if !ok {
			fmt.Fprintln(d.out)
			return 0, "", fmt.Errorf("%w; resume with: agentmesh classify resume %s", ErrInputClosed, d.runID)
		}
		switch strings.ToLower(answer) {
		case "a", "approve", "y", "yes":
			return approve, "", nil
		case "s", "stop":
			return classifierv1.CommandType_COMMAND_TYPE_STOP, "", nil
		case "r", "reject":
			fmt.Fprint(d.out, "Feedback for the next plan: ")
			feedback, ok := d.readLine()
			if !ok {
				fmt.Fprintln(d.out)
				return 0, "", fmt.Errorf("%w; resume with: agentmesh classify resume %s", ErrInputClosed, d.runID)
			}
			return reject, feedback, nil
		}
		fmt.Fprintln(d.out, "Please answer a, r or s.")
	}
}

func (d *driver) readLine() (string, bool) {
	if !d.in.Scan() {
		return "", false
	}
	return strings.TrimSpace(d.in.Text()), true
}

// progressBar draws e.g. "[############--------]  60%  3/5 classified".
func progressBar(percent, done, target int) string {
	const width = 20
	percent = max(0, min(100, percent))
	filled := percent * width / 100
	bar := strings.Repeat("#", filled) + strings.Repeat("-", width-filled)
	s := fmt.Sprintf("[%s] %3d%%", bar, percent)
	if target > 0 {
		s += fmt.Sprintf("  %d/%d classified", done, target)
	}
	return s
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

func strs(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

func stateName(s classifierv1.RunState) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(s.String(), "RUN_STATE_"), "_", " "))
}
