package session

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/sqlgen"
)

// Router and the parameter validator (the seed's). The router reads free
// text once, with a model call constrained by a JSON schema, for the job
// kind and the parameters the text names; a job kind picked from a
// dropdown skips it. The validator then looks at what is still missing and
// answers with one of the seed's actions: FETCH_CONNECTIONS or
// FETCH_SCHEMAS (a dropdown of typed options, never a question for the
// model), ASK (one plain question for the one missing parameter) or TOOL
// (all present: the job goes on). Dropdown selections are assigned
// directly, without a model call.

// Stage of the router.
const StageAskJobKind Stage = "ASK_JOB_KIND"

// Actions of the parameter validator, carried by Reply.Action.
const (
	ActionAsk              = "ASK"
	ActionFetchConnections = "FETCH_CONNECTIONS"
	ActionFetchSchemas     = "FETCH_SCHEMAS"
	ActionAskJobKind       = "ASK_JOB_KIND"
	ActionTool             = "TOOL"
	ActionFetchTables      = "FETCH_TABLES"
)

// paramRequest is what the user asked for in the text the router read
// ("read data from customers"): the question of a READ_SQL that is
// generated, used once.
const paramRequest = "request"

// optChangeJob is the selection that goes back to the router.
const optChangeJob = "change_job"

// Router reads the job kind and parameters out of free text
// (sqlgen.Generator). It returns sqlgen.ErrNoJobKind when the model's
// answer names no job kind it knows (the agent then asks), other errors
// when the model cannot be reached.
type Router interface {
	Route(ctx context.Context, text string, connections []string) (sqlgen.Routed, error)
}

// jobKindOptions are the router's dropdown.
var jobKindOptions = []Option{
	{Value: JobReadSQL, Label: "Read data (run a query)"},
	{Value: JobWriteData, Label: "Write a query's result to a table"},
	{Value: JobSendEmail, Label: "E-mail a written table"},
	{Value: JobCompareSQL, Label: "Compare two queries"},
}

// jobContextParams are what already ran in the session, kept when the job
// kind changes so that WRITE_DATA and SEND_EMAIL have something to work
// on; everything else gathered is cleared.
var jobContextParams = []string{paramExecutedSQL, paramRowCount, paramWrittenTable, paramWrittenSchema, paramWrittenDialect}

// StartRequest is how a session starts: a connection, the user's first
// words, a job kind picked from the dropdown; all optional.
type StartRequest struct {
	Connection string
	Text       string
	JobKind    string
}

// Start starts a session. A JobKind (one of the Job constants, else an
// InputError for "job_kind") skips the router; Text without one is routed
// with one model call; with neither, it is a READ_SQL (see Create). A
// Connection must be one the scope's tenant may use, else
// ErrUnknownConnection, the same for a name configured for another tenant
// as for one nobody configured.
func (a *Agent) Start(ctx context.Context, scope Scope, req StartRequest) (*Session, Reply, error) {
	req.Text, req.JobKind = strings.TrimSpace(req.Text), strings.TrimSpace(req.JobKind)
	if req.JobKind != "" && !knownJobKind(req.JobKind) {
		return nil, Reply{}, inputErr("job_kind", "%q is not a job kind (%s)", req.JobKind, jobKindList())
	}
	now := a.opts.Now().UTC()
	s := &Session{ID: a.opts.NewID(), Scope: scope, Params: map[string]string{}, Created: now, Updated: now}
	ctx = withSession(ctx, s)
	prefix := ""
	if c := strings.TrimSpace(req.Connection); c != "" {
		if err := a.useConnection(s, c); err != nil {
			return nil, Reply{}, fmt.Errorf("%w: %q", ErrUnknownConnection, c)
		}
		prefix = fmt.Sprintf("Connected to %s.", c)
	}
	var r Reply
	var err error
	switch {
	case req.JobKind != "":
		s.JobKind = req.JobKind
		if req.Text != "" {
			s.Params[paramRequest] = req.Text
		}
		r, err = a.validate(ctx, s, prefix)
	case req.Text != "":
		r, err = a.route(ctx, s, req.Text)
	default:
		s.JobKind = JobReadSQL
		r, err = a.validate(ctx, s, prefix)
	}
	if err != nil {
		return nil, Reply{}, err
	}
	if req.Text != "" {
		s.Turns = append(s.Turns, Turn{Role: roleUser, Text: req.Text, Time: now})
	}
	s.Turns = append(s.Turns, Turn{Role: roleAgent, Text: r.Text, Time: now})
	s.noteInput(r)
	if err := a.store.Create(ctx, s); err != nil {
		return nil, Reply{}, err
	}
	return s, r, nil
}

