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
	"runtime/pprof"
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

// serveMesh runs the mesh with up.Run on exactly the variables in envJSON
// (nothing from this process's environment), until stdin reaches its end
// (the bench closed it, or died) or a signal arrives.
func serveMesh(envJSON string, cpuProfile ...string) error {
	var env map[string]string
	if err := json.Unmarshal([]byte(envJSON), &env); err != nil {
		return fmt.Errorf("%s: environment: %w", serveArg, err)
	}
	if len(cpuProfile) > 0 {
		f, err := os.Create(cpuProfile[0])
		if err != nil {
			return fmt.Errorf("%s: CPU profile: %w", serveArg, err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("%s: CPU profile: %w", serveArg, err)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	return up.Run(ctx, config.Map(env), os.Stdout)
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

// bannerGateway finds the gateway's address in up.Run's banner.
var bannerGateway = regexp.MustCompile(`gateway\s+http://localhost:(\d+)`)

// mesh is the mesh process under test.
type mesh struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error // receives the process's exit once
	// URL is the gateway's base URL.
	URL string
}

// startMesh starts self in serve mode with env, its log going to logFile,
// and waits until the gateway answers /healthz with 200 (every service
// serving).
func startMesh(ctx context.Context, self string, env map[string]string, logFile io.Writer, cpuProfile string) (*mesh, error) {
	envJSON, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	args := []string{serveArg, string(envJSON)}
	if cpuProfile != "" {
		args = append(args, cpuProfile)
	}
	cmd := exec.Command(self, args...)
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
	m := &mesh{cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
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
