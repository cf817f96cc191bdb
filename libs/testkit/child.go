package testkit

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Child is a process running one test of the current test binary — a
// service that a crash test kills with SIGKILL. It talks to its parent by
// printing lines on its standard output (read with Next); its standard
// error goes to the parent's.
type Child struct {
	t     testing.TB
	cmd   *exec.Cmd
	lines chan string   // the child's output lines; closed at its end
	gone  chan struct{} // closed once the child has exited
}

// StartChild runs the test named test of this binary (a test that skips
// unless its environment says it is the child) as a process, with env
// ("NAME=value") added to this process's environment. The child is killed,
// if still running, when t ends.
func StartChild(t testing.TB, test string, env ...string) *Child {
	t.Helper()
	c := &Child{t: t, lines: make(chan string, 64), gone: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stderr = os.Stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		_ = c.cmd.Wait()
		close(c.gone)
	}()
	t.Cleanup(c.kill)
	return c
}

// Next returns the rest of the next line the child prints that starts
// with prefix, skipping other lines; it fails the test if the child exits
// first or prints none within a minute.
func (c *Child) Next(prefix string) string {
	c.t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				c.t.Fatalf("child exited before printing %q", prefix)
			}
			if v, found := strings.CutPrefix(l, prefix); found {
				return v
			}
		case <-deadline:
			c.t.Fatalf("child did not print %q within a minute", prefix)
		}
	}
}

// Kill kills the child with SIGKILL — no clean-up of any kind runs in it
// — and waits until it is gone. A child that exited already stays so.
func (c *Child) Kill() {
	c.t.Helper()
	c.kill()
}

func (c *Child) kill() {
	select {
	case <-c.gone:
		return
	default:
	}
	_ = c.cmd.Process.Kill() // fails only if it has exited meanwhile
	for range c.lines {
	}
	<-c.gone
}
