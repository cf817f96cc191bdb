// Package mailer sends the SQL agent's result e-mails over SMTP: a short
// text and HTML summary with the result as a CSV attachment, through a
// configured server, with STARTTLS (required unless turned off for a
// local relay) and PLAIN authentication.
package mailer

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"net/textproto"
	"strings"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// TLS modes.
const (
	// StartTLS upgrades the connection with STARTTLS and fails when the
	// server does not offer it.
	StartTLS = "starttls"
	// NoTLS sends in the clear: for a relay on the same host or network
	// only; authentication is then refused.
	NoTLS = "none"
)

// ErrSend is matched (errors.Is) by every failure to deliver a message.
var ErrSend = errors.New("sending the e-mail failed")

// Config is where and how to send.
type Config struct {
	// Addr is the SMTP server, host:port.
	Addr string
	// From is the sender address.
	From string
	// TLS is StartTLS (the default when empty) or NoTLS.
	TLS string
	// Username and Password authenticate with PLAIN when Username is set.
	// Password is a secret.
	Username, Password string
	// TLSConfig overrides the TLS settings (tests trust their own
	// certificate); nil: the system roots, server name from Addr.
	TLSConfig *tls.Config
}

// Mailer sends messages. It is safe for concurrent use.
type Mailer struct {
	cfg Config
}

// New checks cfg and returns a Mailer.
func New(cfg Config) (*Mailer, error) {
	if cfg.TLS == "" {
		cfg.TLS = StartTLS
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, fmt.Errorf("SMTP server address %q: want host:port", cfg.Addr)
	}
	if _, err := mail.ParseAddress(cfg.From); err != nil {
		return nil, fmt.Errorf("sender address %q: %v", cfg.From, err)
	}
	switch {
	case cfg.TLS != StartTLS && cfg.TLS != NoTLS:
		return nil, fmt.Errorf("TLS mode %q: want %s or %s", cfg.TLS, StartTLS, NoTLS)
	case cfg.TLS == NoTLS && cfg.Username != "":
		return nil, errors.New("a password is never sent without TLS: set the TLS mode to starttls, or drop the username")
	}
	return &Mailer{cfg: cfg}, nil
}

// Message is one e-mail with one attachment.
type Message struct {
	To      []string
	Subject string
	// Text and HTML are the two forms of the body.
	Text, HTML string
	// AttachmentName and Attachment are the attached file (text/csv).
	AttachmentName string
	Attachment     []byte
}

// ParseRecipients splits a list of addresses (RFC 5322, "Ana
// <ana@example.com>" or bare, separated by commas, semicolons or line
// breaks) and returns them as bare addresses, or an error naming the
// first that is not one.
func ParseRecipients(list string) ([]string, error) {
	var out []string
	for _, f := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ';' || r == '\n' || r == '\r' }) {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		a, err := mail.ParseAddress(f)
		if err != nil || !strings.Contains(a.Address, "@") || strings.ContainsAny(a.Address, "\r\n<>") {
			return nil, fmt.Errorf("%q is not an e-mail address", f)
		}
		out = append(out, a.Address)
	}
	if len(out) == 0 {
		return nil, errors.New("no recipient given")
	}
	return out, nil
}

// Send delivers m, within ctx's deadline. Errors match ErrSend and carry
// the server's reply, never the password.
func (mr *Mailer) Send(ctx context.Context, m Message) error {
	body, err := mr.compose(m)
	if err != nil {
		return err
	}
	if err := mr.deliver(ctx, m.To, body); err != nil {
		return fmt.Errorf("%w: %v", ErrSend, err)
	}
	return nil
}

