package sqlagent_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the test's own handle on the server

	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/mailer/smtptest"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/mariadbtest"
)

// TestMariaDBSession runs READ_SQL and WRITE_DATA through the session API
// on a real MariaDB server holding Chinook: the model sees the server's
// schema and is told the dialect, its MariaDB SQL (backticks, a window
// function, DATE_FORMAT) runs after confirmation, a generated GET_LOCK and
// a typed INTO OUTFILE are refused, a stored function hiding GET_LOCK is
// refused by the server-side check, and a write creates a table. The read
// user here holds every privilege: the start warns about it. The written
// table is e-mailed (SEND_EMAIL's default query in MariaDB's quoting), and
// a connection with only a read DSN refuses WRITE_DATA.
func TestMariaDBSession(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.Start(t, mariadbtest.Chinook(t),
		"CREATE FUNCTION Chinook.bump() RETURNS INT NO SQL RETURN GET_LOCK('bump', 0)",
		"CREATE USER 'reader'@'%' IDENTIFIED BY ''", "GRANT SELECT ON Chinook.* TO 'reader'@'%'")
	dsn := srv.DSN("am", "Chinook")
	const question = "Which genres sell best?"
	const genreSQL = "SELECT g.`Name` AS genre, COUNT(*) AS sold, RANK() OVER (ORDER BY COUNT(*) DESC) AS place, DATE_FORMAT(MIN(i.InvoiceDate), '%Y-%m') AS since FROM InvoiceLine il JOIN Track t ON t.TrackId = il.TrackId JOIN Genre g ON g.GenreId = t.GenreId JOIN Invoice i ON i.InvoiceId = il.InvoiceId GROUP BY g.`Name` ORDER BY sold DESC LIMIT 3"
	sim, modelAddr := startModel(t)
	sim.When(providersim.Match{LastUserContains: question}).Text("```sql\n" + genreSQL + ";\n```")
	sim.When(providersim.Match{LastUserContains: "hold the lock"}).Text("```sql\nSELECT GET_LOCK('x', 0);\n```")
	var logs testkit.Buffer
	mail := smtptest.Start(t, smtptest.Options{})
	c, running := startAgentLogged(t, modelAddr, "music=mysql:"+dsn+"; ro[read]=mysql:"+srv.DSN("reader", "Chinook"),
		map[string]string{"SQLAGENT_SMTP_ADDR": mail.Addr, "SQLAGENT_SMTP_FROM": "agent@example.com", "SQLAGENT_SMTP_TLS": "none"}, &logs)

	conns, err := c.ListConnections(ctxTimeout(t), &sqlagentv1.ListConnectionsRequest{Scope: scopeA})
	if err != nil || len(conns.GetConnections()) != 2 || conns.GetConnections()[0].GetDialect() != "mysql" {
		t.Fatalf("ListConnections = %v, %v; want two mysql connections", conns, err)
	}
	created, err := c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "music"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetId()
	wantStage(t, send(t, c, id, "sel:generate"), "NEED_NATURAL_LANGUAGE")
	r := send(t, c, id, question)
	wantStage(t, r, "CONFIRM_GENERATED_SQL")
	if r.GetSqlToConfirm() != genreSQL {
		t.Fatalf("sql_to_confirm = %q, want %q", r.GetSqlToConfirm(), genreSQL)
	}
	var system string
	for _, m := range sim.ChatRequests()[0].Messages {
		if m.Role == "system" {
			system += m.Content
		}
	}
	if !strings.Contains(system, "InvoiceLine(InvoiceLineId int(11), InvoiceId int(11), TrackId int(11), UnitPrice decimal(10,2), Quantity int(11))") || !strings.Contains(system, "MariaDB") {
		t.Fatalf("the model was not shown the server's schema and dialect:\n%s", system)
	}
	r = runRead(t, c, id, "yes")
	wantStage(t, r, "SHOW_RESULTS")
	own, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	var since string
	if err := own.QueryRow(`SELECT DATE_FORMAT(MIN(i.InvoiceDate), '%Y-%m') FROM Invoice i JOIN InvoiceLine il ON il.InvoiceId = i.InvoiceId
		JOIN Track t ON t.TrackId = il.TrackId JOIN Genre g ON g.GenreId = t.GenreId WHERE g.Name = 'Rock'`).Scan(&since); err != nil {
		t.Fatal(err)
	}
	rows := r.GetResult().GetRows()
	if len(rows) != 3 || rows[0].GetValues()[0].GetStringValue() != "Rock" || rows[0].GetValues()[1].GetNumberValue() != 835 ||
		rows[0].GetValues()[2].GetNumberValue() != 1 || rows[0].GetValues()[3].GetStringValue() != since {
		t.Fatalf("rows = %v, want Rock 835 1 %s first", rows, since)
	}

	// A generated GET_LOCK is refused before it is offered.
	wantStage(t, send(t, c, id, "sel:generate"), "NEED_NATURAL_LANGUAGE")
	r = send(t, c, id, "hold the lock please")
	if r.GetSqlToConfirm() != "" || !strings.Contains(r.GetReply(), "get_lock") {
		t.Fatalf("GET_LOCK: reply %q, sql_to_confirm %q; want a refusal naming it", r.GetReply(), r.GetSqlToConfirm())
	}
	// Typed SQL that writes a file is refused.
	wantStage(t, send(t, c, id, "sel:user_sql"), "NEED_USER_SQL")
	r = send(t, c, id, "SELECT * FROM Genre INTO OUTFILE '"+srv.Files+"/genres.txt'")
	wantStage(t, r, "NEED_USER_SQL")
	if !strings.Contains(r.GetReply(), "OUTFILE") && !strings.Contains(r.GetReply(), "INTO") {
		t.Fatalf("INTO OUTFILE: reply %q, want a refusal", r.GetReply())
	}
	// A stored function the token checker cannot see into is refused by
	// the server-side check, which reads its body.
	wantStage(t, send(t, c, id, "SELECT bump()"), "CONFIRM_USER_SQL")
	r = runRead(t, c, id, "yes")
	wantStage(t, r, "NEED_USER_SQL")
	if r.GetResult() != nil || !strings.Contains(r.GetReply(), "get_lock") || !strings.Contains(r.GetReply(), "bump") {
		t.Fatalf("stored function over GET_LOCK: reply %q, result %v; want a refusal naming both", r.GetReply(), r.GetResult())
	}

	// Write the result of typed SQL to a new table, after confirmation.
	wantStage(t, send(t, c, id, "SELECT `FirstName`, `LastName`, `Country` FROM Customer WHERE Country = 'Brazil'"), "CONFIRM_USER_SQL")
	wantStage(t, runRead(t, c, id, "yes"), "SHOW_RESULTS")
	r = send(t, c, id, "sel:write")
	wantStage(t, r, "NEED_TABLE_NAME")
	// The tables of the write user's database, listed through it: FETCH_TABLES.
	if got := strings.Join(optionValues(r.GetOptions()), ","); r.GetAction() != sqlagentv1.Action_ACTION_FETCH_TABLES ||
		got != "Album,Artist,Customer,Employee,Genre,Invoice,InvoiceLine,MediaType,Playlist,PlaylistTrack,Track" {
		t.Fatalf("write target: action %v, table options %s", r.GetAction(), got)
	}
	wantStage(t, send(t, c, id, "brazil_customers"), "ASK_WRITE_MODE")
	wantStage(t, send(t, c, id, "sel:create"), "CONFIRM_WRITE")
	wantStage(t, send(t, c, id, "yes"), "NEED_WRITE_OR_EMAIL")
	var n int
	if err := own.QueryRow("SELECT COUNT(*) FROM brazil_customers").Scan(&n); err != nil || n != 5 {
		t.Fatalf("brazil_customers has %d rows, %v; want 5", n, err)
	}
	// SEND_EMAIL of the written table: its default query is MariaDB's.
	r = send(t, c, id, "sel:email")
	wantStage(t, r, "CONFIRM_EMAIL_QUERY")
	if r.GetSqlToConfirm() != "SELECT * FROM `Chinook`.`brazil_customers`" {
		t.Fatalf("suggested e-mail query = %q", r.GetSqlToConfirm())
	}
	wantStage(t, send(t, c, id, "yes"), "NEED_EMAIL_RECIPIENTS")
	wantStage(t, send(t, c, id, "ana@example.com"), "NEED_EMAIL_SUBJECT")
	wantStage(t, send(t, c, id, "Brazil"), "CONFIRM_EMAIL")
	wantStage(t, send(t, c, id, "yes"), "NEED_WRITE_OR_EMAIL")
	if got := mail.Messages(); len(got) != 1 {
		t.Fatalf("%d messages delivered, want 1", len(got))
	} else if _, parts := smtptest.Parse(t, got[0].Data); len(parts) != 3 || !strings.HasPrefix(string(parts[2].Body), "FirstName,LastName,Country\r\n") ||
		strings.Count(string(parts[2].Body), "\r\n") != 6 {
		t.Fatalf("attachment = %q, want the header and 5 rows", parts[len(parts)-1].Body)
	}
	var lock sql.NullInt64
	if err := own.QueryRow("SELECT IS_USED_LOCK('bump')").Scan(&lock); err != nil || lock.Valid {
		t.Fatalf("the named lock is held by %v, %v; want free", lock, err)
	}

	// A connection with only a read DSN takes no writes: refused when
	// asked, and the session stays where it was.
	created, err = c.CreateSession(ctxTimeout(t), &sqlagentv1.CreateSessionRequest{Scope: scopeA, Connection: "ro"})
	if err != nil {
		t.Fatal(err)
	}
	ro := created.GetSession().GetId()
	wantStage(t, send(t, c, ro, "SELECT Name FROM Genre ORDER BY GenreId LIMIT 2"), "CONFIRM_USER_SQL")
	wantStage(t, runRead(t, c, ro, "yes"), "SHOW_RESULTS")
	_, err = c.SendInput(ctxTimeout(t), &sqlagentv1.SendInputRequest{Scope: scopeA, SessionId: ro, Selection: "write"})
	wantInvalid(t, err, "selection")
	if !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("write to a read-only connection: %v, want it called read-only", err)
	}
	got, err := c.GetSession(ctxTimeout(t), &sqlagentv1.GetSessionRequest{Scope: scopeA, SessionId: ro})
	if err != nil || got.GetSession().GetStage() != "SHOW_RESULTS" || got.GetSession().GetJobKind() != sqlagentv1.JobKind_JOB_KIND_READ_SQL {
		t.Fatalf("session after the refused write = %v, %v", got, err)
	}

	testkit.Eventually(t, 30*time.Second, func() bool { return strings.Contains(logs.String(), "the read role may do more than read") }, "the read user audited")
	running.Stop()
	if l := logs.String(); !strings.Contains(l, "the read role may do more than read") || !strings.Contains(l, "FILE") {
		t.Fatalf("no warning about the all-privileged read user in the log:\n%s", l)
	}
}
