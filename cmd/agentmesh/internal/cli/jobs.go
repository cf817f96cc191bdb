package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/jobstree"
)

func (a *app) jobsCmd() *cobra.Command {
	return group("jobs", "list, follow, cancel and retry jobs (analyses and their tool jobs)",
		a.jobsListCmd(), a.jobsGetCmd(), a.jobsWatchCmd(), a.jobsTreeCmd(), a.jobsSubmitCmd(),
		a.jobActionCmd("cancel", "cancel a job and its unfinished children"),
		a.jobActionCmd("retry", "retry a failed or cancelled tool or synthesis job (an analysis itself is submitted again)"))
}

func jobsClient(m *mesh) orchestratorv1.JobServiceClient {
	return orchestratorv1.NewJobServiceClient(m.orchestrator)
}

func (a *app) jobsListCmd() *cobra.Command {
	var statusName, typeName, parent, pageToken, since string
	var limit int32
	c := &cobra.Command{
		Use:   "list",
		Short: "list jobs, newest first",
		Args:  noArgs,
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, _ []string, m *mesh) error {
			req := &orchestratorv1.ListJobsRequest{Scope: m.scope(), ParentId: parent, PageSize: limit, PageToken: pageToken}
			st, err := parseEnum(orchestratorv1.JobStatus(0).Descriptor(), "--status", statusName)
			if err != nil {
				return err
			}
			typ, err := parseEnum(orchestratorv1.JobType(0).Descriptor(), "--type", typeName)
			if err != nil {
				return err
			}
			req.Status, req.Type = orchestratorv1.JobStatus(st), orchestratorv1.JobType(typ)
			if since != "" {
				d, err := time.ParseDuration(since)
				if err != nil || d <= 0 {
					return usagef("--since %q: want a duration such as 30m or 24h", since)
				}
				req.CreateTimeFrom = timestamppb.New(time.Now().Add(-d))
			}
			res, err := jobsClient(m).ListJobs(ctx, req)
			if err != nil {
				return callErr("list jobs", err)
			}
			return a.emit(res, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "ID\tTYPE\tSTATUS\tTITLE\tCREATED\tDURATION")
				for _, j := range res.GetJobs() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", j.GetId(), enumName(j.GetType()), enumName(j.GetStatus()), clip(jobTitle(j), 48), when(j.GetCreateTime()), span(j.GetStartTime(), j.GetEndTime()))
				}
				nextPage(w, res.GetNextPageToken())
			})
		}),
	}
	f := c.Flags()
	f.StringVar(&statusName, "status", "", "only jobs in this status: pending, running, waiting_for_children, complete, failed, cancelled")
	f.StringVar(&typeName, "type", "", "only jobs of this type: analysis_request, planning_call, tool_execution, synthesis")
	f.StringVar(&parent, "parent", "", "only the children of this job")
	f.StringVar(&since, "since", "", "only jobs created within this duration, e.g. 24h")
	pageFlags(c, &limit, &pageToken, "jobs")
	return c
}

func jobTitle(j *orchestratorv1.Job) string {
	if j.GetTitle() != "" {
		return j.GetTitle()
	}
	return j.GetToolName()
}

func (a *app) jobsGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get JOB_ID",
		Short: "show a job with its input, output and children",
		Args:  exactArgs(1, "a job id"),
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, args []string, m *mesh) error {
			res, err := jobsClient(m).GetJob(ctx, &orchestratorv1.GetJobRequest{Scope: m.scope(), JobId: args[0]})
			if err != nil {
				return callErr("get job "+args[0], err)
			}
			j := res.GetJob()
			return a.emit(res, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "ID:\t%s\nTYPE:\t%s\nSTATUS:\t%s\nTITLE:\t%s\n", j.GetId(), enumName(j.GetType()), enumName(j.GetStatus()), jobTitle(j))
				fmt.Fprintf(w, "CREATED:\t%s\nDURATION:\t%s\nATTEMPTS:\t%d\n", when(j.GetCreateTime()), span(j.GetStartTime(), j.GetEndTime()), j.GetAttempts())
				if j.GetError() != "" {
					fmt.Fprintf(w, "ERROR:\t%s\n", j.GetError())
				}
				if len(j.GetChildren()) > 0 {
					fmt.Fprintf(w, "CHILDREN:\t%d (agentmesh jobs tree %s)\n", len(j.GetChildren()), j.GetId())
				}
				if j.GetOutput() != nil {
					b, _ := jsonOut.Marshal(j.GetOutput())
					fmt.Fprintf(w, "OUTPUT:\t%s\n", clip(string(b), 400))
				}
			})
		}),
	}
}

