package cli

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/structpb"

	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// confirmWord is what a user types to let a query run or a table be
// written; anything else leaves the session where it was.
const confirmWord = "yes"

// acting are the options whose choice runs SQL or writes: "confirm" runs
// the shown query (or sends the whole table), the write modes create,
// replace or empty a table.
var acting = map[string]bool{"confirm": true, "create": true, "drop": true, "truncate": true}

func (a *app) sqlCmd() *cobra.Command {
	var connection string
	c := &cobra.Command{
		Use:   "sql",
		Short: "an interactive SQL agent session, with confirmation before anything runs",
		Long: `Starts a session with the SQL agent and reads your answers line by line:
a question in plain English or your own SQL, or the number (or value) of one
of the offered options. Before a query runs or a table is written, the SQL
is shown whole and nothing happens until you type "yes"; any other answer
cancels that step. /exit or end of input ends the session. With -o json each
reply is printed as one JSON object a line.`,
		Args: noArgs,
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, _ []string, m *mesh) error {
			return a.sqlSession(ctx, sqlagentv1.NewSqlAgentServiceClient(m.sqlgen), m, connection)
		}),
	}
	c.Flags().StringVar(&connection, "connection", "", "database connection to use (agentmesh sql connections)")
	c.AddCommand(a.sqlJobsCmd(), a.sqlJobCmd())
	c.AddCommand(&cobra.Command{
		Use:   "connections",
		Short: "list the databases the SQL agent may use",
		Args:  noArgs,
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, _ []string, m *mesh) error {
			res, err := sqlagentv1.NewSqlAgentServiceClient(m.sqlgen).ListConnections(ctx, &sqlagentv1.ListConnectionsRequest{Scope: m.scope()})
			if err != nil {
				return callErr("list connections", err)
			}
			return a.emit(res, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "NAME\tDIALECT")
				for _, c := range res.GetConnections() {
					fmt.Fprintf(w, "%s\t%s\n", c.GetName(), c.GetDialect())
				}
			})
		}),
	})
	return c
}

func (a *app) sqlJobsCmd() *cobra.Command {
	var session, pageToken string
	var limit int32
	c := &cobra.Command{
		Use:   "jobs",
		Short: "list the reads, writes, e-mails and comparisons that ran, newest first",
		Args:  noArgs,
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, _ []string, m *mesh) error {
			res, err := sqlagentv1.NewSqlAgentServiceClient(m.sqlgen).ListSqlJobs(ctx, &sqlagentv1.ListSqlJobsRequest{
				Scope: m.scope(), SessionId: session, PageSize: limit, PageToken: pageToken,
			})
			if err != nil {
				return callErr("list SQL jobs", err)
			}
			return a.emit(res, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "ID\tKIND\tNAME\tCONNECTION\tROWS\tDESTINATION\tSTARTED\tTOOK")
				for _, j := range res.GetJobs() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", j.GetId(), enumName(j.GetKind()), clip(cmp.Or(j.GetName(), "-"), 32),
						j.GetConnection(), j.GetRowCount(), clip(j.GetDestination(), 40), when(j.GetStartTime()), humanPB(j.GetDuration()))
				}
				nextPage(w, res.GetNextPageToken())
			})
		}),
	}
	c.Flags().StringVar(&session, "session", "", "only the jobs of this session")
	pageFlags(c, &limit, &pageToken, "jobs")
	return c
}

func (a *app) sqlJobCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "job JOB_ID",
		Short: "show a job that ran: the SQL exactly as approved, its rows and where the result went",
		Args:  exactArgs(1, "a SQL job id (agentmesh sql jobs)"),
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, args []string, m *mesh) error {
			res, err := sqlagentv1.NewSqlAgentServiceClient(m.sqlgen).GetSqlJob(ctx, &sqlagentv1.GetSqlJobRequest{Scope: m.scope(), JobId: args[0]})
			if err != nil {
				return callErr("get SQL job "+args[0], err)
			}
			j := res.GetJob()
			return a.emit(res, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "ID:\t%s\nKIND:\t%s\nNAME:\t%s\nSESSION:\t%s\nCONNECTION:\t%s\n", j.GetId(), enumName(j.GetKind()),
					cmp.Or(j.GetName(), "-"), j.GetSessionId(), j.GetConnection())
				fmt.Fprintf(w, "STARTED:\t%s\nTOOK:\t%s\nROWS:\t%d\nDESTINATION:\t%s\n", when(j.GetStartTime()), humanPB(j.GetDuration()),
					j.GetRowCount(), j.GetDestination())
				// The SQL whole and exactly as approved, past the table,
				// whose cells would fold its lines and expand its tabs.
				w.Flush()
				fmt.Fprintf(a.io.Out, "SQL:\n%s\n", indent(j.GetSql()))
				if j.GetSecondSql() != "" {
					fmt.Fprintf(a.io.Out, "SECOND SQL:\n%s\n", indent(j.GetSecondSql()))
				}
			})
		}),
	}
}

