package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/safety"
)

// startWrite begins WRITE_DATA for the query that just ran, unless the
// connection takes no writes (an InputError for field; nothing changes).
func (a *Agent) startWrite(s *Session, field string) (Reply, error) {
	if ok, err := a.db(s).Writable(s.Params[paramConnection]); err != nil || !ok {
		return Reply{}, inputErr(field, "connection %s is read-only: results can only be written to a connection configured with a write DSN", s.Params[paramConnection])
	}
	delete(s.Params, paramWriteSchema)
	s.JobKind, s.Stage = JobWriteData, StageNeedTableName
	return Reply{Text: fmt.Sprintf("I'll write the result of the last query to a new table in %s. What should the table be called?", s.Params[paramConnection])}, nil
}

var writeModeOptions = []Option{
	{Value: string(connections.WriteCreate), Label: "Create it; fail if it exists"},
	{Value: string(connections.WriteDrop), Label: "Drop the table if it exists, then create it"},
	{Value: string(connections.WriteTruncate), Label: "Empty the table if it exists, then fill it"},
}

// onWrite walks NEED_TABLE_NAME → ASK_WRITE_MODE → CONFIRM_WRITE → write.
func (a *Agent) onWrite(ctx context.Context, s *Session, in input) (Reply, error) {
	switch s.Stage {
	case StageNeedTableName:
		name := strings.TrimSpace(in.text)
		if in.selection != "" {
			// From the table dropdown, exactly as offered: no model call.
			if !slices.ContainsFunc(a.writeTargets(ctx, s), func(o Option) bool { return o.Value == in.selection }) {
				return Reply{}, inputErr("selection", "%q is not one of the tables offered", in.selection)
			}
			s.Params[paramTable], s.Stage = in.selection, StageAskWriteMode
			return Reply{Text: fmt.Sprintf("%s exists: should I drop and recreate it, or empty it and fill it?", in.selection), Options: writeModeOptions}, nil
		}
		if a.confirms(in.word()) {
			return Reply{Text: fmt.Sprintf("%q is not a table name. What should the table be called?", name)}, nil
		}
		if err := connections.ValidTableName(name); err != nil {
			return Reply{Text: fmt.Sprintf("%v. What should the table be called?", err)}, nil
		}
		s.Params[paramTable], s.Stage = name, StageAskWriteMode
		return Reply{Text: fmt.Sprintf("If %s already exists, should I drop it or empty it?", name), Options: writeModeOptions}, nil
	case StageAskWriteMode:
		w := in.word()
		for _, o := range writeModeOptions {
			if w == o.Value {
				s.Params[paramWriteMode], s.Stage = o.Value, StageConfirmWrite
				return Reply{
					Text:    fmt.Sprintf("I will write the result of this query to %s (%s). Shall I go ahead?", s.Params[paramTable], strings.ToLower(o.Label)),
					Options: confirmOptions, SQLToConfirm: s.Params[paramExecutedSQL],
				}, nil
			}
		}
		if in.selection != "" {
			return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
		}
		return Reply{Text: "Please choose create, drop or truncate.", Options: writeModeOptions}, nil
	default: // StageConfirmWrite
		w := in.word()
		switch {
		case cancelWords[w]:
			s.JobKind = JobReadSQL
			return a.askMethod(s, "Cancelled; nothing was written."), nil
		case !a.confirms(w):
			return Reply{Text: "Reply yes to write the table, or cancel.", Options: confirmOptions, SQLToConfirm: s.Params[paramExecutedSQL]}, nil
		}
		if _, err := safety.Check(s.Params[paramExecutedSQL], safety.Dialect(s.Params[paramDialect])); err != nil {
			return a.askMethod(s, fmt.Sprintf("I can't use that query: %s.", reason(err))), nil
		}
		return a.beginExecution(s), nil
	}
}

// runWrite writes the result of the confirmed query of s to its table, in
// CONFIRM_WRITE, and moves s on.
func (a *Agent) runWrite(ctx context.Context, s *Session) (Reply, error) {
	n, err := a.db(s).WriteTableIn(ctx, s.Params[paramConnection], s.Params[paramExecutedSQL], s.Params[paramWriteSchema], s.Params[paramTable],
		connections.WriteMode(s.Params[paramWriteMode]), a.opts.QueryTimeout)
	var refused *connections.RefusedError
	switch {
	case errors.As(err, &refused):
		s.JobKind = JobReadSQL
		return a.askMethod(s, fmt.Sprintf("I can't write that result: %s. Nothing was written.", refused.Reason)), nil
	case errors.Is(err, connections.ErrQuery):
		s.Stage = StageNeedTableName
		return Reply{Text: fmt.Sprintf("Writing failed: %v. Give another table name, or the same one to try again.",
			strings.TrimPrefix(err.Error(), connections.ErrQuery.Error()+": "))}, nil
	case err != nil:
		return Reply{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	s.Params[paramRowCount] = fmt.Sprint(n)
	s.ran = &ranJob{sql: s.Params[paramExecutedSQL], rows: n}
	// Where it went, for SEND_EMAIL; a schema that cannot be read now
	// only costs the e-mail its default query, so it is asked for
	// without failing the recorded write.
	schema, err := s.Params[paramWriteSchema], error(nil)
	if schema == "" {
		schema, err = a.db(s).CurrentSchema(ctx, s.Params[paramConnection])
	}
	if err != nil {
		return a.afterWriteNoEmail(s, fmt.Sprintf("Wrote %d rows to %s.", n, s.Params[paramTable])), nil
	}
	s.Params[paramWrittenTable], s.Params[paramWrittenSchema], s.Params[paramWrittenDialect] = s.Params[paramTable], schema, s.Params[paramDialect]
	return a.afterWrite(s, fmt.Sprintf("Wrote %d rows to %s.", n, s.Params[paramTable])), nil
}