func knownJobKind(k string) bool {
	for _, o := range jobKindOptions {
		if o.Value == k {
			return true
		}
	}
	return false
}

func jobKindList() string {
	var names []string
	for _, o := range jobKindOptions {
		names = append(names, o.Value)
	}
	return strings.Join(names, ", ")
}

// onJobKind handles ASK_JOB_KIND: a job kind from the dropdown, or free
// text for the router.
func (a *Agent) onJobKind(ctx context.Context, s *Session, in input) (Reply, error) {
	if in.selection != "" {
		if !knownJobKind(in.selection) {
			return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
		}
		a.switchJob(s, in.selection)
		return a.validate(ctx, s, "")
	}
	return a.route(ctx, s, in.text)
}

// route asks the router about text and moves s to the job it names, or
// asks which job when it names none.
func (a *Agent) route(ctx context.Context, s *Session, text string) (Reply, error) {
	if a.opts.Router == nil {
		return a.askJobKind(s, "What would you like to do?"), nil
	}
	var names []string
	for _, c := range a.db(s).List() {
		names = append(names, c.Name)
	}
	got, err := a.opts.Router.Route(ctx, text, names)
	switch {
	case errors.Is(err, sqlgen.ErrNoJobKind) || (err == nil && !knownJobKind(got.JobKind)):
		return a.askJobKind(s, "I couldn't tell what kind of job that is. What would you like to do?"), nil
	case err != nil:
		return Reply{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	a.switchJob(s, got.JobKind)
	prefix := ""
	if got.Connection != "" && s.Params[paramConnection] == "" {
		// A name the model made up is dropped; the dropdown asks.
		if a.useConnection(s, got.Connection) == nil {
			prefix = fmt.Sprintf("Connected to %s.", got.Connection)
		}
	}
	if q := strings.TrimSpace(got.Question); q != "" && got.JobKind == JobReadSQL && !a.confirms(strings.ToLower(strings.Trim(q, " .!"))) {
		s.Params[paramRequest] = q
	}
	return a.validate(ctx, s, prefix)
}

// switchJob makes kind the job of s; a different kind clears the
// parameters gathered for the other one (see jobContextParams).
func (a *Agent) switchJob(s *Session, kind string) {
	if s.JobKind == kind {
		return
	}
	kept := map[string]string{}
	for _, k := range jobContextParams {
		if v, ok := s.Params[k]; ok {
			kept[k] = v
		}
	}
	if len(kept) > 0 {
		// What ran, ran on this connection.
		kept[paramConnection], kept[paramDialect] = s.Params[paramConnection], s.Params[paramDialect]
	}
	s.JobKind, s.Params, s.PendingSQL = kind, kept, ""
}

func (a *Agent) askJobKind(s *Session, text string) Reply {
	s.Stage, s.PendingSQL = StageAskJobKind, ""
	return Reply{Text: text + " Read data, write a query's result to a table, e-mail a written table, or compare two queries?",
		Options: jobKindOptions, Action: ActionAskJobKind}
}

// validate is the parameter validator: it finds the first parameter the
// job of s still lacks and asks for it (a dropdown when there is one), or
// starts the job when none is missing. prefix opens the reply.
func (a *Agent) validate(ctx context.Context, s *Session, prefix string) (Reply, error) {
	prefix = strings.TrimSpace(prefix + " ")
	if s.JobKind == "" {
		return a.askJobKind(s, strings.TrimSpace(prefix+" What would you like to do?")), nil
	}
	if s.JobKind == JobSendEmail && s.Params[paramWrittenTable] == "" {
		// No connection to ask for: the e-mail goes out of the table
		// written, and none was.
		s.JobKind = ""
		return a.askJobKind(s, strings.TrimSpace(prefix+" I can only e-mail a table written in this session, and none is yet: read data and write it to a table first.")), nil
	}
	if s.Params[paramConnection] == "" {
		return a.askConnection(s, strings.TrimSpace(prefix+" Which database should I use?")), nil
	}
	switch s.JobKind {
	case JobCompareSQL:
		r := a.startCompare(s)
		r.Text, r.Action = strings.TrimSpace(prefix+" "+r.Text), ActionTool
		return r, nil
	case JobSendEmail:
		r, err := a.startEmail(s)
		r.Action = ActionTool
		return r, err
	case JobWriteData:
		if s.Params[paramExecutedSQL] != "" {
			r, err := a.startWrite(s, "selection")
			if err != nil {
				return Reply{}, err
			}
			return a.validateWrite(ctx, s, r)
		}
		// WRITE_DATA writes a query's result: the query comes first.
		r := a.askMethod(s, strings.TrimSpace(prefix+" To write data I first need the query whose rows to write."))
		r.Action = ActionAsk
		return r, nil
	}
	r := a.askMethod(s, prefix)
	r.Action = ActionAsk
	return r, nil
}

// validateWrite is the validator's step for WRITE_DATA's target schema,
// after startWrite: one schema is taken without asking; more are a
// dropdown (FETCH_SCHEMAS); then the table (askTable).
func (a *Agent) validateWrite(ctx context.Context, s *Session, r Reply) (Reply, error) {
	if s.Params[paramWriteSchema] != "" {
		return a.askTable(ctx, s, r.Text), nil
	}
	schemas, err := a.db(s).Schemas(ctx, s.Params[paramConnection])
	if err != nil {
		return Reply{}, fmt.Errorf("%w: list the schemas of %s: %w", ErrUnavailable, s.Params[paramConnection], err)
	}
	if len(schemas) <= 1 {
		return a.askTable(ctx, s, r.Text), nil
	}
	s.Stage = StageAskWriteSchema
	var opts []Option
	for _, sc := range schemas {
		opts = append(opts, Option{Value: sc, Label: sc})
	}
	return Reply{Text: fmt.Sprintf("Which schema of %s should the table go to?", s.Params[paramConnection]), Options: opts, Action: ActionFetchSchemas}, nil
}

// onWriteSchema takes WRITE_DATA's schema from the dropdown (or typed as
// one of its entries) and asks for the table name.
func (a *Agent) onWriteSchema(ctx context.Context, s *Session, in input) (Reply, error) {
	schemas, err := a.db(s).Schemas(ctx, s.Params[paramConnection])
	if err != nil {
		return Reply{}, fmt.Errorf("%w: list the schemas of %s: %w", ErrUnavailable, s.Params[paramConnection], err)
	}
	want := in.selection
	if want == "" {
		want = strings.TrimSpace(in.text)
	}
	for _, sc := range schemas {
		if sc == want || (in.selection == "" && strings.EqualFold(sc, want)) {
			s.Params[paramWriteSchema], s.Stage = sc, StageNeedTableName
			return a.askTable(ctx, s, fmt.Sprintf("The table goes to %s. What should it be called?", sc)), nil
		}
	}
	if in.selection != "" {
		return Reply{}, inputErr("selection", "%q is not a schema of %s; pick one of the options", in.selection, s.Params[paramConnection])
	}
	opts := make([]Option, 0, len(schemas))
	for _, sc := range schemas {
		opts = append(opts, Option{Value: sc, Label: sc})
	}
	return Reply{Text: fmt.Sprintf("%s has no schema %q. Which one should the table go to?", s.Params[paramConnection], want), Options: opts, Action: ActionFetchSchemas}, nil
}

// maxTableOptions bounds the table dropdown; a table past it can still be
// typed.
const maxTableOptions = 200

// writeTargets are the existing tables of WRITE_DATA's target schema a
// result may replace or refill, as options: base tables whose names a
// table may have (connections.ValidTableName). None when they cannot be
// listed now: the name is then only typed.
func (a *Agent) writeTargets(ctx context.Context, s *Session) []Option {
	tables, err := a.db(s).Tables(ctx, s.Params[paramConnection], s.Params[paramWriteSchema])
	if err != nil {
		return nil
	}
	var opts []Option
	for _, t := range tables {
		if connections.ValidTableName(t) == nil && len(opts) < maxTableOptions {
			opts = append(opts, Option{Value: t, Label: t + " (exists: replace or refill it)"})
		}
	}
	return opts
}

// askTable asks for WRITE_DATA's table at NEED_TABLE_NAME: the existing
// tables of the target schema as a dropdown (FETCH_TABLES), or, when
// there are none, a plain question (ASK); a new name is typed either way.
func (a *Agent) askTable(ctx context.Context, s *Session, text string) Reply {
	s.Stage = StageNeedTableName
	opts := a.writeTargets(ctx, s)
	if len(opts) == 0 {
		return Reply{Text: text, Action: ActionAsk}
	}
	return Reply{Text: text + " Type a new name, or pick an existing table to replace or refill.", Options: opts, Action: ActionFetchTables}
}
