package pipeline_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/pipeline"
)

// fixture reads a file of testdata/qualifier, shared with the service's
// acceptance tests.
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "qualifier", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseEmail(t *testing.T) {
	t.Parallel()
	// A reply with a quoted message and a signature, a quoted-printable
	// body, RFC 2047 headers and a PNG attachment.
	png := fixture(t, "panel.png")
	e, err := pipeline.ParseEmail(string(fixture(t, "incident.eml")))
	if err != nil {
		t.Fatal(err)
	}
	x := e.Extraction
	want := &struct {
		From, Subject, Thread, MessageID, Body string
		To, Cc, Refs                           []string
		Date                                   time.Time
	}{
		From: "Ana Nováková <ana@example.com>", Subject: "Re: Ledger timeouts – 2.4", Thread: "Ledger timeouts – 2.4", MessageID: "msg-2@example.com",
		Body: "Hi team,\n\nThe ledger p99 is back to 30 s since the 2.4 deploy – see the attached panel. Could you roll the pool settings back?",
		To:   []string{"Payments On-call <payments-oncall@example.com>", "bob@example.com"}, Cc: []string{"cto@example.com"},
		Refs: []string{"msg-0@example.com", "msg-1@example.com"},
		Date: time.Date(2024, 3, 12, 8, 15, 0, 0, time.UTC),
	}
	got := &struct {
		From, Subject, Thread, MessageID, Body string
		To, Cc, Refs                           []string
		Date                                   time.Time
	}{x.GetFrom(), x.GetSubject(), x.GetThread(), x.GetMessageId(), x.GetBody(), x.GetTo(), x.GetCc(), x.GetReferences(), x.GetDate().AsTime()}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("extraction (-want +got):\n%s", d)
	}
	if len(e.Attachments) != 1 || e.Attachments[0].Name != "panel.png" || !bytes.Equal(e.Attachments[0].Data, png) {
		t.Fatalf("attachments %+v: want panel.png with the PNG's bytes", e.Attachments)
	}
	if img, _ := pipeline.SniffImage(e.Attachments[0].Data); img != "image/png" {
		t.Errorf("attachment sniffed as %q", img)
	}
	if !strings.Contains(e.Text, "Rolled out 2.4 to EU") {
		t.Errorf("the full text keeps the quoted message:\n%s", e.Text)
	}
}

// Charsets other than UTF-8, in headers (RFC 2047) and in bodies, are
// decoded; the cases are a Czech sender in ISO-8859-2 and a Western one
// in ISO-8859-1, as mail clients write them.
func TestParseEmailCharsets(t *testing.T) {
	t.Parallel()
	raw := "From: =?ISO-8859-2?Q?P=F8emysl_=A9t=ECp=E1nek?= <p@example.cz>\r\n" +
		"To: =?iso-8859-1?Q?J=E9r=F4me_Br=FBl=E9?= <j@example.fr>\r\n" +
		"Subject: =?windows-1250?Q?Faktura_=E8._12?=\r\n" +
		"Content-Type: text/plain; charset=\"ISO-8859-1\"\r\n" +
		"Content-Transfer-Encoding: quoted-printable\r\n\r\n" +
		"Cr=E8me br=FBl=E9e for the caf=E9.\r\n"
	e, err := pipeline.ParseEmail(raw)
	if err != nil {
		t.Fatal(err)
	}
	x := e.Extraction
	got := append([]string{x.GetFrom(), x.GetSubject(), x.GetBody()}, x.GetTo()...)
	want := []string{"Přemysl Štěpánek <p@example.cz>", "Faktura č. 12", "Crème brûlée for the café.", "Jérôme Brûlé <j@example.fr>"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}

	// Latin-1 labelled UTF-8, as real mail has it: the bytes that are not
	// UTF-8 are dropped (the upload failed with an internal error when
	// its event could not be encoded), the rest kept.
	e, err = pipeline.ParseEmail("From: =?UTF-8?Q?Caf=E9?= <ops@example.com>\r\nTo: =?UTF-8?Q?J=E9r=F4me?= <j@example.fr>, =?UTF-8?B?/w==?= <k@example.fr>\r\n" +
		"Cc: =?UTF-8?Q?=80?= <c@example.com>\r\nMessage-Id: <\xff1@example.com>\r\nReferences: <\xfe2@example.com>\r\nSubject: =?UTF-8?Q?r=E9sum=E9?=\r\n\r\nbody\r\n")
	if err != nil {
		t.Fatal(err)
	}
	x = e.Extraction
	got = append(append(append([]string{x.GetFrom(), x.GetSubject(), x.GetMessageId()}, x.GetTo()...), x.GetCc()...), x.GetReferences()...)
	want = []string{"Caf <ops@example.com>", "rsum", "1@example.com", "Jrme <j@example.fr>", "k@example.fr", "c@example.com", "2@example.com"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("mislabelled charset (-want +got):\n%s", d)
	}
}

