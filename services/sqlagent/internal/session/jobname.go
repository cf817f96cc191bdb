package session

import (
	"fmt"
	"strings"

	"github.com/agentmesh/agentmesh/libs/utf8x"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/safety"
)

// READ_SQL's EXECUTE_SQL stage (the seed's): a confirmed read asks for its
// job name before it runs, "Great! Executing SQL… What should this job be
// called?". A name typed, or the default offered, runs the SQL; a
// confirmation word ("okay" to "Executing SQL…") is an acknowledgement,
// never the name: the question is asked again, nothing is set and no model
// is called. The run starts from EXECUTE_SQL, so an interrupted run or one
// the database could not serve comes back there, where a confirmation
// runs it again under the name already given; a query the database
// refuses or fails goes back to its confirmation, for a correction. The
// name belongs to the pending SQL: a new proposal forgets it, and a
// confirmation of the same SQL again runs it under that name.

// StageExecuteSQL is READ_SQL's job-name stage.
const StageExecuteSQL Stage = "EXECUTE_SQL"

const (
	// paramJobName is READ_SQL's job name.
	paramJobName = "job_name"
	// paramConfirmStage is the confirmation stage EXECUTE_SQL came from,
	// where the run returns when it is refused or fails.
	paramConfirmStage = "confirm_stage"
	// optDefaultName picks the default job name offered.
	optDefaultName = "default"
)

// askJobName moves s, at a confirmation of read SQL, to EXECUTE_SQL.
func (a *Agent) askJobName(s *Session) Reply {
	s.Params[paramConfirmStage], s.Stage = string(s.Stage), StageExecuteSQL
	return a.jobNameQuestion(s, "Great! Executing SQL…")
}

func (a *Agent) jobNameQuestion(s *Session, prefix string) Reply {
	return Reply{
		Text: strings.TrimSpace(prefix + " What should this job be called? Type a name, or pick the default."),
		Options: []Option{
			{Value: optDefaultName, Label: defaultReadJobName(s)},
			{Value: "cancel", Label: "Cancel; run nothing"},
		},
		Action: ActionAsk,
	}
}

// defaultReadJobName names a read after its question (cut to fit), or
// after its connection when the SQL was the user's.
func defaultReadJobName(s *Session) string {
	q := strings.Join(strings.Fields(s.Params[paramQuestion]), " ")
	if s.Params[paramConfirmStage] != string(StageConfirmGeneratedSQL) || q == "" {
		return "query on " + s.Params[paramConnection]
	}
	if len(q) > maxJobName {
		q = utf8x.Prefix(q, maxJobName-3) + "..."
	}
	return q
}

// onExecuteSQL handles EXECUTE_SQL: the job name, then the run.
func (a *Agent) onExecuteSQL(s *Session, in input) (Reply, error) {
	w, name := in.word(), strings.TrimSpace(in.text)
	switch {
	case in.selection == optDefaultName:
		name = defaultReadJobName(s)
	case cancelWords[w]:
		delete(s.Params, paramConfirmStage)
		return a.askMethod(s, "Cancelled; nothing ran."), nil
	case s.Params[paramJobName] != "" && a.confirms(w):
		// Back here after an interrupted run: run it again, as named.
		return a.runConfirmed(s), nil
	case in.selection != "":
		return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
	case a.confirms(w):
		// "okay" to "Executing SQL…": nothing was answered.
		return a.jobNameQuestion(s, ""), nil
	}
	if looksLikeSQL(name) {
		// Not a name: SQL meant to replace the confirmed query, which
		// must not run in its place unnoticed.
		return a.jobNameQuestion(s, "That looks like SQL, not a name; cancel to change the query."), nil
	}
	if name == "" || len(name) > maxJobName || strings.ContainsAny(name, "\r\n") {
		return a.jobNameQuestion(s, fmt.Sprintf("A job name is one line of at most %d characters.", maxJobName)), nil
	}
	s.Params[paramJobName] = name
	return a.runConfirmed(s), nil
}

// confirmStageOf is the confirmation a read of s came from: where a query
// the database refuses or fails returns.
func confirmStageOf(s *Session) Stage {
	switch {
	case s.Stage != StageExecuteSQL:
		return s.Stage
	case s.Params[paramConfirmStage] == string(StageConfirmGeneratedSQL):
		return StageConfirmGeneratedSQL
	}
	return StageConfirmUserSQL
}

// runConfirmed starts the execution of the pending read SQL of s, in its
// confirmation stage, checked again: it came out of the store, and the
// check is cheap.
func (a *Agent) runConfirmed(s *Session) Reply {
	if _, err := safety.Check(s.PendingSQL, safety.Dialect(s.Params[paramDialect])); err != nil {
		return a.askMethod(s, fmt.Sprintf("I can't run the pending SQL: %s.", reason(err)))
	}
	return a.beginExecution(s)
}