// deliver runs one SMTP transaction.
func (mr *Mailer) deliver(ctx context.Context, to []string, body []byte) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", mr.cfg.Addr)
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	var c *smtp.Client
	if mr.cfg.TLS == StartTLS {
		tc := mr.cfg.TLSConfig
		if tc == nil {
			host, _, _ := net.SplitHostPort(mr.cfg.Addr)
			tc = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
		}
		if c, err = smtp.NewClientStartTLS(conn, tc); err != nil {
			_ = conn.Close()
			return err
		}
	} else {
		c = smtp.NewClient(conn)
	}
	defer c.Close()
	if mr.cfg.Username != "" {
		if err := c.Auth(sasl.NewPlainClient("", mr.cfg.Username, mr.cfg.Password)); err != nil {
			return err
		}
	}
	from, _ := mail.ParseAddress(mr.cfg.From) // checked by New
	if err := c.Mail(from.Address, nil); err != nil {
		return err
	}
	for _, r := range to {
		if err := c.Rcpt(r, nil); err != nil {
			return err
		}
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write(body); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return c.Quit()
}

// compose renders m as a MIME message: multipart/mixed holding a
// multipart/alternative (text, HTML) and the base64 attachment.
func (mr *Mailer) compose(m Message) ([]byte, error) {
	var b bytes.Buffer
	var id [12]byte
	_, _ = rand.Read(id[:])
	from, _ := mail.ParseAddress(mr.cfg.From)
	domain := from.Address[strings.LastIndexByte(from.Address, '@')+1:]
	mixed := multipart.NewWriter(&b)
	altBoundary := multipart.NewWriter(io.Discard).Boundary()
	head := []struct{ k, v string }{
		{"From", from.String()},
		{"To", strings.Join(m.To, ", ")},
		{"Subject", mime.QEncoding.Encode("utf-8", m.Subject)},
		{"Date", time.Now().UTC().Format(time.RFC1123Z)},
		{"Message-ID", "<" + hex.EncodeToString(id[:]) + "@" + domain + ">"},
		{"MIME-Version", "1.0"},
		{"Content-Type", "multipart/mixed; boundary=" + mixed.Boundary()},
	}
	var hb bytes.Buffer
	for _, h := range head {
		fmt.Fprintf(&hb, "%s: %s\r\n", h.k, h.v)
	}
	hb.WriteString("\r\n")
	altPart, err := mixed.CreatePart(textproto.MIMEHeader{"Content-Type": {"multipart/alternative; boundary=" + altBoundary}})
	if err != nil {
		return nil, err
	}
	alt := multipart.NewWriter(altPart)
	if err := alt.SetBoundary(altBoundary); err != nil {
		return nil, err
	}
	for _, p := range []struct{ ctype, body string }{{"text/plain; charset=utf-8", m.Text}, {"text/html; charset=utf-8", m.HTML}} {
		w, err := alt.CreatePart(textproto.MIMEHeader{"Content-Type": {p.ctype}, "Content-Transfer-Encoding": {"base64"}})
		if err != nil {
			return nil, err
		}
		writeBase64(w, []byte(p.body))
	}
	if err := alt.Close(); err != nil {
		return nil, err
	}
	att, err := mixed.CreatePart(textproto.MIMEHeader{
		"Content-Type":              {mime.FormatMediaType("text/csv", map[string]string{"charset": "utf-8", "name": m.AttachmentName})},
		"Content-Disposition":       {mime.FormatMediaType("attachment", map[string]string{"filename": m.AttachmentName})},
		"Content-Transfer-Encoding": {"base64"},
	})
	if err != nil {
		return nil, err
	}
	writeBase64(att, m.Attachment)
	if err := mixed.Close(); err != nil {
		return nil, err
	}
	return append(hb.Bytes(), b.Bytes()...), nil
}

// writeBase64 writes data base64-encoded in lines of 76 characters, as
// MIME wants.
func writeBase64(w io.Writer, data []byte) {
	enc := base64.StdEncoding.EncodeToString(data)
	for len(enc) > 76 {
		_, _ = w.Write([]byte(enc[:76] + "\r\n"))
		enc = enc[76:]
	}
	_, _ = w.Write([]byte(enc + "\r\n"))
}
