package session

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"html"
	"strings"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/mailer"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/safety"
)

// SEND_EMAIL: the result of a query over a table that WRITE_DATA wrote,
// mailed as CSV.
//
//	NEED_WRITE_OR_EMAIL --email--> CONFIRM_EMAIL_QUERY (SELECT * FROM the written table)
//	                               | own query --> NEED_EMAIL_QUERY (checked like any read)
//	--> NEED_EMAIL_RECIPIENTS --> NEED_EMAIL_SUBJECT --> CONFIRM_EMAIL --yes--> (EXECUTING) --> NEED_WRITE_OR_EMAIL
//
// The query runs like a read (both locks, read-only, the e-mail row cap);
// the message goes out once per confirmation (the execution claim of the
// package doc).

// Mailer sends a message; nil in Options means e-mail is not configured.
type Mailer interface {
	Send(ctx context.Context, m mailer.Message) error
}

// maxSubject bounds an e-mail subject, in bytes.
const maxSubject = 200

var emailQueryOptions = []Option{
	{Value: "confirm", Label: "Send the whole table"},
	{Value: methodUserSQL, Label: "I'll write the query"},
	{Value: "cancel", Label: "Cancel"},
}

// startEmail begins SEND_EMAIL from NEED_WRITE_OR_EMAIL or SHOW_RESULTS.
// Nothing changes when no table was written in this session
// (ErrNothingWritten) or e-mail is not configured (ErrEmailOff).
func (a *Agent) startEmail(s *Session) (Reply, error) {
	if s.Params[paramWrittenTable] == "" {
		return Reply{}, ErrNothingWritten
	}
	if a.opts.Mailer == nil {
		return Reply{}, ErrEmailOff
	}
	dialect := s.Params[paramWrittenDialect]
	sql := "SELECT * FROM " + connections.QuoteIdent(dialect, s.Params[paramWrittenSchema]) + "." + connections.QuoteIdent(dialect, s.Params[paramWrittenTable])
	s.JobKind, s.Stage, s.PendingSQL = JobSendEmail, StageConfirmEmailQuery, sql
	return Reply{
		Text:         fmt.Sprintf("I'll e-mail the result of this query over %s, as a CSV file. Use it, or write your own query?", s.Params[paramWrittenTable]),
		Options:      emailQueryOptions,
		SQLToConfirm: sql,
	}, nil
}

// onEmail walks the SEND_EMAIL stages before the confirmation.
func (a *Agent) onEmail(s *Session, in input) (Reply, error) {
	w := in.word()
	switch s.Stage {
	case StageConfirmEmailQuery:
		switch {
		case a.confirms(w):
			return a.useEmailQuery(s, s.PendingSQL), nil
		case w == methodUserSQL || w == "own" || w == "my own" || w == "write my own":
			s.Stage, s.PendingSQL = StageNeedEmailQuery, ""
			return Reply{Text: "Type the query whose result to send (a single read-only SELECT)."}, nil
		case cancelWords[w]:
			return a.afterWrite(s, "Cancelled; nothing was sent."), nil
		case in.selection != "":
			return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
		case looksLikeSQL(in.text):
			return a.useEmailQuery(s, in.text), nil
		}
		return Reply{Text: "Reply yes to send the whole table, or type your own query.", Options: emailQueryOptions, SQLToConfirm: s.PendingSQL}, nil
	case StageNeedEmailQuery:
		if in.selection != "" {
			return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
		}
		return a.useEmailQuery(s, in.text), nil
	case StageNeedEmailRecipients:
		if in.selection != "" {
			return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
		}
		to, err := mailer.ParseRecipients(in.text)
		if err != nil {
			return Reply{Text: fmt.Sprintf("%v. Who should get the e-mail? Give one or more addresses, separated by commas.", err)}, nil
		}
		s.Params[paramRecipients], s.Stage = strings.Join(to, ", "), StageNeedEmailSubject
		return Reply{Text: "What should the subject be?", Options: []Option{{Value: "default", Label: a.defaultSubject(s)}}}, nil
	case StageNeedEmailSubject:
		subject := strings.TrimSpace(in.text)
		if in.selection == "default" {
			subject = a.defaultSubject(s)
		} else if in.selection != "" {
			return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
		}
		if a.confirms(in.word()) && in.selection == "" {
			return Reply{Text: fmt.Sprintf("%q is not a subject. What should the subject be?", subject), Options: []Option{{Value: "default", Label: a.defaultSubject(s)}}}, nil
		}
		if subject == "" || len(subject) > maxSubject || strings.ContainsAny(subject, "\r\n") {
			return Reply{Text: fmt.Sprintf("A subject is one line of at most %d characters. What should it be?", maxSubject)}, nil
		}
		s.Params[paramSubject], s.Stage = subject, StageConfirmEmail
		return a.confirmEmail(s, "Shall I send it?"), nil
	default: // StageConfirmEmail
		switch {
		case cancelWords[w]:
			return a.afterWrite(s, "Cancelled; nothing was sent."), nil
		case !a.confirms(w):
			return a.confirmEmail(s, "Reply yes to send the e-mail, or cancel."), nil
		}
		if _, err := safety.Check(s.Params[paramEmailSQL], safety.Dialect(s.Params[paramDialect])); err != nil {
			return a.afterWrite(s, fmt.Sprintf("I can't use that query: %s. Nothing was sent.", reason(err))), nil
		}
		return a.beginExecution(s), nil
	}
}

