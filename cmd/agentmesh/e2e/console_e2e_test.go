//go:build e2e

package e2e

import (
	"net"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// playwrightVersion is the playwright-core the console check runs on.
const playwrightVersion = "1.64.1"

// TestConsoleInABrowser drives the web console (gateway /console/) in
// headless Chromium against the whole mesh on the simulator provider:
// overview, a streamed chat turn, ingest and search, a classification run
// through both approvals, an upload followed phase by phase through the
// intake pipeline, the SQL agent's job kinds (a read confirmed and named
// before it runs, a write, an e-mail previewed then sent, a comparison's
// diff, the connection dropdown, the kept jobs), and analyses drawn as
// timelines, one finished and one cancelled (console.mjs). Around
// each action it checks what people rely on: links that restore the view
// after a reload and through back and forward, lists filled, filtered and
// paged, the busy state while work runs, results rendered rather than raw
// JSON, durations in human units. Screenshots go to E2E_OUTPUT_DIR/console
// (default: .agentmesh/e2e/console at the repository's root, beside make
// run's data, ignored by git and removed by make clean). It needs Chromium (Debian package chromium, or CHROMIUM=path)
// and npm to fetch playwright-core; without them it skips.
func TestConsoleInABrowser(t *testing.T) {
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium, _ = exec.LookPath("chromium")
	}
	npm, npmErr := exec.LookPath("npm")
	node, nodeErr := exec.LookPath("node")
	if chromium == "" || npmErr != nil || nodeErr != nil {
		t.Skip("needs chromium (apt install chromium), node and npm")
	}
	dir := t.TempDir()
	install := exec.Command(npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "playwright-core@"+playwrightVersion)
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("npm install playwright-core: %v\n%s", err, out)
	}
	script, err := os.ReadFile("console.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "console.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}

	// Paced like a model, so a job can be cancelled while it runs and a
	// streamed answer is seen growing before it ends.
	// The e-mail goes to a relay on loopback, which keeps what it was given.
	mail := startSMTPSink(t)
	m := startUp(t, t.TempDir(), "MODELGATEWAY_PROVIDER=sim", "MODELGATEWAY_SIM_LATENCY=300ms", "MODELGATEWAY_SIM_CHUNK_DELAY=40ms",
		"SQLAGENT_SMTP_ADDR="+mail.addr, "SQLAGENT_SMTP_TLS=none", "SQLAGENT_SMTP_FROM=SQL agent <sql-agent@example.com>")
	shots, err := consoleOutputDir()
	if err != nil {
		t.Fatal(err)
	}
	run := exec.Command(node, filepath.Join(dir, "console.mjs"))
	run.Env = append(os.Environ(), "BASE="+m.gateway, "CHROMIUM="+chromium, "SHOTS="+shots)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("console check: %v\n%s", err, out)
	}
	t.Logf("%s(screenshots in %s)", out, shots)
	// What the console confirmed was sent once, to the recipients typed.
	rcpts, messages := mail.received()
	slices.Sort(rcpts)
	if messages != 1 || !slices.Equal(rcpts, []string{"lead@example.com", "ops@example.com"}) {
		t.Errorf("the relay received %d messages for %q; want 1 for lead@ and ops@example.com", messages, rcpts)
	}
}

// smtpSink is an SMTP relay on loopback that accepts every message and
// keeps its envelope: the mail server SEND_EMAIL sends through, which
// this test cannot reach otherwise (SQLAGENT_SMTP_TLS=none: a relay on a
// trusted network, no STARTTLS, no AUTH).
type smtpSink struct {
	addr     string
	mu       sync.Mutex
	rcpts    []string // guarded by mu
	messages int      // guarded by mu
}

func startSMTPSink(t *testing.T) *smtpSink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &smtpSink{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

// serve speaks the server side of RFC 5321 for one connection, enough for
// a client that sends mail: EHLO/HELO, MAIL, RCPT, DATA, RSET, NOOP, QUIT.
func (s *smtpSink) serve(c net.Conn) {
	defer c.Close()
	tp := textproto.NewConn(c)
	var rcpts []string
	reply := func(line string) bool { return tp.PrintfLine("%s", line) == nil }
	if !reply("220 sink ESMTP") {
		return
	}
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO", "HELO":
			reply("250 sink")
		case "MAIL":
			rcpts = nil
			reply("250 ok")
		case "RCPT":
			// RCPT TO:<path> [parameters]
			_, addr, _ := strings.Cut(arg, "<")
			addr, _, _ = strings.Cut(addr, ">")
			rcpts = append(rcpts, addr)
			reply("250 ok")
		case "DATA":
			reply("354 end with <CRLF>.<CRLF>")
			if _, err := tp.ReadDotBytes(); err != nil {
				return
			}
			s.mu.Lock()
			s.messages++
			s.rcpts = append(s.rcpts, rcpts...)
			s.mu.Unlock()
			reply("250 queued")
		case "RSET", "NOOP":
			rcpts = nil
			reply("250 ok")
		case "QUIT":
			reply("221 bye")
			return
		default:
			reply("502 not implemented")
		}
	}
}

// received is the recipients of the messages accepted so far, and their
// number.
func (s *smtpSink) received() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.rcpts), s.messages
}

// consoleOutputDir is where the screenshots go: kept after the test, unlike
// t.TempDir, at a path known in advance so they can be looked at after a
// passing make e2e (which prints no test logs).
func consoleOutputDir() (string, error) {
	out := os.Getenv("E2E_OUTPUT_DIR")
	if out == "" {
		out = filepath.Join("..", "..", "..", ".agentmesh", "e2e") // the test runs in cmd/agentmesh/e2e
	}
	dir, err := filepath.Abs(filepath.Join(out, "console"))
	if err != nil {
		return "", err
	}
	return dir, os.MkdirAll(dir, 0o755)
}