// nested is a message of depth multiparts, each the only part of the
// one around it, around a text part.
func nested(depth int) string {
	var b strings.Builder
	b.WriteString("From: a@example.com\r\nTo: b@example.com\r\nContent-Type: multipart/mixed; boundary=b0\r\n\r\n")
	for i := 1; i < depth; i++ {
		fmt.Fprintf(&b, "--b%d\r\nContent-Type: multipart/mixed; boundary=b%d\r\n\r\n", i-1, i)
	}
	fmt.Fprintf(&b, "--b%d\r\nContent-Type: text/plain\r\n\r\ndeep\r\n--b%d--\r\n", depth-1, depth-1)
	for i := depth - 2; i >= 0; i-- {
		fmt.Fprintf(&b, "--b%d--\r\n", i)
	}
	return b.String()
}

func TestParseEmailNesting(t *testing.T) {
	t.Parallel()
	e, err := pipeline.ParseEmail(nested(8))
	if err != nil {
		t.Fatalf("8 levels: %v", err)
	}
	if e.Text != "deep" {
		t.Errorf("text %q", e.Text)
	}
}

// TestParseEmailForwardsAreBounded: forwarded messages (message/rfc822)
// nest like multiparts: eight are read, the ninth is kept as an
// attachment, and 6,000 of them parse at once instead of each from the
// top again (408 KB took the mesh to 1.9 GB).
func TestParseEmailForwardsAreBounded(t *testing.T) {
	t.Parallel()
	forwarded := func(n int) string {
		hdr := "From: a@example.com\r\nTo: d@example.com\r\nSubject: s\r\nContent-Type: message/rfc822\r\n\r\n"
		return strings.Repeat(hdr, n) + "From: a@example.com\r\nTo: d@example.com\r\nSubject: leaf\r\n\r\nhello\r\n"
	}
	e, err := pipeline.ParseEmail(forwarded(8))
	if err != nil || strings.TrimSpace(e.Text) != "hello" || len(e.Attachments) != 0 {
		t.Fatalf("8 forwards: %v, text %q, %d attachments; want the innermost text", err, e.Text, len(e.Attachments))
	}
	e, err = pipeline.ParseEmail(forwarded(9))
	if err != nil || e.Text != "" || len(e.Attachments) != 1 || e.Attachments[0].MimeType != "message/rfc822" {
		t.Fatalf("9 forwards: %v, text %q, %d attachments; want the ninth kept as an attachment", err, e.Text, len(e.Attachments))
	}
	start := time.Now()
	if _, err := pipeline.ParseEmail(forwarded(6000)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("6,000 forwards took %v", took)
	}
}

// TestParseEmailHeadersAreBounded: a subject, an address or a reference
// is cut at 2 KiB; To and Cc keep their first 500 addresses, References
// its first 100 (a 600 KB subject made events NATS would not carry; half
// a million recipients an extraction of 16 minutes).
func TestParseEmailHeadersAreBounded(t *testing.T) {
	t.Parallel()
	var to, refs []string
	for i := range 100000 {
		to = append(to, fmt.Sprintf("u%d@example.com", i))
	}
	for i := range 300 {
		refs = append(refs, fmt.Sprintf("<r%d@example.com>", i))
	}
	raw := "From: " + strings.Repeat("Ana ", 1000) + "<ana@example.com>\r\nTo: " + strings.Join(to, ", ") +
		"\r\nCc: b@example.com\r\nSubject: " + strings.Repeat("Quarterly ", 60000) + "\r\nReferences: " + strings.Join(refs, " ") +
		"\r\n\r\nhello\r\n"
	start := time.Now()
	e, err := pipeline.ParseEmail(raw)
	if err != nil {
		t.Fatal(err)
	}
	x := e.Extraction
	if len(x.GetSubject()) > 2048 || !strings.HasPrefix(x.GetSubject(), "Quarterly Quarterly") || len(x.GetThread()) > 2048 ||
		len(x.GetFrom()) > 2048 || len(x.GetTo()) != 500 || x.GetTo()[499] != "u499@example.com" || len(x.GetCc()) != 1 ||
		len(x.GetReferences()) != 100 || x.GetReferences()[99] != "r99@example.com" {
		t.Fatalf("subject %d bytes, thread %d, from %d, %d to (last %q), %d cc, %d references",
			len(x.GetSubject()), len(x.GetThread()), len(x.GetFrom()), len(x.GetTo()), x.GetTo()[len(x.GetTo())-1], len(x.GetCc()), len(x.GetReferences()))
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("parsing took %v", took)
	}
	ev := pipeline.ForEvent(&indexerv1.IntakePipeline{Extraction: &indexerv1.IntakeExtraction{Result: &indexerv1.IntakeExtraction_Email{Email: x}}})
	if b, _ := proto.Marshal(ev); len(b) > 512<<10 || len(ev.GetExtraction().GetEmail().GetTo()) != 100 {
		t.Errorf("the event: %d bytes, %d recipients; want at most 512 KiB and 100", len(b), len(ev.GetExtraction().GetEmail().GetTo()))
	}
}

func TestParseEmailRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, raw string
		notEmail  bool
	}{
		{"prose", "Hi team,\n\nthe ledger is slow again.\n", true},
		{"headers without sender", "Subject: x\nTo: a@example.com\n\nbody", true},
		{"multipart without boundary", "From: a@example.com\nTo: b@example.com\nContent-Type: multipart/mixed\n\nbody", false},
		{"boundary never found", "From: a@example.com\nTo: b@example.com\nContent-Type: multipart/mixed; boundary=zz\n\nno parts here", false},
		{"bad base64", "From: a@example.com\nTo: b@example.com\nContent-Transfer-Encoding: base64\n\n!!!not base64!!!", false},
		{"multiparts nested too deep", nested(9), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pipeline.ParseEmail(tc.raw)
			if err == nil {
				t.Fatal("parsed")
			}
			if got := errors.Is(err, pipeline.ErrNotEmail); got != tc.notEmail {
				t.Errorf("ErrNotEmail = %v, want %v (%v)", got, tc.notEmail, err)
			}
		})
	}
}

func TestCleanEmailBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"gmail attribution", "Yes, ship it.\n\nOn Tue, 5 Mar 2024, Bob wrote:\n> Ship?\n", "Yes, ship it."},
		{"outlook separator", "Approved.\n\n-----Original Message-----\nFrom: Bob\nSent: Monday\n", "Approved."},
		{"outlook header block", "Approved.\n\nFrom: Bob <b@x.com>\nSent: Monday, 4 March\nSubject: budget\n", "Approved."},
		{"inline quotes dropped", "> earlier line\nMy answer.\n", "My answer."},
		{"signature", "Thanks for the fix.\n-- \nAna\n+420 123", "Thanks for the fix."},
		{"dashes in prose stay", "Step 1 -- build\nStep 2 -- ship", "Step 1 -- build\nStep 2 -- ship"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pipeline.CleanEmailBody(tc.in); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseJira(t *testing.T) {
	t.Parallel()
	text := "**Status:** In Review\nIssue Type: Story\nPriority: Low\nAssignee: Jan Novak\nReporter: Ana Novakova\n" +
		"Epic Link: PAY-100 Ledger hardening\nSprint: Payments 42\n\nDescription:\nMake the ledger pool size configurable.\nDefault stays 20.\n\nLabels: ledger"
	got := pipeline.ParseJira("PAY-412: Configurable ledger pool", text)
	want := &indexerv1.JiraExtraction{Key: "PAY-412", Summary: "Configurable ledger pool", Status: "In Review", Type: "Story",
		Assignee: "Jan Novak", Reporter: "Ana Novakova", Epic: "PAY-100 Ledger hardening", Sprint: "Payments 42", Priority: "Low",
		ChangeDescription: "Make the ledger pool size configurable.\nDefault stays 20."}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestParseConfluence(t *testing.T) {
	t.Parallel()
	text := "Space: Payments Engineering\nCreated by Jan Novak on 3 May 2024\n\n# Ledger runbook\n\nThis page explains how to drain the ledger safely. It is for on-call.\n\n" +
		"## Prerequisites\n\nAccess to prod.\n\nh2. Draining\n\n<h3>Rollback</h3>\n"
	got := pipeline.ParseConfluence("", text)
	want := &indexerv1.ConfluenceExtraction{Author: "Jan Novak", Title: "Ledger runbook", Topic: "Payments Engineering",
		Headings: []string{"Ledger runbook", "Prerequisites", "Draining", "Rollback"}}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if got := pipeline.ParseConfluence("Runbook", "# Runbook\n\nThis page explains draining. More text.").GetTopic(); got != "This page explains draining." {
		t.Errorf("topic without a Space field = %q", got)
	}
}

func TestParseLog(t *testing.T) {
	t.Parallel()
	f := pipeline.ParseLog(string(fixture(t, "ledger.log")))
	if f.Lines != 301 || f.Levels["ERROR"] != 6 || f.Levels["WARN"] != 8 || f.Levels["FATAL"] != 1 || f.Levels["INFO"] != 286 {
		t.Errorf("lines %d, levels %v", f.Lines, f.Levels)
	}
	if want := []string{"LEDGER_TIMEOUT", "ERR-5003"}; !cmp.Equal(f.Codes, want) {
		t.Errorf("codes %v, want %v", f.Codes, want)
	}
	if !f.First.Equal(time.Date(2024, 3, 12, 8, 14, 0, 0, time.UTC)) || !f.Last.Equal(time.Date(2024, 3, 12, 8, 20, 0, 0, time.UTC)) {
		t.Errorf("time range %v – %v", f.First, f.Last)
	}
	ex := f.Extraction()
	// One entry per message shape, in order of first appearance: the
	// eight waits, the six timeouts, the fatal line.
	if k := ex.GetKeyEvents(); len(k) != 3 || !strings.Contains(k[0], "WARN pool exhausted") || !strings.Contains(k[0], "(×8)") ||
		!strings.Contains(k[1], "code=LEDGER_TIMEOUT") || !strings.Contains(k[1], "(×6)") || !strings.Contains(k[2], "FATAL") {
		t.Errorf("key events %q", ex.GetKeyEvents())
	}
	if !strings.Contains(ex.GetSummary(), "301 lines") || !strings.Contains(ex.GetSummary(), "FATAL ERR-5003") {
		t.Errorf("summary %q", ex.GetSummary())
	}
	if len(ex.GetCriticalDetails()) != 3 { // the timeout, the fatal line, the codes
		t.Errorf("critical details %q", ex.GetCriticalDetails())
	}
}

// Structured formats carry their time and level inside the line: JSON
// lines (Go's log/slog, Python's structlog), logfmt (Heroku, Go kit),
// and Python's logging default format.
func TestParseLogFormats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, line, level string }{
		{"slog JSON", `{"time":"2024-03-12T08:15:07.5+01:00","level":"ERROR","msg":"ledger write failed","code":"LEDGER_TIMEOUT"}`, "ERROR"},
		{"logfmt", `time=2024-03-12T07:15:07.5Z level=warn msg="pool exhausted"`, "WARN"},
		{"python logging", `2024-03-12 07:15:07,500 - ledger - CRITICAL - shutting down`, "FATAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := pipeline.ParseLog(tc.line)
			if want := time.Date(2024, 3, 12, 7, 15, 7, 500e6, time.UTC); !f.First.Equal(want) {
				t.Errorf("time %v, want %v", f.First, want)
			}
			if f.Levels[tc.level] != 1 || len(f.Notable) != 1 {
				t.Errorf("levels %v, notable %v", f.Levels, f.Notable)
			}
		})
	}
}