func (a *app) jobsTreeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "tree JOB_ID",
		Short: "print an analysis job tree with status and timing",
		Args:  exactArgs(1, "a job id"),
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, args []string, m *mesh) error {
			res, err := jobsClient(m).GetJob(ctx, &orchestratorv1.GetJobRequest{Scope: m.scope(), JobId: args[0]})
			if err != nil {
				return callErr("get job "+args[0], err)
			}
			if a.output != "table" {
				return a.emit(res, nil)
			}
			return jobstree.Print(a.io.Out, res.GetJob())
		}),
	}
}

func (a *app) jobsSubmitCmd() *cobra.Command {
	var responseType string
	var watch bool
	c := &cobra.Command{
		Use:   "submit QUERY",
		Short: "submit an analysis (planning, tool jobs, synthesis)",
		Args:  exactArgs(1, "the analysis request, quoted"),
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, args []string, m *mesh) error {
			req := &orchestratorv1.SubmitAnalysisRequest{Scope: m.scope(), Query: args[0], ResponseType: responseType, RequestId: newRequestID()}
			res, err := resend(ctx, a, "submission", func() (*orchestratorv1.SubmitAnalysisResponse, error) {
				return jobsClient(m).SubmitAnalysis(ctx, req)
			})
			if err != nil {
				return callErr("submit analysis", err)
			}
			if watch {
				fmt.Fprintf(a.io.Err, "job %s\n", res.GetJob().GetId())
				return a.watch(ctx, m, res.GetJob().GetId(), 0)
			}
			return a.emit(res, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "%s\t%s\n", res.GetJob().GetId(), enumName(res.GetJob().GetStatus()))
			})
		}),
	}
	c.Flags().StringVar(&responseType, "response-type", "", "response type, e.g. generic_analysis")
	c.Flags().BoolVarP(&watch, "watch", "w", false, "follow the job until it ends")
	return c
}

func (a *app) jobActionCmd(verb, short string) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " JOB_ID",
		Short: short,
		Args:  exactArgs(1, "a job id"),
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, args []string, m *mesh) error {
			var job *orchestratorv1.Job
			var err error
			if verb == "cancel" {
				var res *orchestratorv1.CancelJobResponse
				res, err = jobsClient(m).CancelJob(ctx, &orchestratorv1.CancelJobRequest{Scope: m.scope(), JobId: args[0]})
				job = res.GetJob()
			} else {
				var res *orchestratorv1.RetryJobResponse
				res, err = jobsClient(m).RetryJob(ctx, &orchestratorv1.RetryJobRequest{Scope: m.scope(), JobId: args[0]})
				job = res.GetJob()
			}
			if err != nil {
				return callErr(verb+" job "+args[0], err)
			}
			return a.emit(job, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "%s\t%s\n", job.GetId(), enumName(job.GetStatus()))
			})
		}),
	}
}

func (a *app) jobsWatchCmd() *cobra.Command {
	var after uint64
	c := &cobra.Command{
		Use:   "watch JOB_ID",
		Short: "follow a job's events until it ends, with a progress line",
		Long: `Follows a job and its children until the job ends: one line per event
(one JSON object a line with -o json), a progress line on stderr, and the
job tree at the end. Exits 0 when the job completed, 1 when it failed or
was cancelled.`,
		Args: exactArgs(1, "a job id"),
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, args []string, m *mesh) error {
			return a.watch(ctx, m, args[0], after)
		}),
	}
	c.Flags().Uint64Var(&after, "after-sequence", 0, "resume after the event with this id (the id of the last event a watch printed)")
	return c
}

