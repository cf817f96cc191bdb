package sqlagent_test

import (
	"bytes"
	"database/sql"
	"encoding/csv"
	"fmt"
	"mime"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/mailer/smtptest"
)

// TestSendEmail runs SEND_EMAIL through the session API against a real
// SMTP server in-process: refused before WRITE_DATA (session unchanged),
// then after a write the suggested SELECT * over the written table, bad
// recipients asked again, the message delivered once and read back (its
// headers, and the CSV attachment byte for byte equal to the table as
// read independently); then the user's own query (an unsafe one refused
// first) on the same table.
func TestSendEmail(t *testing.T) {
	t.Parallel()
	dbPath := chinookCopy(t)
	smtp := smtptest.Start(t, smtptest.Options{})
	_, modelAddr := startModel(t)
	c := startAgent(t, modelAddr, "music=sqlite:"+dbPath, map[string]string{
		"SQLAGENT_SMTP_ADDR": smtp.Addr, "SQLAGENT_SMTP_FROM": "SQL agent <agent@example.com>", "SQLAGENT_SMTP_TLS": "none",
	})
	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "music"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_USER_SQL")
	wantStage(t, send(t, c, id, `SELECT CustomerId, FirstName || ' ' || LastName AS Name, Company, Country FROM Customer WHERE Country IN ('Brazil', 'Canada') ORDER BY CustomerId`), "CONFIRM_USER_SQL")
	r := runRead(t, c, id, "yes")
	wantStage(t, r, "SHOW_RESULTS")
	if got := optionValues(r.GetOptions()); !strings.Contains(strings.Join(got, ","), "email") {
		t.Fatalf("options after results = %v, want email among them", got)
	}

	// SEND_EMAIL before WRITE_DATA: refused, and the session is unchanged.
	before, err := c.GetSession(ctxTimeout(t), &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SendInput(ctxTimeout(t), &sqlagentv1.SendInputRequest{Scope: scopeA, SessionId: id, Selection: "email"})
	if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "WRITE_DATA") {
		t.Fatalf("email before a write: %v, want FailedPrecondition naming WRITE_DATA", err)
	}
	after, err := c.GetSession(ctxTimeout(t), &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: id})
	if err != nil || after.GetSession().GetStage() != "SHOW_RESULTS" || len(after.GetSession().GetTurns()) != len(before.GetSession().GetTurns()) {
		t.Fatalf("session after the refused e-mail = %v, %v", after, err)
	}

	wantStage(t, send(t, c, id, "sel:write"), "NEED_TABLE_NAME")
	wantStage(t, send(t, c, id, "north_south"), "ASK_WRITE_MODE")
	wantStage(t, send(t, c, id, "sel:create"), "CONFIRM_WRITE")
	r = send(t, c, id, "yes")
	wantStage(t, r, "NEED_WRITE_OR_EMAIL")
	r = send(t, c, id, "sel:email")
	wantStage(t, r, "CONFIRM_EMAIL_QUERY")
	if r.GetSession().GetJobKind() != sqlagentv1.JobKind_JOB_KIND_SEND_EMAIL || r.GetSqlToConfirm() != `SELECT * FROM "main"."north_south"` {
		t.Fatalf("job %v, suggested query %q", r.GetSession().GetJobKind(), r.GetSqlToConfirm())
	}
	wantStage(t, send(t, c, id, "yes"), "NEED_EMAIL_RECIPIENTS")
	r = send(t, c, id, "ana@example.com, not-an-address")
	wantStage(t, r, "NEED_EMAIL_RECIPIENTS")
	if !strings.Contains(r.GetReply(), "not-an-address") {
		t.Fatalf("reply to a bad recipient = %q", r.GetReply())
	}
	wantStage(t, send(t, c, id, "ana@example.com, Bo <bo@example.org>"), "NEED_EMAIL_SUBJECT")
	r = send(t, c, id, "Customers in Brazil and Canada")
	wantStage(t, r, "CONFIRM_EMAIL")
	if len(smtp.Messages()) != 0 {
		t.Fatal("a message was sent before the confirmation")
	}
	r = send(t, c, id, "yes")
	wantStage(t, r, "NEED_WRITE_OR_EMAIL")
	if j := r.GetJob(); j.GetKind() != sqlagentv1.JobKind_JOB_KIND_SEND_EMAIL || j.GetSql() != `SELECT * FROM "main"."north_south"` || j.GetRowCount() != 13 ||
		j.GetDestination() != "e-mail to ana@example.com, bo@example.org" {
		t.Fatalf("e-mail job = %v", j)
	}
	own := openSQLite(t, dbPath)
	want := tableCSV(t, own, `SELECT * FROM north_south`)
	got := smtp.Messages()
	if len(got) != 1 {
		t.Fatalf("%d messages delivered, want 1", len(got))
	}
	if strings.Join(got[0].To, ",") != "ana@example.com,bo@example.org" || got[0].From != "agent@example.com" {
		t.Fatalf("envelope from %s to %v", got[0].From, got[0].To)
	}
	msg, parts := smtptest.Parse(t, got[0].Data)
	if subject, _ := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject")); subject != "Customers in Brazil and Canada" || msg.Header.Get("To") != "ana@example.com, bo@example.org" {
		t.Fatalf("headers: Subject %q, To %q", subject, msg.Header.Get("To"))
	}
	if len(parts) != 3 || !strings.Contains(string(parts[0].Body), "13 rows from music") || !strings.Contains(string(parts[1].Body), "13 rows from music") {
		t.Fatalf("parts = %d, text %q", len(parts), firstBody(parts))
	}
	if !bytes.Equal(parts[2].Body, want) || !strings.Contains(parts[2].Disposition, "north_south.csv") {
		t.Fatalf("attachment %s:\n%s\nwant:\n%s", parts[2].Disposition, parts[2].Body, want)
	}

	// Again, with the user's own query: an unsafe one is refused first.
	wantStage(t, send(t, c, id, "sel:email"), "CONFIRM_EMAIL_QUERY")
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_EMAIL_QUERY")
	r = send(t, c, id, "DELETE FROM north_south")
	wantStage(t, r, "NEED_EMAIL_QUERY")
	if !strings.Contains(r.GetReply(), "DELETE") {
		t.Fatalf("reply to an unsafe query = %q", r.GetReply())
	}
	wantStage(t, send(t, c, id, "SELECT Country, COUNT(*) AS customers FROM north_south GROUP BY Country ORDER BY Country"), "NEED_EMAIL_RECIPIENTS")
	wantStage(t, send(t, c, id, "cy@example.net"), "NEED_EMAIL_SUBJECT")
	wantStage(t, send(t, c, id, "sel:default"), "CONFIRM_EMAIL")
	wantStage(t, send(t, c, id, "yes"), "NEED_WRITE_OR_EMAIL")
	got = smtp.Messages()
	if len(got) != 2 {
		t.Fatalf("%d messages delivered, want 2", len(got))
	}
	msg, parts = smtptest.Parse(t, got[1].Data)
	if subject, _ := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject")); subject != "north_south from music" {
		t.Fatalf("default subject = %q", subject)
	}
	if string(parts[2].Body) != "Country,customers\r\nBrazil,5\r\nCanada,8\r\n" {
		t.Fatalf("attachment = %q", parts[2].Body)
	}
	wantStage(t, send(t, c, id, "sel:done"), "DONE")
}

// tableCSV reads a query's result with the test's own handle and renders
// it as CSV the way a spreadsheet would read it back.
func tableCSV(t *testing.T, db *sql.DB, q string) []byte {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.UseCRLF = true
	_ = w.Write(cols)
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		rec := make([]string, len(cols))
		for i, v := range vals {
			switch x := v.(type) {
			case nil:
			case []byte:
				rec[i] = string(x)
			default:
				rec[i] = fmt.Sprint(x)
			}
		}
		_ = w.Write(rec)
	}
	w.Flush()
	return b.Bytes()
}

func firstBody(parts []smtptest.Part) string {
	if len(parts) == 0 {
		return ""
	}
	return string(parts[0].Body)
}