// indent puts two spaces before each line of s.
func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// sqlReply is what CreateSession and SendInput both answer.
type sqlReply interface {
	GetSession() *sqlagentv1.Session
	GetReply() string
	GetOptions() []*sqlagentv1.Option
}

func (a *app) sqlSession(ctx context.Context, client sqlagentv1.SqlAgentServiceClient, m *mesh, connection string) error {
	created, err := client.CreateSession(ctx, &sqlagentv1.CreateSessionRequest{Scope: m.scope(), Connection: connection})
	if err != nil {
		return callErr("create SQL session", err)
	}
	id := created.GetSession().GetId()
	fmt.Fprintf(a.io.Err, "SQL session %s — /exit or Ctrl-D ends, /help explains\n", id)
	var last sqlReply = created
	pending := "" // SQL waiting for confirmation
	if err := a.showSQL(created, ""); err != nil {
		return err
	}
	in := bufio.NewScanner(a.input(ctx))
	in.Buffer(make([]byte, 64<<10), 1<<20)
	read := func(prompt string) (string, bool) {
		fmt.Fprint(a.io.Err, prompt)
		if !in.Scan() {
			fmt.Fprintln(a.io.Err)
			return "", false
		}
		return strings.TrimSpace(in.Text()), true
	}
	for {
		line, ok := read("sql> ")
		if !ok {
			if err := in.Err(); err != nil {
				return inputErr(err)
			}
			if offersActing(last.GetOptions()) {
				// Ctrl-D where SQL waits to run: the session waits.
				return &exitError{code: ExitInterrupted, err: fmt.Errorf("the input ended while SQL session %s waits for confirmation; nothing ran", id)}
			}
			return nil
		}
		if line == "" {
			continue
		}
		if line == "/exit" || line == "/quit" {
			return nil
		}
		if line == "/help" || line == "/?" {
			fmt.Fprintln(a.io.Err, "Type a question in plain English, your own SQL, or an offered option by its number or value. Nothing runs until you confirm it. /exit, /quit or Ctrl-D ends.")
			continue
		}
		req := &sqlagentv1.SendInputRequest{Scope: m.scope(), SessionId: id}
		opt := chosen(last.GetOptions(), line)
		if opt == nil && offersActing(last.GetOptions()) && !strings.ContainsAny(line, " \t") {
			// One word where a query may run is an answer, not a corrected
			// query: sent as text, the agent could take it for a yes.
			if line == confirmWord && chosen(last.GetOptions(), "confirm") != nil {
				req.Selection = "confirm" // the SQL is shown above and "yes" typed
			} else {
				fmt.Fprintln(a.io.Err, "Choose an option by its number or value, or type a corrected query in full.")
				continue
			}
		} else if opt == nil {
			req.Text = line
		} else {
			req.Selection = opt.GetValue()
			if acting[opt.GetValue()] {
				what := opt.GetLabel()
				if pending != "" {
					what += ":\n\n" + pending + "\n"
				}
				fmt.Fprintf(a.io.Err, "%s\n", what)
				answer, ok := read(fmt.Sprintf("Type %q to go ahead, anything else to cancel: ", confirmWord))
				if !ok {
					return in.Err()
				}
				if answer != confirmWord {
					fmt.Fprintln(a.io.Err, "Not confirmed: nothing ran. Choose again, or type a new question or query.")
					continue
				}
			}
		}
		req.RequestId = newRequestID()
		// The input answers the session as shown: had another client
		// replaced the SQL waiting for approval, nothing runs.
		v := last.GetSession().GetVersion()
		req.ExpectedVersion = &v
		res, err := a.sendInput(ctx, client, req)
		if err != nil {
			if c := ExitCode(err); c == ExitUnavailable || c == ExitNotFound || c == ExitInterrupted || c == ExitDenied {
				return callErr("SQL session "+id, err)
			}
			fmt.Fprintf(a.io.Err, "agentmesh: %s\n", errorText(err))
			if grpcx.Reason(err) == "SESSION_CHANGED" {
				now, err := client.GetSession(ctx, &sqlagentv1.GetSessionRequest{Scope: m.scope(), SessionId: id})
				if err != nil {
					return callErr("SQL session "+id, err)
				}
				s := now.GetSession()
				last, pending = &sqlagentv1.SendInputResponse{Session: s, Reply: "The session as it is now:", Options: s.GetOptions()}, s.GetPendingSql()
				if err := a.showSQL(last, pending); err != nil {
					return err
				}
			}
			continue
		}
		last, pending = res, res.GetSqlToConfirm()
		if err := a.showSQL(res, pending); err != nil {
			return err
		}
		if res.GetSession().GetStage() == "DONE" {
			return nil
		}
	}
}