// watch follows job id to its end.
func (a *app) watch(ctx context.Context, m *mesh, id string, after uint64) error {
	client := jobsClient(m)
	stream, err := client.WatchJob(ctx, &orchestratorv1.WatchJobRequest{Scope: m.scope(), JobId: id, AfterSequence: after})
	if err != nil {
		return callErr("watch job "+id, err)
	}
	p := newProgress(a.io.Err)
	for {
		res, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			p.done()
			if after > 0 && ExitCode(err) == ExitUnavailable {
				return callErr(fmt.Sprintf("watch job %s (resume with: agentmesh jobs watch %s --after-sequence %d)", id, id, after), err)
			}
			return callErr("watch job "+id, err)
		}
		if s := res.GetSequence(); s != 0 {
			after = s // the last event received: ids are not ordered
		}
		j := res.GetEvent().GetJob()
		p.update(j)
		err = a.emitLine(res, func(w io.Writer) {
			p.clear()
			fmt.Fprintf(w, "%s  %-20s %-16s %s\n", time.Now().Format("15:04:05"), enumName(j.GetStatus()), enumName(j.GetType()), clip(jobTitle(j), 60))
		})
		if err != nil {
			return err
		}
		p.draw()
	}
	p.done()
	res, err := client.GetJob(ctx, &orchestratorv1.GetJobRequest{Scope: m.scope(), JobId: id})
	if err != nil {
		return callErr("get job "+id, err)
	}
	job := res.GetJob()
	if a.output == "table" {
		fmt.Fprintln(a.io.Out)
		if err := jobstree.Print(a.io.Out, job); err != nil {
			return err
		}
	}
	switch job.GetStatus() {
	case orchestratorv1.JobStatus_JOB_STATUS_COMPLETE:
		return nil
	case orchestratorv1.JobStatus_JOB_STATUS_FAILED, orchestratorv1.JobStatus_JOB_STATUS_CANCELLED:
		msg := fmt.Sprintf("job %s %s", id, enumName(job.GetStatus()))
		if job.GetError() != "" {
			msg += ": " + job.GetError()
		}
		return &exitError{code: ExitFailure, err: errors.New(msg)}
	}
	return &exitError{code: ExitFailure, err: fmt.Errorf("the watch of job %s ended while the job is %s; resume with: agentmesh jobs watch %s", id, enumName(job.GetStatus()), id)}
}

// progress draws "[######----] 3/5 jobs done · 2.8 s" on stderr: redrawn
// in place on a terminal, a line per change elsewhere.
type progress struct {
	w      io.Writer
	tty    bool
	start  time.Time
	status map[string]orchestratorv1.JobStatus
	last   string
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, tty: isTerminal(w), start: time.Now(), status: map[string]orchestratorv1.JobStatus{}}
}

func (p *progress) update(j *orchestratorv1.Job) {
	if j.GetId() != "" {
		p.status[j.GetId()] = j.GetStatus()
	}
	for _, c := range j.GetChildren() {
		p.update(c)
	}
}

func (p *progress) line() string {
	done := 0
	for _, s := range p.status {
		switch s {
		case orchestratorv1.JobStatus_JOB_STATUS_COMPLETE, orchestratorv1.JobStatus_JOB_STATUS_FAILED, orchestratorv1.JobStatus_JOB_STATUS_CANCELLED:
			done++
		}
	}
	return bar(done, len(p.status), "jobs done", p.start)
}

// bar is "[######----] 3/5 what · 2.8 s".
func bar(done, total int, what string, start time.Time) string {
	const width = 20
	filled := 0
	if total > 0 {
		filled = min(done, total) * width / total
	}
	return fmt.Sprintf("[%s%s] %d/%d %s · %s", strings.Repeat("#", filled), strings.Repeat("-", width-filled), done, total, what, human(time.Since(start)))
}

// counter draws bar for a count of items on stderr, as progress does:
// redrawn in place on a terminal, a line per change elsewhere, with a
// note of what is being done beside it.
type counter struct {
	w           io.Writer
	tty         bool
	start       time.Time
	done, total int
	what, doing string
	noteless    bool // no notes: every count is worth a line
	last        string
}

func newCounter(w io.Writer, total int, what string) *counter {
	return &counter{w: w, tty: isTerminal(w), start: time.Now(), total: total, what: what}
}

// note says what is being done now and redraws.
func (c *counter) note(s string) {
	c.doing = s
	c.draw()
}

// add counts n more items done, ends the note, and redraws.
func (c *counter) add(n int) {
	c.done += n
	c.doing = ""
	c.draw()
}

func (c *counter) line() string {
	l := bar(c.done, c.total, c.what, c.start)
	if c.doing != "" && c.done < c.total {
		l += " · " + c.doing
	}
	return l
}

func (c *counter) draw() {
	l := c.line()
	if c.tty {
		fmt.Fprintf(c.w, "\r\033[K%s", l)
		return
	}
	// Elsewhere a line per note, and one for each count without one
	// when no note follows (the last, or where nothing is noted).
	key := fmt.Sprint(c.done, c.doing)
	if key != c.last && (c.doing != "" || c.done == c.total || c.noteless) {
		c.last = key
		fmt.Fprintln(c.w, l)
	}
}

// done ends the line on a terminal.
func (c *counter) finish() {
	if c.tty {
		fmt.Fprintf(c.w, "\r\033[K%s\n", c.line())
	}
}

func (p *progress) draw() {
	l := p.line()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", l)
		return
	}
	// Elsewhere only a change in counts is worth a line.
	if c := l[:strings.LastIndex(l, " · ")]; c != p.last {
		p.last = c
		fmt.Fprintln(p.w, l)
	}
}

// clear removes the progress line before other output on a terminal.
func (p *progress) clear() {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func (p *progress) done() {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s\n", p.line())
	}
}