// useEmailQuery checks sql (the suggested query or the user's) and asks
// for the recipients, or refuses it.
func (a *Agent) useEmailQuery(s *Session, sql string) Reply {
	checked, err := safety.Check(sql, safety.Dialect(s.Params[paramDialect]))
	if err != nil {
		s.Stage, s.PendingSQL = StageNeedEmailQuery, ""
		return Reply{Text: fmt.Sprintf("I can't run that: %s. Only a single read-only SELECT is allowed; send another query.", reason(err))}
	}
	s.Params[paramEmailSQL], s.Stage, s.PendingSQL = checked, StageNeedEmailRecipients, ""
	return Reply{Text: "Who should get the e-mail? Give one or more addresses, separated by commas."}
}

func (a *Agent) defaultSubject(s *Session) string {
	return fmt.Sprintf("%s from %s", s.Params[paramWrittenTable], s.Params[paramConnection])
}

// confirmEmail asks to confirm the e-mail, showing its query.
func (a *Agent) confirmEmail(s *Session, question string) Reply {
	return Reply{
		Text: fmt.Sprintf("I will send the result of this query as a CSV file to %s, subject %q. %s",
			s.Params[paramRecipients], s.Params[paramSubject], question),
		Options: confirmOptions, SQLToConfirm: s.Params[paramEmailSQL],
	}
}

// afterWrite returns s to NEED_WRITE_OR_EMAIL.
func (a *Agent) afterWrite(s *Session, text string) Reply {
	s.JobKind, s.Stage, s.PendingSQL = JobWriteData, StageNeedWriteOrEmail, ""
	return Reply{Text: text + " E-mail the table, run another query, or finish?", Options: afterWriteOptions}
}

// afterWriteNoEmail is afterWrite when the written table's schema is
// unknown: it is not offered for e-mail.
func (a *Agent) afterWriteNoEmail(s *Session, text string) Reply {
	r := a.afterWrite(s, text)
	r.Options = afterWriteOptions[1:]
	return r
}

var afterWriteOptions = []Option{
	{Value: "email", Label: "E-mail the result"},
	{Value: methodGenerate, Label: "Ask another question"},
	{Value: methodUserSQL, Label: "Run my own SQL"},
	{Value: "compare", Label: "Compare two queries"},
	{Value: "done", Label: "Finish"},
}

// runEmail runs the confirmed e-mail query of s, in CONFIRM_EMAIL, and
// sends its result.
func (a *Agent) runEmail(ctx context.Context, s *Session) (Reply, error) {
	sql := s.Params[paramEmailSQL]
	res, err := a.db(s).Query(ctx, s.Params[paramConnection], sql, a.opts.EmailRowLimit, a.opts.QueryTimeout)
	var refused *connections.RefusedError
	switch {
	case errors.As(err, &refused):
		s.Stage = StageNeedEmailQuery
		return Reply{Text: fmt.Sprintf("I can't run that: %s. Nothing was sent; send another query.", refused.Reason)}, nil
	case errors.Is(err, connections.ErrQuery):
		s.Stage = StageNeedEmailQuery
		return Reply{Text: fmt.Sprintf("The database refused the query: %v. Nothing was sent; send a corrected query.",
			strings.TrimPrefix(err.Error(), connections.ErrQuery.Error()+": "))}, nil
	case err != nil:
		return Reply{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	attachment, err := resultCSV(res)
	if err != nil {
		return Reply{}, err
	}
	summary := fmt.Sprintf("%d rows from %s, attached as CSV.", len(res.Rows), s.Params[paramConnection])
	switch {
	case res.TooLarge:
		summary = fmt.Sprintf("The first %d rows from %s (the rest passed the %d MiB a result holds), attached as CSV.", len(res.Rows), s.Params[paramConnection], connections.MaxResultBytes>>20)
	case res.Truncated:
		summary = fmt.Sprintf("The first %d rows from %s (the query returned more), attached as CSV.", len(res.Rows), s.Params[paramConnection])
	}
	to := strings.Split(s.Params[paramRecipients], ", ")
	msg := mailer.Message{
		To: to, Subject: s.Params[paramSubject],
		Text:           summary + "\n\nQuery:\n" + sql + "\n",
		HTML:           "<p>" + html.EscapeString(summary) + "</p>\n<p>Query:</p>\n<pre>" + html.EscapeString(sql) + "</pre>\n",
		AttachmentName: s.Params[paramWrittenTable] + ".csv", Attachment: attachment,
	}
	if err := a.opts.Mailer.Send(ctx, msg); err != nil {
		return Reply{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	s.Params[paramRowCount], s.Params[paramEmailedTo] = fmt.Sprint(len(res.Rows)), s.Params[paramRecipients]
	s.ran = &ranJob{sql: sql, rows: int64(len(res.Rows))}
	return a.afterWrite(s, fmt.Sprintf("Sent %d rows to %s.", len(res.Rows), s.Params[paramRecipients])), nil
}

// resultCSV renders a result as CSV (RFC 4180, CRLF line ends): a header
// row, then the rows; NULL is an empty field.
func resultCSV(res *connections.Result) ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.UseCRLF = true
	if err := w.Write(res.Columns); err != nil {
		return nil, err
	}
	rec := make([]string, len(res.Columns))
	for _, row := range res.Rows {
		for i, v := range row {
			rec[i] = ""
			if v != nil {
				rec[i] = fmt.Sprint(v)
			}
		}
		if err := w.Write(rec); err != nil {
			return nil, err
		}
	}
	w.Flush()
	return b.Bytes(), w.Error()
}
