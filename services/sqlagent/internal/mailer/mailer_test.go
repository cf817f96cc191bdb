package mailer_test

import (
	"bytes"
	"context"
	"errors"
	"mime"
	"net/mail"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/mailer"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/mailer/smtptest"
)

// TestSend delivers a message through a real SMTP server that requires
// STARTTLS and AUTH PLAIN, and reads it back: envelope, headers (a UTF-8
// subject), both body forms, and the attachment byte for byte.
func TestSend(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t, smtptest.Options{TLS: true, Username: "agent", Password: "s3cret"})
	m, err := mailer.New(mailer.Config{Addr: srv.Addr, From: "SQL agent <agent@example.com>", Username: "agent", Password: "s3cret", TLSConfig: srv.ClientTLS})
	if err != nil {
		t.Fatal(err)
	}
	csv := []byte("Name,Total\r\n\"Smith, J\",1.98\r\nÉmile,0.99\r\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = m.Send(ctx, mailer.Message{
		To: []string{"ana@example.com", "bo@example.org"}, Subject: "Ventes – Brésil",
		Text: "2 rows attached.", HTML: "<p>2 rows attached.</p>", AttachmentName: "sales.csv", Attachment: csv,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := srv.Messages()
	if len(got) != 1 {
		t.Fatalf("%d messages delivered, want 1", len(got))
	}
	r := got[0]
	if !r.TLS || r.User != "agent" || r.From != "agent@example.com" || strings.Join(r.To, ",") != "ana@example.com,bo@example.org" {
		t.Fatalf("envelope = %+v, want TLS, user agent, from agent@example.com to both", r)
	}
	msg, parts := smtptest.Parse(t, r.Data)
	subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	if err != nil || subject != "Ventes – Brésil" {
		t.Fatalf("Subject = %q, %v", subject, err)
	}
	if to := msg.Header.Get("To"); to != "ana@example.com, bo@example.org" {
		t.Fatalf("To = %q", to)
	}
	if from, err := mail.ParseAddress(msg.Header.Get("From")); err != nil || from.Address != "agent@example.com" || from.Name != "SQL agent" {
		t.Fatalf("From = %q, %v", msg.Header.Get("From"), err)
	}
	if msg.Header.Get("Message-Id") == "" || msg.Header.Get("Date") == "" {
		t.Fatalf("headers lack Message-ID or Date: %v", msg.Header)
	}
	if len(parts) != 3 {
		t.Fatalf("%d parts, want text, HTML and the attachment", len(parts))
	}
	if !strings.HasPrefix(parts[0].ContentType, "text/plain") || string(parts[0].Body) != "2 rows attached." ||
		!strings.HasPrefix(parts[1].ContentType, "text/html") || string(parts[1].Body) != "<p>2 rows attached.</p>" {
		t.Fatalf("bodies = %q (%s), %q (%s)", parts[0].Body, parts[0].ContentType, parts[1].Body, parts[1].ContentType)
	}
	_, params, _ := mime.ParseMediaType(parts[2].Disposition)
	if !strings.HasPrefix(parts[2].ContentType, "text/csv") || params["filename"] != "sales.csv" || !bytes.Equal(parts[2].Body, csv) {
		t.Fatalf("attachment %q (%s, %s), want the CSV bytes as sales.csv", parts[2].Body, parts[2].ContentType, parts[2].Disposition)
	}
}

// TestSendFailures checks that the mailer does not deliver when it must
// not: a wrong password, a server without STARTTLS, a password over a
// connection without TLS.
func TestSendFailures(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg := mailer.Message{To: []string{"a@example.com"}, Subject: "x", Text: "x", HTML: "x", AttachmentName: "x.csv", Attachment: []byte("a\r\n")}

	tlsSrv := smtptest.Start(t, smtptest.Options{TLS: true, Username: "agent", Password: "right"})
	m, err := mailer.New(mailer.Config{Addr: tlsSrv.Addr, From: "agent@example.com", Username: "agent", Password: "wrong", TLSConfig: tlsSrv.ClientTLS})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Send(ctx, msg); !errors.Is(err, mailer.ErrSend) || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("wrong password: %v, want ErrSend without the password", err)
	}

	plain := smtptest.Start(t, smtptest.Options{})
	m, err = mailer.New(mailer.Config{Addr: plain.Addr, From: "agent@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Send(ctx, msg); !errors.Is(err, mailer.ErrSend) {
		t.Fatalf("server without STARTTLS: %v, want ErrSend", err)
	}
	if n := len(plain.Messages()) + len(tlsSrv.Messages()); n != 0 {
		t.Fatalf("%d messages delivered, want none", n)
	}
	if _, err := mailer.New(mailer.Config{Addr: plain.Addr, From: "agent@example.com", TLS: mailer.NoTLS, Username: "agent", Password: "p"}); err == nil {
		t.Fatal("a password without TLS was accepted")
	}
	m, err = mailer.New(mailer.Config{Addr: plain.Addr, From: "agent@example.com", TLS: mailer.NoTLS})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Send(ctx, msg); err != nil || len(plain.Messages()) != 1 {
		t.Fatalf("explicit no-TLS relay: %v, %d messages", err, len(plain.Messages()))
	}
}

func TestParseRecipients(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in, want, err string
	}{
		{"ana@example.com", "ana@example.com", ""},
		{"ana@example.com, bo@example.org; cy@example.net", "ana@example.com,bo@example.org,cy@example.net", ""},
		{"<ana@example.com>", "ana@example.com", ""},
		{"Ana Lima <ana@example.com>\nbo@example.org", "ana@example.com,bo@example.org", ""},
		{"ana@example.com bo@example.org", "", "not an e-mail address"},
		{"ana", "", `"ana" is not an e-mail address`},
		{"ana@example.com, nope", "", `"nope"`},
		{"a@b.c\r\nBcc: x@y.z", "", "not an e-mail address"},
		{"  ", "", "no recipient"},
	}
	for _, tc := range cases {
		got, err := mailer.ParseRecipients(tc.in)
		switch {
		case tc.err == "" && (err != nil || strings.Join(got, ",") != tc.want):
			t.Errorf("ParseRecipients(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseRecipients(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
		}
	}
}
