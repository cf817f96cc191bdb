// Package smtptest runs a real SMTP server (github.com/emersion/go-smtp)
// in-process for tests, on a loopback port, and keeps what it receives.
package smtptest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"io"
	"math/big"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Options configure the server.
type Options struct {
	// TLS offers STARTTLS with a self-signed certificate for 127.0.0.1.
	TLS bool
	// Username and Password, when set, are required (AUTH PLAIN) before
	// MAIL FROM.
	Username, Password string
}

// Received is one delivered message.
type Received struct {
	From string
	To   []string
	// Data is the message as sent after DATA.
	Data []byte
	// TLS tells whether the session was upgraded with STARTTLS.
	TLS bool
	// User is who authenticated ("" without AUTH).
	User string
}

// Server is a running SMTP server.
type Server struct {
	// Addr is host:port.
	Addr string
	// ClientTLS trusts the server's certificate (nil without TLS).
	ClientTLS *tls.Config
	opts      Options
	mu        sync.Mutex // guards got
	got       []Received
}

// Start starts a server for the test; it stops in t.Cleanup.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{opts: opts}
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		_, tlsOn := c.TLSConnectionState()
		return &session{srv: s, tls: tlsOn, conn: c}, nil
	}))
	srv.Domain = "localhost"
	srv.ReadTimeout = 30 * time.Second
	srv.WriteTimeout = 30 * time.Second
	srv.MaxMessageBytes = 32 << 20
	srv.AllowInsecureAuth = !opts.TLS
	if opts.TLS {
		cert, pool := selfSigned(t)
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		s.ClientTLS = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = lis.Addr().String()
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return s
}

// Messages returns what was delivered so far.
func (s *Server) Messages() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.got...)
}

// session is one SMTP session.
type session struct {
	srv  *Server
	conn *smtp.Conn
	tls  bool
	user string
	msg  Received
}

var errAuthRequired = smtp.ErrAuthRequired

func (s *session) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *session) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(identity, username, password string) error {
		if username != s.srv.opts.Username || password != s.srv.opts.Password {
			return errors.New("invalid username or password")
		}
		s.user = username
		return nil
	}), nil
}

func (s *session) Mail(from string, _ *smtp.MailOptions) error {
	if s.srv.opts.Username != "" && s.user == "" {
		return errAuthRequired
	}
	_, tlsOn := s.conn.TLSConnectionState()
	s.msg = Received{From: from, TLS: tlsOn, User: s.user}
	return nil
}

func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.msg.To = append(s.msg.To, to)
	return nil
}

func (s *session) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.msg.Data = b
	s.srv.mu.Lock()
	s.srv.got = append(s.srv.got, s.msg)
	s.srv.mu.Unlock()
	return nil
}

func (s *session) Reset()        { s.msg = Received{} }
func (s *session) Logout() error { return nil }

// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "smtptest"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// Part is a decoded leaf of a received MIME message.
type Part struct {
	ContentType, Disposition string
	Body                     []byte
}

// Parse parses a received message into its headers and its leaf parts
// (bodies decoded from base64), depth first.
func Parse(t testing.TB, data []byte) (*mail.Message, []Part) {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var parts []Part
	var walk func(ctype string, r io.Reader)
	walk = func(ctype string, r io.Reader) {
		media, params, err := mime.ParseMediaType(ctype)
		if err != nil {
			t.Fatal(err)
		}
		mr := multipart.NewReader(r, params["boundary"])
		for {
			p, err := mr.NextRawPart()
			if err == io.EOF {
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", media, err)
			}
			ct := p.Header.Get("Content-Type")
			if strings.HasPrefix(ct, "multipart/") {
				walk(ct, p)
				continue
			}
			raw, _ := io.ReadAll(p)
			body := raw
			if p.Header.Get("Content-Transfer-Encoding") == "base64" {
				body = decodeBase64(t, raw)
			}
			parts = append(parts, Part{ContentType: ct, Disposition: p.Header.Get("Content-Disposition"), Body: body})
		}
	}
	walk(msg.Header.Get("Content-Type"), msg.Body)
	return msg, parts
}

func decodeBase64(t testing.TB, raw []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	dec := base64.NewDecoder(base64.StdEncoding, newlineStripper{bytes.NewReader(raw)})
	if _, err := io.Copy(&out, dec); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// newlineStripper drops CR and LF, which base64 lines end with.
type newlineStripper struct{ r io.Reader }

func (n newlineStripper) Read(p []byte) (int, error) {
	k, err := n.r.Read(p)
	j := 0
	for _, c := range p[:k] {
		if c != '\r' && c != '\n' {
			p[j] = c
			j++
		}
	}
	return j, err
}
