//go:build e2ecluster

package cluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// proc is one OS process of the cluster, started again with the same
// command, environment and log file after it is killed (as Kubernetes
// restarts a container, or an operator a database).
type proc struct {
	name string
	path string
	args []string
	env  []string // the whole environment: nothing is inherited
	log  string   // stdout and stderr, appended across restarts

	mu     sync.Mutex // guards the fields below
	cmd    *exec.Cmd
	done   chan struct{} // closed when the current process has exited
	starts int
}

// start starts the process; it is an error to start a running one.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("%s is already running", p.name)
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "==== %s start %d at %s\n", p.name, p.starts+1, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so a kill of the test's terminal does not
	// reach it before the test's cleanup does, and cleanup can kill it whole.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	p.starts++
	return nil
}

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// stop asks the process to shut down (SIGTERM) and kills it after grace.
func (p *proc) stop(grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		p.kill()
	}
}

// pid is the running process's id, 0 when it is not running.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return 0
	}
	return p.cmd.Process.Pid
}

// exited reports whether the process was started and has exited.
func (p *proc) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && isClosed(p.done)
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// tail returns the last n bytes of the process's log, for failure messages.
func (p *proc) tail(n int64) string {
	f, err := os.Open(p.log)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil {
		return err.Error()
	}
	return string(b)
}

// newProc describes a process logging to logDir/name.log.
func newProc(logDir, name, path string, env []string, args ...string) *proc {
	return &proc{name: name, path: path, args: args, env: env, log: filepath.Join(logDir, name+".log")}
}

// freePort returns a TCP port free on every one of ips now. Services bind
// it themselves later, so another program could take it in between. The
// suite's own processes bind their other ports as port 0 (metrics, the
// simulator), which the kernel takes from its ephemeral range: a port
// chosen the same way collided with one of them (a CI run's indexer-b
// found its gRPC port taken by another service's metrics listener). So
// the ports are drawn at random below that range, where no port-0 bind
// lands. A port is handed out once: the listeners that test it close at
// once, so a later draw could find it free again before its process binds
// it (a CI run's nats-3 drew nats-1's client port for its routes).
func freePort(ips ...string) (int, error) {
	low, high := belowEphemeral()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 200 {
		port := low + rand.IntN(high-low)
		if handedOut.ports[port] {
			continue
		}
		var held []net.Listener
		ok := true
		for _, ip := range ips {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
			if err != nil {
				ok = false
				break
			}
			held = append(held, l)
		}
		for _, l := range held {
			l.Close()
		}
		if ok {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no port free on every address")
}

// handedOut holds the ports freePort returned.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// belowEphemeral is a range of ports under the kernel's ephemeral range
// (net.ipv4.ip_local_port_range; 32768 by default).
func belowEphemeral() (low, high int) {
	high = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var first, last int
		if _, err := fmt.Sscan(string(b), &first, &last); err == nil && first > 12000 {
			high = first
		}
	}
	return 10000, high
}