// inputErr is how a session's reading of its input failed: a line past
// the reader's 1 MiB is a usage error saying so.
func inputErr(err error) error {
	if errors.Is(err, bufio.ErrTooLong) {
		return usagef("a line of input is longer than 1 MiB (a message or a query is one line)")
	}
	return err
}

// offersActing reports whether one of opts runs SQL or writes.
func offersActing(opts []*sqlagentv1.Option) bool {
	for _, o := range opts {
		if acting[o.GetValue()] {
			return true
		}
	}
	return false
}

// chosen is the option a line picks: its number or its value.
func chosen(opts []*sqlagentv1.Option, line string) *sqlagentv1.Option {
	if n, err := strconv.Atoi(line); err == nil && n >= 1 && n <= len(opts) {
		return opts[n-1]
	}
	for _, o := range opts {
		if strings.EqualFold(o.GetValue(), line) {
			return o
		}
	}
	return nil
}

// showSQL prints a reply: its text, the SQL to confirm whole, a result
// table, and the numbered options.
func (a *app) showSQL(r sqlReply, pending string) error {
	if a.output != "table" {
		return a.emitLine(r, nil)
	}
	out := a.io.Out
	fmt.Fprintln(out, r.GetReply())
	if pending != "" {
		fmt.Fprintf(out, "\n%s\n\n", pending)
	}
	if res, ok := r.(*sqlagentv1.SendInputResponse); ok && res.GetResult() != nil {
		printTable(out, res.GetResult())
	}
	for i, o := range r.GetOptions() {
		fmt.Fprintf(out, "  %d) %s [%s]\n", i+1, o.GetLabel(), o.GetValue())
	}
	return nil
}

func printTable(out io.Writer, t *sqlagentv1.ResultTable) {
	w := tabwriter.NewWriter(&shown{w: out}, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(t.GetColumns(), "\t"))
	for _, row := range t.GetRows() {
		cells := make([]string, 0, len(row.GetValues()))
		for _, v := range row.GetValues() {
			s := v.GetStringValue()
			if _, isString := v.GetKind().(*structpb.Value_StringValue); !isString {
				b, _ := v.MarshalJSON()
				s = string(b)
			}
			cells = append(cells, s)
		}
		fmt.Fprintln(w, strings.Join(cells, "\t"))
	}
	w.Flush()
	if t.GetTruncated() {
		fmt.Fprintln(out, "(truncated at the row cap)")
	}
}

// sendAttempts is how many times the CLI sends one request that carries a
// request id (a SQL input, an analysis submission) while the mesh cannot
// be reached.
const sendAttempts = 3

// sendInput sends req, and again while the mesh cannot be reached (see
// resend): under the same request id, an input that was applied before
// its answer was lost is answered as it was, never run twice.
func (a *app) sendInput(ctx context.Context, client sqlagentv1.SqlAgentServiceClient, req *sqlagentv1.SendInputRequest) (*sqlagentv1.SendInputResponse, error) {
	return resend(ctx, a, "input", func() (*sqlagentv1.SendInputResponse, error) { return client.SendInput(ctx, req) })
}

// resend makes call, and again while the mesh cannot be reached (a lost
// connection, a gateway replica going away), at most sendAttempts times,
// waiting 1 s, then 2 s. call must send a request id, so that a request
// applied before its answer was lost is answered, not applied again.
func resend[T any](ctx context.Context, a *app, what string, call func() (T, error)) (T, error) {
	wait := time.Second
	for attempt := 1; ; attempt++ {
		res, err := call()
		if err == nil || attempt == sendAttempts || ExitCode(err) != ExitUnavailable {
			return res, err
		}
		fmt.Fprintf(a.io.Err, "agentmesh: %s; sending the same %s again in %s\n", errorText(err), what, wait)
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// newRequestID is a random id for one input.
func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
