package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/up"
	"github.com/agentmesh/agentmesh/libs/config"
)

// serveArg, as the first argument, makes this binary serve the mesh instead
// of measuring it. The bench starts itself a second time this way so that
// the mesh has a process of its own, as under `agentmesh up`: its CPU time
// is then read apart from the load generator's, and the clients' garbage
// does not run the mesh's collector.
const serveArg = "serve-mesh"

// serveMesh runs the mesh with up.Run configured by exactly the variables
// in envJSON (nothing from this process's environment, which gives only the
// Go runtime its settings: see processEnv), until stdin reaches its end
// (the bench closed it, or died) or a signal arrives. Lines on stdin
// command profiles of the process (see serveProfiles).
func serveMesh(envJSON string) error {
	var env map[string]string
	if err := json.Unmarshal([]byte(envJSON), &env); err != nil {
		return fmt.Errorf("%s: environment: %w", serveArg, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	profiled := make(chan struct{})
	go func() {
		defer close(profiled)
		serveProfiles(os.Stdin, os.Stdout)
		cancel()
	}()
	err := up.Run(ctx, config.Map(env), os.Stdout)
	cancel()
	select {
	case <-profiled: // stdin ended: any profile is written
	case <-time.After(time.Second):
	}
	return err
}

// profileAck starts the lines serveProfiles answers with on the mesh's
// stdout.
const profileAck = "growth-profile:"

// serveProfiles reads commands from in until its end, starting ("profile
// PATH") and stopping ("stop") the process's CPU profile or writing its
// live heap's profile after a collection ("heap PATH"), and answers each
// on out with a line starting with profileAck: "ok" once done, or "error"
// and why. A profile still running at the end is stopped.
func serveProfiles(in io.Reader, out io.Writer) {
	var f *os.File
	stopProfile := func() error {
		if f == nil {
			return nil
		}
		pprof.StopCPUProfile()
		err := f.Close()
		f = nil
		return err
	}
	defer stopProfile()
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		var err error
		switch cmd {
		case "profile":
			if err = stopProfile(); err == nil {
				if f, err = os.Create(arg); err == nil {
					if err = pprof.StartCPUProfile(f); err != nil {
						_ = f.Close()
						f = nil
					}
				}
			}
		case "stop":
			err = stopProfile()
		case "heap":
			err = writeHeapProfile(arg)
		default:
			err = fmt.Errorf("unknown command %q", cmd)
		}
		if err != nil {
			fmt.Fprintf(out, "%s error %v\n", profileAck, err)
		} else {
			fmt.Fprintf(out, "%s ok\n", profileAck)
		}
	}
}

// meshEnv is the environment of the mesh under test: `agentmesh up`'s
// defaults, on the built-in simulator answering at once, with the data in
// dataDir and every port chosen by the kernel; extra entries win.
func meshEnv(dataDir string, extra map[string]string) map[string]string {
	env := map[string]string{
		"AGENTMESH_DATA_DIR":           dataDir,
		"AGENTMESH_GRPC_BASE_PORT":     "0",
		"HTTP_ADDR":                    "127.0.0.1:0",
		"LOG_LEVEL":                    "warn",
		"MODELGATEWAY_PROVIDER":        "sim",
		"MODELGATEWAY_SIM_LATENCY":     "0s",
		"MODELGATEWAY_SIM_CHUNK_DELAY": "0s",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// runtimeVars are the settings the Go runtime reads from the process's
// environment as it starts, before up.Run reads its configuration (which
// the mesh gets as a map): GOGC, say, in -env must reach the collector.
var runtimeVars = []string{"GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GODEBUG", "GOTRACEBACK"}

// processEnv is the mesh process's environment: the bench's own, with the
// runtime's settings from env in place of the bench's.
func processEnv(own []string, env map[string]string) []string {
	out := make([]string, 0, len(own)+len(runtimeVars))
	for _, kv := range own {
		k, _, _ := strings.Cut(kv, "=")
		if _, set := env[k]; !set || !slices.Contains(runtimeVars, k) {
			out = append(out, kv)
		}
	}
	for _, k := range runtimeVars {
		if v, ok := env[k]; ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// bannerGateway finds the gateway's address in up.Run's banner.
var bannerGateway = regexp.MustCompile(`gateway\s+http://localhost:(\d+)`)

// mesh is the mesh process under test.
type mesh struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error  // receives the process's exit once
	acks  chan string // the answers to profile commands (see serveProfiles)
	// URL is the gateway's base URL.
	URL string
}

// startMesh starts self in serve mode with env, its log going to logFile,
// and waits until the gateway answers /healthz with 200 (every service
// serving).
func startMesh(ctx context.Context, self string, env map[string]string, logFile io.Writer) (*mesh, error) {
	envJSON, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, serveArg, string(envJSON))
	cmd.Env = processEnv(os.Environ(), env)
	cmd.Stderr = logFile
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the mesh: %w", err)
	}
	m := &mesh{cmd: cmd, stdin: stdin, done: make(chan error, 1), acks: make(chan string, 1)}
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if ack, ok := strings.CutPrefix(sc.Text(), profileAck+" "); ok {
				m.acks <- ack
				continue
			}
			if p := bannerGateway.FindStringSubmatch(sc.Text()); p != nil {
				select {
				case port <- p[1]:
				default:
				}
			}
		}
		m.done <- cmd.Wait()
	}()
	fail := func(err error) (*mesh, error) {
		m.stop()
		return nil, err
	}
	select {
	case p := <-port:
		m.URL = "http://127.0.0.1:" + p
	case err := <-m.done:
		m.done <- err
		return fail(fmt.Errorf("the mesh exited before serving: %v", err))
	case <-time.After(2 * time.Minute):
		return fail(errors.New("the mesh printed no banner within 2 minutes"))
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(m.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return m, nil
			}
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("/healthz of %s not 200 within a minute (last: %v)", m.URL, err))
		}
		select {
		case err := <-m.done:
			m.done <- err
			return fail(fmt.Errorf("the mesh exited before serving: %v", err))
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writeHeapProfile collects garbage and writes the profile of the live heap
// to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	err = pprof.Lookup("heap").WriteTo(f, 0)
	return errors.Join(err, f.Close())
}

// heapProfile writes the mesh process's live heap profile to path.
func (m *mesh) heapProfile(path string) error { return m.command("heap " + path) }

// profile starts writing the mesh process's CPU profile to path, or, with
// path "", stops the one running and waits until it is written.
func (m *mesh) profile(path string) error {
	cmd := "stop"
	if path != "" {
		cmd = "profile " + path
	}
	return m.command(cmd)
}

// command sends a command to the mesh's serveProfiles and waits for its
// answer.
func (m *mesh) command(cmd string) error {
	if _, err := io.WriteString(m.stdin, cmd+"\n"); err != nil {
		return fmt.Errorf("mesh profile: %w", err)
	}
	select {
	case ack := <-m.acks:
		if ack != "ok" {
			return fmt.Errorf("mesh profile: %s", ack)
		}
		return nil
	case <-time.After(30 * time.Second):
		return errors.New("mesh profile: no answer within 30 s")
	}
}

// pid is the mesh process's id.
func (m *mesh) pid() int { return m.cmd.Process.Pid }

// stop asks the mesh to shut down (closes its stdin) and waits up to a
// minute, then kills it.
func (m *mesh) stop() error {
	_ = m.stdin.Close()
	select {
	case err := <-m.done:
		return err
	case <-time.After(time.Minute):
		_ = m.cmd.Process.Kill()
		<-m.done
		return errors.New("the mesh did not stop within a minute: killed")
	}
}
