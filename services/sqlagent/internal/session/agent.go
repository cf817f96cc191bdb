package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/safety"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/sqlgen"
)

// Agent runs sessions. It is safe for concurrent use; two inputs to one
// session at once are serialised by the store's version check (the later
// one fails with ErrConflict and changes nothing), and a confirmed SQL runs
// once however many confirmations race (see the package doc).
type Agent struct {
	store Store
	dbs   Databases
	gen   SQLWriter
	opts  Options
	// confirmWords is Options.ConfirmationWords, normalised.
	confirmWords map[string]bool
	// running holds the executions this agent runs, from before their
	// EXECUTING write until their result is recorded.
	running sync.Map
}

// NewAgent returns an Agent over store, the configured databases and the
// SQL writer.
func NewAgent(store Store, dbs Databases, gen SQLWriter, opts Options) *Agent {
	if opts.RowLimit <= 0 {
		opts.RowLimit = defaultRowLimit
	}
	if opts.QueryTimeout <= 0 {
		opts.QueryTimeout = defaultQueryTimeout
	}
	if opts.EmailRowLimit <= 0 {
		opts.EmailRowLimit = defaultEmailRowLimit
	}
	if opts.CompareRowLimit <= 0 {
		opts.CompareRowLimit = defaultCompareRowLimit
	}
	if opts.ExecutionLeaseTTL <= 0 {
		opts.ExecutionLeaseTTL = defaultExecutionLeaseTTL
	}
	if opts.KnowledgeTimeout <= 0 {
		opts.KnowledgeTimeout = defaultKnowledgeTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NewID == nil {
		opts.NewID = newID
	}
	words := opts.ConfirmationWords
	if len(words) == 0 {
		words = DefaultConfirmationWords
	}
	cw := map[string]bool{}
	for _, w := range words {
		if w = strings.ToLower(strings.Trim(strings.TrimSpace(w), " .!")); w != "" {
			cw[w] = true
		}
	}
	return &Agent{store: store, dbs: dbs, gen: gen, opts: opts, confirmWords: cw}
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Create starts a READ_SQL session. With connection set (one the scope's
// tenant may use, else ErrUnknownConnection) it asks how to get the
// SQL; without, it offers the connections to choose from.
func (a *Agent) Create(ctx context.Context, scope Scope, connection string) (*Session, Reply, error) {
	return a.Start(ctx, scope, StartRequest{Connection: connection})
}

// Get returns the session id of scope, or ErrNotFound.
func (a *Agent) Get(ctx context.Context, scope Scope, id string) (*Session, error) {
	return a.store.Get(ctx, scope, id)
}

// Send advances session id with free text or a selection (one of the values
// offered by the previous reply). A confirmation runs the pending SQL once
// (see the package doc). Errors: InputError for empty or invalid input,
// ErrNotFound, ErrFinished, ErrConflict, ErrExecuting while a confirmed SQL
// of the session runs, ErrUnavailable when the model gateway or the
// database is down (the session is then unchanged, or, when the database
// failed a confirmed SQL, back at the confirmation with a reply saying so).
func (a *Agent) Send(ctx context.Context, scope Scope, id, text, selection string) (*Session, Reply, error) {
	return a.SendRequest(ctx, scope, id, Request{Text: text, Selection: selection})
}

// Request is one input to a session, as a client sends it.
type Request struct {
	// Text and Selection are the input: free text, or a value the
	// previous reply offered.
	Text, Selection string
	// ID is the client's name for the input (empty: not named). A repeat
	// of the input that last moved the session gets that input's reply
	// again, without acting (with its result table when that was at most
	// keptResultBytes; the reply's Job says what ran); a repeat of an
	// earlier one fails with ErrInputSuperseded. So a client whose answer
	// was lost can send again.
	ID string
	// ExpectedVersion, when set, is the session's Version as the client
	// showed it: when the session has changed since, the input fails with
	// ErrSessionChanged and nothing acts (a confirmation approves only the
	// SQL the user saw). A repeat of the last input is answered before
	// this check, as its version has moved by then.
	ExpectedVersion *int64
}

// SendRequest is Send for a Request.
func (a *Agent) SendRequest(ctx context.Context, scope Scope, id string, req Request) (*Session, Reply, error) {
	text, selection := strings.TrimSpace(req.Text), strings.TrimSpace(req.Selection)
	if text == "" && selection == "" {
		return nil, Reply{}, inputErr("text", "give text or a selection")
	}
	s, err := a.store.Get(ctx, scope, id)
	if err != nil {
		return nil, Reply{}, err
	}
	if requestID := req.ID; requestID != "" {
		if last := s.LastInput; last != nil && last.RequestID == requestID {
			return a.replay(ctx, s)
		}
		if slices.Contains(s.EarlierInputs, requestID) {
			return nil, Reply{}, ErrInputSuperseded
		}
	}
	if v := req.ExpectedVersion; v != nil && *v != s.Version {
		// The store writes only the version read here, so a change after
		// this check fails the write (ErrConflict) instead.
		return nil, Reply{}, &SessionChangedError{Expected: *v, Now: s.Version, PendingSQL: s.PendingSQL}
	}
	s.requestID = req.ID
	ctx = withSession(ctx, s)
	said := text
	if said == "" {
		said = selection
	}
	now := a.opts.Now().UTC()
	switch {
	case s.Stage == StageDone:
		return nil, Reply{}, ErrFinished
	case s.Stage == StageExecuting && s.Execution != nil && now.Before(s.Execution.Deadline):
		lapsed, err := a.claimLapsed(ctx, s.Execution, now)
		if err != nil {
			return nil, Reply{}, err
		}
		if !lapsed {
			return nil, Reply{}, ErrExecuting
		}
	}
	s.Turns = append(s.Turns, Turn{Role: roleUser, Text: said, Time: now})
	if s.Stage == StageExecuting {
		// Past its deadline, or its claim lapsed: the input is recorded,
		// not acted on.
		return a.record(ctx, s, a.interrupted(s), now)
	}
	r, err := a.step(ctx, s, input{text: text, selection: selection})
	if err != nil {
		return nil, Reply{}, err
	}
	if s.Stage == StageExecuting {
		return a.execute(ctx, s)
	}
	return a.record(ctx, s, r, now)
}

// record appends r to s as the agent's turn and writes s.
func (a *Agent) record(ctx context.Context, s *Session, r Reply, now time.Time) (*Session, Reply, error) {
	turn := r.Text
	if r.SQLToConfirm != "" {
		turn += "\n\n```sql\n" + r.SQLToConfirm + "\n```"
	}
	s.Turns = append(s.Turns, Turn{Role: roleAgent, Text: turn, Time: now})
	s.Updated = now
	s.noteInput(r)
	if err := a.store.Update(ctx, s); err != nil {
		return nil, Reply{}, err
	}
	return s, r, nil
}

// noteInput records r as the reply to the session's last input, under the
// request id the client named it by, if any (a repeat of the one before
// is then superseded).
func (s *Session) noteInput(r Reply) {
	if last := s.LastInput; last != nil && last.RequestID != "" {
		s.EarlierInputs = append(s.EarlierInputs, last.RequestID)
		if n := len(s.EarlierInputs); n > maxEarlierInputs {
			s.EarlierInputs = slices.Clone(s.EarlierInputs[n-maxEarlierInputs:])
		}
	}
	in := &AppliedInput{RequestID: s.requestID, Reply: r}
	if resultBytes(r.Result) > keptResultBytes {
		in.Reply.Result = nil // the session's document stays small
	}
	if r.Job != nil {
		in.JobID, in.Reply.Job = r.Job.ID, nil
	}
	s.LastInput = in
}

// keptResultBytes bounds the result table a session keeps with its last
// reply, so that a repeat of the input answers with it (as estimated by
// resultBytes). The session's document is read and written at each of
// its inputs; a larger table is not kept, and a client that lost it runs
// the read again.
const keptResultBytes = 256 << 10

// resultBytes estimates the size of r as stored: its texts, and 8 bytes
// for any other value.
func resultBytes(r *connections.Result) int {
	if r == nil {
		return 0
	}
	n := 0
	for _, c := range r.Columns {
		n += len(c) + 8
	}
	for _, row := range r.Rows {
		for _, v := range row {
			if s, ok := v.(string); ok {
				n += len(s)
			}
			n += 8
		}
	}
	return n
}

// replay answers a repeat of the session's last input with its reply.
func (a *Agent) replay(ctx context.Context, s *Session) (*Session, Reply, error) {
	r := s.LastInput.Reply
	if id := s.LastInput.JobID; id != "" {
		j, err := a.store.GetJob(ctx, s.Scope, id)
		if err != nil && !errors.Is(err, ErrJobNotFound) {
			return nil, Reply{}, err
		}
		r.Job = j
	}
	return s, r, nil
}

// input is one user input: free text or a selection.
type input struct{ text, selection string }

// field names the request field the input came in.
func (in input) field() string {
	if in.selection != "" {
		return "selection"
	}
	return "text"
}

// word is the input as one lower-case word or phrase, for matching choices.
func (in input) word() string {
	if in.selection != "" {
		return strings.ToLower(in.selection)
	}
	return strings.ToLower(strings.Trim(in.text, " .!"))
}

// step applies one input to s in its current stage.
func (a *Agent) step(ctx context.Context, s *Session, in input) (Reply, error) {
	switch s.Stage {
	case StageAskJobKind:
		return a.onJobKind(ctx, s, in)
	case StageNeedConnection:
		if in.selection == optChangeJob {
			return a.askJobKind(s, "Which job now?"), nil
		}
		return a.onConnection(ctx, s, in)
	}
	if s.JobKind == JobCompareSQL && s.Stage != StageNeedWriteOrEmail {
		return a.onCompare(ctx, s, in)
	}
	if in.selection != "" && (s.Stage == StageNeedNaturalLanguage || s.Stage == StageNeedUserSQL) {
		// Switching method from the dropdown.
		return a.onMethod(ctx, s, in)
	}
	if in.selection == optChangeJob && (s.Stage == StageAskSQLMethod || s.Stage == StageShowResults || s.Stage == StageNeedWriteOrEmail) {
		return a.askJobKind(s, "Which job now?"), nil
	}
	switch s.Stage {
	case StageAskWriteSchema:
		return a.onWriteSchema(ctx, s, in)
	case StageAskSQLMethod, StageShowResults, StageNeedWriteOrEmail:
		return a.onMethod(ctx, s, in)
	case StageNeedNaturalLanguage:
		if in.text == "" {
			return Reply{}, inputErr("text", "type the question to answer")
		}
		if a.confirms(in.word()) {
			return Reply{Text: "What would you like to know? Ask in plain English."}, nil
		}
		s.Params[paramQuestion] = in.text
		return a.propose(ctx, s, in.text, "", "")
	case StageNeedUserSQL:
		if in.text == "" {
			return Reply{}, inputErr("text", "type the SQL to run")
		}
		return a.proposeUserSQL(s, in.text), nil
	case StageConfirmGeneratedSQL, StageConfirmUserSQL:
		return a.onConfirm(ctx, s, in)
	case StageExecuteSQL:
		return a.onExecuteSQL(s, in)
	case StageNeedTableName, StageAskWriteMode, StageConfirmWrite:
		return a.onWrite(ctx, s, in)
	case StageConfirmEmailQuery, StageNeedEmailQuery, StageNeedEmailRecipients, StageNeedEmailSubject, StageConfirmEmail:
		return a.onEmail(s, in)
	}
	return Reply{}, fmt.Errorf("session %s: unknown stage %q", s.ID, s.Stage)
}

func (a *Agent) useConnection(s *Session, name string) error {
	d, err := a.db(s).Dialect(name)
	if err != nil {
		return err
	}
	s.Params[paramConnection], s.Params[paramDialect] = name, d
	return nil
}

func (a *Agent) askConnection(s *Session, text string) Reply {
	s.Stage, s.PendingSQL = StageNeedConnection, ""
	var opts []Option
	for _, c := range a.db(s).List() {
		opts = append(opts, Option{Value: c.Name, Label: fmt.Sprintf("%s (%s)", c.Name, c.Dialect)})
	}
	if len(opts) == 0 {
		text += " No database connections are configured (SQLAGENT_CONNECTIONS)."
	}
	return Reply{Text: text, Options: opts, Action: ActionFetchConnections}
}

// onConnection takes the connection from the dropdown (or typed as its
// name: no model call either way) and lets the validator go on.
func (a *Agent) onConnection(ctx context.Context, s *Session, in input) (Reply, error) {
	for _, c := range a.db(s).List() {
		if strings.EqualFold(c.Name, in.selection) || (in.selection == "" && strings.EqualFold(c.Name, in.text)) {
			_ = a.useConnection(s, c.Name)
			return a.validate(ctx, s, fmt.Sprintf("Connected to %s.", c.Name))
		}
	}
	if in.selection != "" {
		return Reply{}, inputErr("selection", "no connection named %q; pick one of the options", in.selection)
	}
	return a.askConnection(s, fmt.Sprintf("I don't know a database called %q. Which one should I use?", in.text)), nil
}

var (
	userSQLOption = Option{Value: methodUserSQL, Label: "I'll write my own SQL"}
	methodOptions = []Option{{Value: methodGenerate, Label: "Generate SQL from my question"}, userSQLOption}
)

// startOptions are the choices at ASK_SQL_METHOD: a query, or a
// comparison of two.
// rephraseOptions go with a generated query refused (the model wrote none,
// or one that cannot run): the user rephrases the question as text, or
// takes the way out and writes the SQL.
var rephraseOptions = []Option{userSQLOption}

var startOptions = append(append([]Option{}, methodOptions...), Option{Value: "compare", Label: "Compare two queries"})

func (a *Agent) askMethod(s *Session, prefix string) Reply {
	s.Stage, s.PendingSQL = StageAskSQLMethod, ""
	delete(s.Params, paramJobName)
	return Reply{Text: strings.TrimSpace(prefix + " Should I generate the SQL from a question, or will you write your own? Or compare two queries?"), Options: startOptions}
}

// onMethod handles ASK_SQL_METHOD and the next step after results: a
// choice of method, or (as a shortcut) the question or the SQL itself.
func (a *Agent) onMethod(ctx context.Context, s *Session, in input) (Reply, error) {
	w := in.word()
	switch {
	case (w == methodGenerate || w == "generate sql" || w == "generate it") && s.Params[paramRequest] != "":
		// The router already read what the user asks for.
		q := s.Params[paramRequest]
		delete(s.Params, paramRequest)
		s.JobKind, s.Params[paramMethod], s.Params[paramQuestion] = JobReadSQL, methodGenerate, q
		return a.propose(ctx, s, q, "", "")
	case w == methodGenerate || w == "generate sql" || w == "generate it":
		s.JobKind, s.Params[paramMethod], s.Stage = JobReadSQL, methodGenerate, StageNeedNaturalLanguage
		return Reply{Text: "What would you like to know? Ask in plain English.", Action: ActionAsk}, nil
	case w == methodUserSQL || w == "write my own" || w == "my own" || w == "i'll write my own sql" || w == "own sql":
		s.JobKind, s.Params[paramMethod], s.Stage = JobReadSQL, methodUserSQL, StageNeedUserSQL
		return Reply{Text: "Type the SQL query to run (a single read-only SELECT)."}, nil
	case isCompareWord(w) && s.Params[paramConnection] != "":
		return a.startCompare(s), nil
	case (s.Stage == StageShowResults || s.Stage == StageNeedWriteOrEmail) && (w == "write" || w == "write_data"):
		r, err := a.startWrite(s, in.field())
		if err != nil {
			return Reply{}, err
		}
		return a.validateWrite(ctx, s, r)
	case (s.Stage == StageShowResults || s.Stage == StageNeedWriteOrEmail) && (w == "email" || w == "send_email" || w == "e-mail"):
		return a.startEmail(s)
	case (s.Stage == StageShowResults || s.Stage == StageNeedWriteOrEmail) && (w == "done" || w == "finish" || w == "no"):
		s.Stage, s.PendingSQL = StageDone, ""
		return Reply{Text: "Done. Start a new session for another job."}, nil
	case w == "change_connection":
		return a.askConnection(s, "Which database should I use?"), nil
	case in.selection != "":
		return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
	case a.confirms(w):
		// An acknowledgement ("okay" after a result): nothing was asked,
		// so it is no question for the model and no parameter.
		return a.askNext(s), nil
	case looksLikeSQL(in.text):
		s.Params[paramMethod] = methodUserSQL
		return a.proposeUserSQL(s, in.text), nil
	default:
		s.Params[paramMethod], s.Params[paramQuestion] = methodGenerate, in.text
		return a.propose(ctx, s, in.text, "", "")
	}
}

// looksLikeSQL reports whether text starts like a SQL statement of any kind
// (so a typed DELETE is refused as unsafe SQL rather than sent to the model
// as a question).
func looksLikeSQL(text string) bool {
	f := strings.Fields(strings.ToUpper(strings.TrimLeft(text, "( \n\t")))
	if len(f) == 0 {
		return false
	}
	switch f[0] {
	case "SELECT", "WITH", "VALUES", "INSERT", "UPDATE", "DELETE", "DROP", "CREATE", "ALTER",
		"TRUNCATE", "PRAGMA", "ATTACH", "DETACH", "REPLACE", "MERGE", "GRANT", "REVOKE", "VACUUM", "EXPLAIN":
		return true
	}
	return false
}

// propose asks the model for SQL, checks it and asks for confirmation. A
// proposal that fails the safety check is refused and never offered.
func (a *Agent) propose(ctx context.Context, s *Session, question, previous, feedback string) (Reply, error) {
	sql, refusal, err := a.generate(ctx, s, s.Params[paramConnection], s.Params[paramDialect], question, previous, feedback)
	if err != nil {
		return Reply{}, err
	}
	if refusal != "" {
		s.Stage, s.PendingSQL = StageNeedNaturalLanguage, ""
		return Reply{Text: refusal, Options: rephraseOptions}, nil
	}
	s.Stage, s.PendingSQL = StageConfirmGeneratedSQL, sql
	delete(s.Params, paramJobName) // named for the SQL it replaces
	r := confirmReply(strings.TrimSpace("Here is the SQL I would run. Shall I run it? Reply yes to run it, or tell me what to change. "+s.SchemaNote), sql)
	r.SchemaShown, r.SchemaNote = s.SchemaShown, s.SchemaNote
	return r, nil
}

// generate asks the model for a query on connection conn, grounded on its
// live schema, and checks it: the checked SQL, or a refusal to tell the
// user when the model wrote none or wrote one that fails the check.
// ErrUnavailable when the schema or the model cannot be reached.
func (a *Agent) generate(ctx context.Context, s *Session, conn, dialect, question, previous, feedback string) (sql, refusal string, err error) {
	schema, err := a.db(s).Schema(ctx, conn, connections.SchemaRequest{Question: question, Hints: a.hints(s.Scope, question)})
	if err != nil {
		return "", "", fmt.Errorf("%w: read the schema of %s: %w", ErrUnavailable, conn, err)
	}
	s.SchemaShown, s.SchemaNote = schema.Shown, schema.Note()
	sql, err = a.gen.Generate(ctx, sqlgen.Request{
		Dialect: dialect, Schema: schema.Text, Question: question,
		PreviousSQL: previous, Feedback: feedback,
	})
	switch {
	case errors.Is(err, sqlgen.ErrNoSQL):
		return "", fmt.Sprintf("I couldn't write a query for that (%v). Try rephrasing the question.", err), nil
	case err != nil:
		return "", "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	checked, err := safety.Check(sql, safety.Dialect(dialect))
	if err != nil {
		return "", fmt.Sprintf("I won't run the query the model wrote: %s. Only read-only SELECT queries are allowed; try rephrasing the question.", reason(err)), nil
	}
	return checked, "", nil
}

// hints searches the knowledge base of scope for question, when one is
// configured, for Schema to call only when it must pick tables: a search
// that fails or runs past KnowledgeTimeout is logged and gives no hints,
// so the job goes on without them.
func (a *Agent) hints(scope Scope, question string) func(context.Context) []string {
	if a.opts.Knowledge == nil {
		return nil
	}
	return func(ctx context.Context) []string {
		ctx, cancel := context.WithTimeout(ctx, a.opts.KnowledgeTimeout)
		defer cancel()
		texts, err := a.opts.Knowledge.Search(ctx, scope, question)
		if err != nil {
			a.opts.Logger.WarnContext(ctx, "knowledge base search failed; the tables are picked without it",
				"tenant", scope.TenantID, "project", scope.ProjectID, "error", err)
			return nil
		}
		return texts
	}
}

// proposeUserSQL checks the user's SQL and asks for confirmation, or refuses it.
func (a *Agent) proposeUserSQL(s *Session, sql string) Reply {
	checked, err := safety.Check(sql, safety.Dialect(s.Params[paramDialect]))
	if err != nil {
		s.Stage, s.PendingSQL = StageNeedUserSQL, ""
		return Reply{Text: fmt.Sprintf("I can't run that: %s. Only a single read-only SELECT is allowed; send another query.", reason(err))}
	}
	s.Stage, s.PendingSQL = StageConfirmUserSQL, checked
	delete(s.Params, paramJobName) // named for the SQL it replaces
	return confirmReply("I will run this SQL. Shall I run it? Reply yes to run it, or send a corrected query.", checked)
}

func reason(err error) string {
	var se *safety.Error
	if errors.As(err, &se) {
		return se.Reason
	}
	return err.Error()
}

var confirmOptions = []Option{{Value: "confirm", Label: "Run it"}, {Value: "cancel", Label: "Cancel"}}

func confirmReply(text, sql string) Reply {
	return Reply{Text: text, Options: confirmOptions, SQLToConfirm: sql}
}

// DefaultConfirmationWords are the inputs that confirm a pending action
// and that are never taken as a parameter (a table name, a subject, a
// question) when nothing was asked; Options.ConfirmationWords replaces
// them.
var DefaultConfirmationWords = []string{
	"confirm", "yes", "y", "ok", "okay", "sure", "correct", "run", "run it", "yes, run it", "go", "go ahead", "execute",
	"yes please", "yep", "yeah", "looks good", "lgtm", "do it",
}

// confirms reports whether w (input.word) is a confirmation word; the
// value of the "confirm" option always is.
func (a *Agent) confirms(w string) bool { return w == "confirm" || a.confirmWords[w] }

// cancelWords are inputs that drop a pending action.
var cancelWords = map[string]bool{"cancel": true, "no": true, "nope": true, "stop": true, "abort": true}

// onConfirm runs the pending SQL on confirmation; cancel goes back to the
// method choice; anything else is a correction.
func (a *Agent) onConfirm(ctx context.Context, s *Session, in input) (Reply, error) {
	w := in.word()
	switch {
	case a.confirms(w) && s.Params[paramJobName] != "":
		// Named already, for this SQL: a run that was interrupted or
		// failed, confirmed again.
		return a.runConfirmed(s), nil
	case a.confirms(w):
		if _, err := safety.Check(s.PendingSQL, safety.Dialect(s.Params[paramDialect])); err != nil {
			return a.askMethod(s, fmt.Sprintf("I can't run the pending SQL: %s.", reason(err))), nil
		}
		return a.askJobName(s), nil
	case cancelWords[w]:
		return a.askMethod(s, "Cancelled; nothing ran."), nil
	case in.selection != "":
		return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
	case s.Stage == StageConfirmGeneratedSQL && !looksLikeSQL(in.text):
		return a.propose(ctx, s, s.Params[paramQuestion], s.PendingSQL, in.text)
	default:
		// A user-SQL correction, or SQL typed over a generated proposal.
		s.Params[paramMethod] = methodUserSQL
		return a.proposeUserSQL(s, in.text), nil
	}
}

// runQuery runs the confirmed read SQL of s, in its confirmation stage, and
// moves s on with the result.
func (a *Agent) runQuery(ctx context.Context, s *Session) (Reply, error) {
	sql, conn := s.PendingSQL, s.Params[paramConnection]
	res, err := a.db(s).Query(ctx, conn, sql, a.opts.RowLimit, a.opts.QueryTimeout)
	var refused *connections.RefusedError
	if err != nil && (errors.As(err, &refused) || errors.Is(err, connections.ErrQuery)) {
		// Back to the confirmation, for a correction.
		s.Stage = confirmStageOf(s)
		delete(s.Params, paramConfirmStage)
	}
	switch {
	case errors.As(err, &refused):
		// The database's own check refused it: nothing ran.
		if s.Stage == StageConfirmGeneratedSQL {
			s.Stage, s.PendingSQL = StageNeedNaturalLanguage, ""
			return Reply{Text: fmt.Sprintf("The database won't run the query I wrote: %s. Only a read-only query that changes nothing can run; try rephrasing the question.", refused.Reason), Options: rephraseOptions}, nil
		}
		s.Stage, s.PendingSQL = StageNeedUserSQL, ""
		return Reply{Text: fmt.Sprintf("I can't run that: %s. Only a read-only query that changes nothing can run; send another query.", refused.Reason)}, nil
	case errors.Is(err, connections.ErrQuery):
		return confirmReply(fmt.Sprintf("The database refused the query: %v. Tell me what to change, or send corrected SQL.",
			strings.TrimPrefix(err.Error(), connections.ErrQuery.Error()+": ")), sql), nil
	case err != nil:
		return Reply{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	delete(s.Params, paramConfirmStage)
	s.Params[paramExecutedSQL], s.Params[paramRowCount] = sql, fmt.Sprint(len(res.Rows))
	s.ran = &ranJob{sql: sql, rows: int64(len(res.Rows))}
	s.Stage, s.PendingSQL = StageShowResults, ""
	text := fmt.Sprintf("The query returned %d rows.", len(res.Rows))
	switch {
	case res.TooLarge && len(res.Rows) == 0:
		text = fmt.Sprintf("The query's first row alone passes the %d MiB a result holds; select fewer or shorter values.", connections.MaxResultBytes>>20)
	case res.TooLarge:
		text = fmt.Sprintf("The query's values pass the %d MiB a result holds; here are its first %d rows.", connections.MaxResultBytes>>20, len(res.Rows))
	case res.Truncated:
		text = fmt.Sprintf("The query returned more than %d rows; here are the first %d.", a.opts.RowLimit, len(res.Rows))
	}
	shown, cut, full := fitReply(res)
	if full {
		text = fmt.Sprintf("The result is larger than a reply holds (%d MiB of values); here are its first %d rows.",
			replyResultBytes>>20, len(shown.Rows))
	}
	if cut > 0 {
		text += fmt.Sprintf(" %d values longer than %d KiB are shown cut.", cut, replyValueBytes>>10)
	}
	return Reply{Text: text + " " + whatNext, Options: resultOptions, Result: shown}, nil
}

const whatNext = "What next? Ask another question, write the result to a table, or finish."

var resultOptions = []Option{
	{Value: methodGenerate, Label: "Ask another question"},
	{Value: methodUserSQL, Label: "Run my own SQL"},
	{Value: "write", Label: "Write the result to a table"},
	{Value: "email", Label: "E-mail a written table"},
	{Value: "compare", Label: "Compare two queries"},
	{Value: "done", Label: "Finish"},
}

// askNext asks again what the stage of s asks, changing nothing: the
// answer to an acknowledgement.
func (a *Agent) askNext(s *Session) Reply {
	switch s.Stage {
	case StageShowResults:
		return Reply{Text: whatNext, Options: resultOptions}
	case StageNeedWriteOrEmail:
		return Reply{Text: "E-mail the table, run another query, or finish?", Options: afterWriteOptions}
	}
	return Reply{Text: "Should I generate the SQL from a question, or will you write your own? Or compare two queries?", Options: startOptions}
}