// Vision found by stage 1 survives stage 2, a failed stage 2, and any
// later setter that brings nothing.
func TestSetVisionNeverLoses(t *testing.T) {
	t.Parallel()
	p := &indexerv1.IntakePipeline{}
	pipeline.SetVision(p, &indexerv1.IntakeVision{GeneralSummary: "a Grafana panel", Model: "vision"})
	pipeline.SetVision(p, &indexerv1.IntakeVision{}) // a failed stage 2
	pipeline.SetVision(p, &indexerv1.IntakeVision{TypeSpecificDetails: "Ticket key: PAY-7"})
	want := &indexerv1.IntakeVision{GeneralSummary: "a Grafana panel", TypeSpecificDetails: "Ticket key: PAY-7", Model: "vision"}
	if !proto.Equal(p.GetVision(), want) {
		t.Errorf("vision %v, want %v", p.GetVision(), want)
	}
}

func TestContentTypesAgree(t *testing.T) {
	t.Parallel()
	G, C := indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_GENERIC, indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_CONFLUENCE
	for _, tc := range []struct {
		fine string
		t    indexerv1.IntakeContentType
		ok   bool
	}{
		{"email", indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_EMAIL, true},
		{"ticket", indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_JIRA, true},
		{"financial_report", G, true},
		{"meeting_notes", C, true}, // a Confluence page of meeting notes
		{"generic", C, false},
		{"email", G, false},
		{"log", C, false},
	} {
		if got := pipeline.Compatible(tc.fine, tc.t); got != tc.ok {
			t.Errorf("Compatible(%s, %s) = %v", tc.fine, tc.t, got)
		}
	}
	if got := pipeline.BaseNodeKey(indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_EMAIL, "xj_ab-12"); got != "email_xj_ab_12" {
		t.Errorf("BaseNodeKey = %q", got)
	}
}
