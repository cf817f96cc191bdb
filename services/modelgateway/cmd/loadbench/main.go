// Command loadbench measures the model gateway's added latency. It starts a
// local OpenAI-compatible mock upstream with a fixed 20 ms latency in its
// own process (mock.go), runs the gateway as a child process (so its peak
// RSS is its own), and drives a fixed-rate open-loop load through (a)
// ModelService.Chat and (b) straight to the mock, then the same for
// streaming time to first chunk, printing achieved RPS, errors, p50/p99 of
// each path, the overhead a−b, the gateway's CPU time and read/write system
// calls per request, how busy the machine's CPUs were while the gateway
// path ran, and the gateway's peak RSS (VmHWM). The two paths alternate in
// rounds so that drift on a shared machine hits both alike. The mock notes
// when each request reached it and when its wait ended, so a second table
// splits each path's time into the request leg and the response leg. The
// mock's wait and the load's pacing sleep on the kernel's high-resolution
// timer (precise.go). First it measures what a process boundary costs when
// the CPUs are idle (wakeprobe.go), the floor under any proxy's added
// latency.
//
//	go run ./services/modelgateway/cmd/loadbench -duration 10s -rates 500,1000,2000
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/agentmesh/agentmesh/libs/config"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/telemetry"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgateway"
)

func main() {
	var (
		serve    = flag.Bool("serve-gateway", false, "internal: run the gateway (child process)")
		echo     = flag.Bool("serve-echo", false, "internal: echo bytes over TCP (child process of the wake-up probe)")
		mockUp   = flag.Bool("serve-mock", false, "internal: run the mock upstream (child process)")
		relayTo  = flag.String("serve-relay", "", "internal: relay TCP connections to this address (child process)")
		relay    = flag.Bool("relay", true, "also run the direct path's requests through a process that only copies bytes (the tcp relay row): the floor under any proxy's overhead on this machine")
		duration = flag.Duration("duration", 10*time.Second, "load duration per rate and path")
		rounds   = flag.Int("rounds", 5, "alternate direct and gateway this many times per rate (the duration is split between rounds), so slow drift on the machine hits both paths alike")
		rates    = flag.String("rates", "500,1000,2000", "request rates to run, per second")
		latency  = flag.Duration("upstream-latency", 20*time.Millisecond, "mock upstream latency")
		modes    = flag.String("modes", "unary,stream", "modes to run: unary (Chat), stream (ChatStream time to first chunk)")
		compare  = flag.String("compare", "", "also run a second gateway with these extra variables (space-separated X=v), in the same rounds, and print its rows as \"gateway B\" and \"openai http api (model gateway) B\": an A/B of a setting within one run")
		gwB      = flag.String("gateway-b", "", "path of a second loadbench binary (another build of the gateway: another commit, or built with -pgo=off): run its gateway as \"gateway B\" in the same rounds, with the -compare variables if any: an A/B of two builds within one run")
		httpGW   = flag.String("http-gateway", "", "path of the REST gateway's binary (go build ./gateway): also send the same chat request through its OpenAI-compatible API (/openai/v1/chat/completions) in front of the model gateway, in the same rounds (the \"openai http api (REST gateway)\" row)")
		httpGWB  = flag.String("http-gateway-b", "", "path of a second REST gateway binary (another build, say the previous commit's), run like -http-gateway in front of the same model gateway in the same rounds: its row is \"openai http api (REST gateway) B\", an A/B of two builds within one run")
		httpEnvB = flag.String("http-gateway-b-env", "", "extra variables (space-separated X=v) for \"openai http api (REST gateway) B\", which runs the -http-gateway binary unless -http-gateway-b names another: an A/B of a setting of the REST gateway within one run")
	)
	flag.Parse()
	if *echo {
		if err := serveEcho(); err != nil {
			fmt.Fprintln(os.Stderr, "echo:", err)
			os.Exit(1)
		}
		return
	}
	if *relayTo != "" {
		if err := serveRelay(*relayTo); err != nil {
			fmt.Fprintln(os.Stderr, "relay:", err)
			os.Exit(1)
		}
		return
	}
	if *mockUp {
		if err := serveMock(*latency); err != nil {
			fmt.Fprintln(os.Stderr, "mock:", err)
			os.Exit(1)
		}
		return
	}
	if *serve {
		if err := serveGateway(); err != nil {
			fmt.Fprintln(os.Stderr, "gateway:", err)
			os.Exit(1)
		}
		return
	}
	// The load generator's own collector pauses land in both paths' tails;
	// it gets the gateway's setting so they stay rare.
	modelgateway.TuneGC()
	if (*httpGWB != "" || *httpEnvB != "") && *httpGW == "" {
		fmt.Fprintln(os.Stderr, "loadbench: -http-gateway-b and -http-gateway-b-env need -http-gateway")
		os.Exit(2)
	}
	if *httpEnvB != "" && *httpGWB == "" {
		*httpGWB = *httpGW
	}
	if err := run(*duration, *rounds, *rates, *modes, *latency, strings.Fields(*compare), *gwB, *relay, *httpGW, *httpGWB, strings.Fields(*httpEnvB)); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(1)
	}
}

// serveGateway runs modelgateway.Run configured from the environment on a
// loopback port and prints "ADDR <host:port>".
func serveGateway() error {
	modelgateway.TuneGC() // as the gateway's own binary does
	var cfg modelgateway.Config
	if err := config.Load("", &cfg, config.Env()); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if path := os.Getenv("LOADBENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if path := os.Getenv("LOADBENCH_TRACE"); path != "" {
		go traceOnSignal(ctx, path)
	}
	if path := os.Getenv("LOADBENCH_MEMPROFILE"); path != "" {
		runtime.MemProfileRate = 4096
		defer func() {
			if f, err := os.Create(path); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
		}()
	}
	// Telemetry as a deployed gateway has it: SDK meter and tracer
	// providers (Prometheus reader, every trace sampled), no exporter.
	tel, err := telemetry.Setup(ctx, modelgateway.Name, service.Version, cfg.Telemetry)
	if err != nil {
		return err
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	// The gateway's own OpenAI-compatible listener, with the REST
	// gateway's key: the "openai http api (model gateway)" row.
	olis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	cfg.OpenAIListener = olis
	cfg.APIKeys = httpAPIKey + "=bench"
	ready := func() { fmt.Printf("ADDR %s %s\n", lis.Addr(), olis.Addr()) }
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return modelgateway.Run(ctx, &cfg, service.Runtime{Logger: log, Listener: lis, Server: cfg.Server, Ready: ready})
}

// traceOnSignal writes an execution trace of the gateway while it serves
// the load: SIGUSR1 (sent before each gateway round) starts one in
// path.N, SIGUSR2 (after the round) ends it. `go tool trace -pprof=sched`
// on one shows where goroutines waited to run.
func traceOnSignal(ctx context.Context, path string) {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	var f *os.File
	n := 0
	for {
		select {
		case <-ctx.Done():
			if f != nil {
				trace.Stop()
				_ = f.Close()
			}
			return
		case s := <-sig:
			switch {
			case s == syscall.SIGUSR1 && f == nil:
				n++
				var err error
				if f, err = os.Create(fmt.Sprintf("%s.%d", path, n)); err != nil {
					fmt.Fprintln(os.Stderr, "trace:", err)
					continue
				}
				if err := trace.Start(f); err != nil {
					fmt.Fprintln(os.Stderr, "trace:", err)
					_ = f.Close()
					f = nil
				}
			case s == syscall.SIGUSR2 && f != nil:
				trace.Stop()
				_ = f.Close()
				f = nil
			}
		}
	}
}

const routing = `
providers:
  mock: {type: openai, base_url: %q, max_concurrency: 1024, max_queue: 1024}
models:
  chat: [{provider: mock, model: bench-model}]
`

func run(duration time.Duration, rounds int, rateList, modeList string, latency time.Duration, compare []string, gwB string, relay bool, httpGW, httpGWB string, httpEnvB []string) error {
	if rounds < 1 {
		return fmt.Errorf("-rounds: must be at least 1")
	}
	var rates []int
	for _, s := range strings.Split(rateList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("-rates: %w", err)
		}
		rates = append(rates, n)
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The mock runs in its own process, as a provider does: sharing the
	// load generator's, its 20 ms wait overran by ~300 µs more in the
	// direct rounds (where the same process also ran the client side)
	// than in the gateway rounds, a handicap to the baseline larger than
	// the overhead being measured.
	mockChild, mockAddr, err := startChild(self, os.Environ(), "-serve-mock", "-upstream-latency", latency.String())
	if err != nil {
		return fmt.Errorf("mock: %w", err)
	}
	defer stopChild(mockChild)
	upstreamURL := "http://" + mockAddr
	dir, err := os.MkdirTemp("", "loadbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	routingFile := filepath.Join(dir, "routing.yaml")
	if err := os.WriteFile(routingFile, []byte(fmt.Sprintf(routing, upstreamURL)), 0o600); err != nil {
		return err
	}
	env := append(os.Environ(), "MODELGATEWAY_CONFIG="+routingFile, "METRICS_ADDR=", "LOG_LEVEL=warn",
		"MODELGATEWAY_PROBE_INTERVAL=1h")
	// LOADBENCH_GW_X=v sets X=v for the gateway only (GOGC, GOMAXPROCS, …).
	for _, kv := range os.Environ() {
		if rest, ok := strings.CutPrefix(kv, "LOADBENCH_GW_"); ok {
			env = append(env, rest)
		}
	}
	httpClient := &http.Client{Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute}}
	b := &bench{http: httpClient, upstream: upstreamURL}

	hops := []*hop{{name: "gateway"}}
	if len(compare) > 0 || gwB != "" {
		for _, kv := range compare {
			if !strings.Contains(kv, "=") {
				return fmt.Errorf("-compare: %q is not X=v", kv)
			}
		}
		hops = append(hops, &hop{name: "gateway B", extra: compare, bin: gwB})
	}
	for _, g := range hops {
		bin := cmp.Or(g.bin, self)
		if err := g.start(bin, append(slices.Clip(env), g.extra...)); err != nil {
			return err
		}
		defer g.stop()
	}
	// The OpenAI-compatible API: the same request as an OpenAI client
	// sends it, to the first gateway's own listener; to the REST gateway in
	// front of it; and, given a second build, the same through that.
	// Gateway B's own listener gets a row too.
	for i, g := range slices.Clone(hops) {
		hops = append(hops, openAIOf(g, b, "openai http api (model gateway)"+[]string{"", " B"}[i]))
	}
	for _, h := range []struct {
		name, bin string
		env       []string
	}{{"openai http api (REST gateway)", httpGW, nil}, {"openai http api (REST gateway) B", httpGWB, httpEnvB}} {
		if h.bin == "" {
			continue
		}
		for _, kv := range h.env {
			if !strings.Contains(kv, "=") {
				return fmt.Errorf("-http-gateway-b-env: %q is not X=v", kv)
			}
		}
		g := &hop{name: h.name, extra: h.env}
		if err := g.startHTTPGateway(h.bin, b, hops[0].addr); err != nil {
			return err
		}
		defer g.stop()
		hops = append(hops, g)
	}
	if relay {
		// The floor under any proxy: the same HTTP requests as the direct
		// path, through a process that only copies bytes each way.
		r := &hop{name: "tcp relay"}
		if err := r.startRelay(self, b, mockAddr); err != nil {
			return err
		}
		defer r.stop()
		hops = append(hops, r)
	}

	// Warm up connections on every path.
	warm := min(duration, 2*time.Second)
	for _, g := range hops {
		b.load(200, warm, g.unary)
	}
	b.load(200, warm, b.direct(upstreamURL, false))

	fmt.Printf("model gateway overhead: upstream mock latency %v, %v per rate and path in %d alternating rounds, GOMAXPROCS=%s, %d CPUs, load average %s before the load\n\n",
		latency, duration, rounds, envOr("GOMAXPROCS", "default"), numCPU(), loadAverage())
	fmt.Printf("openai http api (model gateway): POST /openai/v1/chat/completions (API key auth, JSON or SSE) on the gateway's own listener (MODELGATEWAY_OPENAI_ADDR), which calls ModelService in process; its CPU and RSS are the gateway's, as in the gateway row\n\n")
	if httpGW != "" {
		fmt.Printf("openai http api (REST gateway): the same request to the REST gateway's /openai/v1 in front of the gateway above; its overhead includes the gateway's, its CPU and RSS are the REST gateway's own\n\n")
	}
	if httpGWB != "" {
		fmt.Printf("openai http api (REST gateway) B: the same through %s %s, in the same rounds\n\n", httpGWB, strings.Join(httpEnvB, " "))
	}
	if len(compare) > 0 || gwB != "" {
		fmt.Printf("gateway B runs %s with %s, in the same rounds as gateway\n\n",
			cmp.Or(gwB, "the same build"), cmp.Or(strings.Join(compare, " "), "the same variables"))
	}
	hot, idle, err := wakeProbe(self)
	if err != nil {
		return fmt.Errorf("wake-up probe: %w", err)
	}
	fmt.Printf("wake-up probe: a 1-byte loopback TCP round trip to another process takes p50 %s back to back, %s after %s idle:\n"+
		"a process boundary that finds the CPUs idle costs about %s here, and the gateway path crosses two more than the direct path.\n\n",
		us(hot), us(idle), us(probeGap), us((idle-hot)/2))
	fmt.Println("| mode | target RPS | path | achieved RPS | errors | p50 | p99 | overhead p50 | overhead p99 | CPU/request | syscalls/request | machine CPU busy | peak RSS |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	var timelines []string
	for _, mode := range strings.Split(modeList, ",") {
		mode = strings.TrimSpace(mode)
		if mode != "unary" && mode != "stream" {
			return fmt.Errorf("-modes: unknown mode %q (want unary or stream)", mode)
		}
		if mode == "stream" {
			mode = "stream TTFC"
		}
		for _, rate := range rates {
			directFn := b.direct(upstreamURL, mode != "unary")
			var ds []sample
			var directLegs legs
			for _, g := range hops {
				g.reset()
			}
			for r := range rounds {
				b.timeline()
				ds = append(ds, b.load(rate, duration/time.Duration(rounds), directFn))
				directLegs.add(ds[len(ds)-1], b.timeline())
				order := slices.Clone(hops)
				if r%2 == 1 {
					slices.Reverse(order) // no hop always runs right after the direct path
				}
				for _, g := range order {
					fn := g.unary
					if mode != "unary" {
						fn = g.stream
					}
					g.round(func() sample { return b.load(rate, duration/time.Duration(rounds), fn) })
					g.legs.add(g.samples[len(g.samples)-1], b.timeline())
				}
			}
			d := summarize(ds)
			fmt.Printf("| %s | %d | direct | %.0f | %d | %s | %s | | | | | | |\n", mode, rate, d.rps, d.errors, us(d.p50), us(d.p99))
			timelines = append(timelines, directLegs.row(mode, rate, "direct", nil))
			for _, gw := range hops {
				g := summarize(gw.samples)
				fmt.Printf("| %s | %d | %s | %.0f | %d | %s | %s | %s | %s | %s | %.1f | %s | %s |\n", mode, rate, gw.name, g.rps, g.errors, us(g.p50), us(g.p99),
					us(g.p50-d.p50), us(g.p99-d.p99), us(gw.cpu/time.Duration(g.n)), float64(gw.sys)/float64(g.n), percent(gw.busy, gw.total), peakRSS(gw.child.Process.Pid))
				timelines = append(timelines, gw.legs.row(mode, rate, gw.name, &directLegs))
				if g.firstErr != nil || d.firstErr != nil {
					fmt.Printf("|  first errors: %s %v; direct %v |\n", gw.name, g.firstErr, d.firstErr)
				}
			}
		}
	}
	fmt.Printf("\nload average after the load: %s\n\n", loadAverage())
	fmt.Println("Where each request's time went (p50 of each leg, from the mock's and the load generator's clocks): " +
		"start late = the load generator's goroutine began after the request was due; request leg = due → the mock has read the request; " +
		"mock wait = the mock's fixed latency and by how much its sleep overran; response leg = the mock woke → the caller has the answer (unary) or the first chunk (stream). " +
		"The other rows add, in brackets, the difference to the direct path.")
	fmt.Println()
	fmt.Println("| mode | target RPS | path | requests joined | start late | request leg | mock wait | response leg |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, t := range timelines {
		fmt.Println(t)
	}
	return nil
}

// hop is one child process the requests go through under load (a gateway,
// or the tcp relay), with what its rounds measured.
type hop struct {
	name   string
	extra  []string // variables it runs with beyond the shared ones
	bin    string   // a gateway's binary when not this one
	child  *exec.Cmd
	addr   string           // where it listens
	openAI string           // a gateway's OpenAI-compatible listener
	shared bool             // its child is another hop's, which stops it
	conn   *grpc.ClientConn // nil for the relay
	client modelv1.ModelServiceClient
	// unary and stream send one request through it.
	unary, stream func(context.Context, int64) error

	samples     []sample
	legs        legs
	cpu         time.Duration
	sys         int64
	busy, total int64
}

func (g *hop) start(self string, env []string) error {
	child, addrs, err := startChild(self, env, "-serve-gateway")
	if err != nil {
		return fmt.Errorf("%s: %w", g.name, err)
	}
	addr, openAI, _ := strings.Cut(addrs, " ")
	g.openAI = openAI
	// The load calls the gateway as the mesh's services do. A default
	// grpc-go client instead estimates bandwidth, answering each response
	// with a window update and a ping the gateway must read and answer: a
	// third of its system calls per call here.
	conn, err := grpcx.Dial(addr)
	if err != nil {
		stopChild(child)
		return err
	}
	g.child, g.addr, g.conn, g.client = child, addr, conn, modelv1.NewModelServiceClient(conn)
	g.unary, g.stream = g.chat, g.chatStream
	return nil
}

// openAIOf is the hop through gw's own OpenAI-compatible listener: the
// same process as gw, reached over HTTP with the REST gateway's key.
func openAIOf(gw *hop, b *bench, name string) *hop {
	api := "http://" + gw.openAI + "/openai/v1"
	return &hop{name: name, child: gw.child, shared: true,
		unary:  func(ctx context.Context, id int64) error { return b.post1(ctx, api, "chat", httpAPIKey, id) },
		stream: func(ctx context.Context, id int64) error { return b.postStream1(ctx, api, "chat", httpAPIKey, id) },
	}
}

// startRelay starts the tcp relay to the mock at to; requests through it
// are the direct path's.
func (g *hop) startRelay(self string, b *bench, to string) error {
	child, addr, err := startChild(self, os.Environ(), "-serve-relay", to)
	if err != nil {
		return fmt.Errorf("%s: %w", g.name, err)
	}
	g.child = child
	g.unary, g.stream = b.direct("http://"+addr, false), b.direct("http://"+addr, true)
	return nil
}

// httpAPIKey is the REST gateway's API key in the bench.
const httpAPIKey = "loadbench-key"

// startHTTPGateway runs the REST gateway binary at bin in front of the
// model gateway at modelAddr (the other services' addresses lead nowhere:
// their routes are not used) and waits until it serves.
func (g *hop) startHTTPGateway(bin string, b *bench, modelAddr string) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	nobody := "127.0.0.1:1"
	child := exec.Command(bin)
	child.Env = append(os.Environ(), "HTTP_ADDR="+addr, "MODELGATEWAY_ADDR="+modelAddr, "ORCHESTRATOR_ADDR="+nobody,
		"VISION_ADDR="+nobody, "INDEXER_ADDR="+nobody, "CLASSIFIER_ADDR="+nobody, "SQLAGENT_ADDR="+nobody,
		"GATEWAY_API_KEYS="+httpAPIKey+"=bench", "LOG_LEVEL=warn", "METRICS_ADDR=")
	child.Env = append(child.Env, g.extra...)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		return fmt.Errorf("%s: %w", g.name, err)
	}
	g.child, g.addr = child, addr
	base := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := b.http.Get(base + "/livez")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			stopChild(child)
			return fmt.Errorf("%s: not serving on %s after 20s: %v", g.name, addr, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a child process's start; nothing to wait on
	}
	api := base + "/openai/v1"
	g.unary = func(ctx context.Context, id int64) error { return b.post1(ctx, api, "chat", httpAPIKey, id) }
	g.stream = func(ctx context.Context, id int64) error { return b.postStream1(ctx, api, "chat", httpAPIKey, id) }
	return nil
}

func (g *hop) stop() {
	if g.conn != nil {
		_ = g.conn.Close()
	}
	if !g.shared {
		stopChild(g.child)
	}
}

// reset forgets the measurements of the previous rate.
func (g *hop) reset() {
	g.samples, g.legs, g.cpu, g.sys, g.busy, g.total = nil, legs{}, 0, 0, 0, 0
}

// round runs one load round through the gateway (load) and adds its CPU
// time, syscalls and the machine's busy time to the gateway's tally.
func (g *hop) round(load func() sample) {
	pid := g.child.Process.Pid
	cpu0, sys0 := cpuTime(pid), syscalls(pid)
	busy0, total0 := machineBusy()
	tracing := os.Getenv("LOADBENCH_TRACE") != ""
	if tracing {
		_ = g.child.Process.Signal(syscall.SIGUSR1)
	}
	g.samples = append(g.samples, load())
	if tracing {
		_ = g.child.Process.Signal(syscall.SIGUSR2)
	}
	g.cpu += cpuTime(pid) - cpu0
	g.sys += syscalls(pid) - sys0
	busy1, total1 := machineBusy()
	g.busy, g.total = g.busy+busy1-busy0, g.total+total1-total0
}

type bench struct {
	http     *http.Client
	upstream string
	lastID   atomic.Int64
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

const (
	systemPrompt = "You are a concise financial analyst."
	userPrompt   = "Summarise the quarter in one sentence."
)

// chatRequest is the bench's request; the user message ends in the
// request's id (" #id") for the mock to note when it arrived.
func chatRequest(id int64) *modelv1.ChatRequest {
	return &modelv1.ChatRequest{Model: "chat", Messages: []*modelv1.Message{
		{Role: modelv1.Role_ROLE_SYSTEM, Content: systemPrompt},
		{Role: modelv1.Role_ROLE_USER, Content: userPrompt + " #" + strconv.FormatInt(id, 10)},
	}}
}

// directBody is the same request in the mock's wire format (OpenAI's),
// naming model.
func directBody(model string, id int64, stream bool) []byte {
	m := map[string]any{"model": model, "messages": []any{
		map[string]any{"role": "system", "content": systemPrompt},
		map[string]any{"role": "user", "content": userPrompt + " #" + strconv.FormatInt(id, 10)},
	}}
	if stream {
		m["stream"] = true
		m["stream_options"] = map[string]any{"include_usage": true}
	}
	return mustJSON(m)
}

// chat is one unary Chat.
func (g *hop) chat(ctx context.Context, id int64) error {
	resp, err := g.client.Chat(ctx, chatRequest(id))
	if err == nil && resp.GetMessage().GetContent() == "" {
		err = fmt.Errorf("empty answer")
	}
	return err
}

// chatStream returns at the first content chunk and drains the rest in the
// background (it is not part of the measurement).
func (g *hop) chatStream(ctx context.Context, id int64) error {
	st, err := g.client.ChatStream(ctx, &modelv1.ChatStreamRequest{Request: chatRequest(id)})
	if err != nil {
		return err
	}
	m, err := st.Recv()
	if err != nil {
		return err
	}
	if m.GetContentDelta() == "" {
		return fmt.Errorf("first chunk %v", m)
	}
	go func() {
		for {
			if _, err := st.Recv(); err != nil {
				return
			}
		}
	}()
	return errFirstChunk
}

// errFirstChunk tells load that the function returned at its first chunk
// and finishes in the background.
var errFirstChunk = fmt.Errorf("first chunk")

// direct returns a function sending one request straight to the mock at
// base (or through the relay), unary or streaming.
func (b *bench) direct(base string, stream bool) func(context.Context, int64) error {
	if stream {
		return func(ctx context.Context, id int64) error { return b.postStream1(ctx, base, "bench-model", "", id) }
	}
	return func(ctx context.Context, id int64) error { return b.post1(ctx, base, "bench-model", "", id) }
}

// post1 sends one chat completion in OpenAI's format to base for model,
// with key as a bearer token when set.
func (b *bench) post1(ctx context.Context, base, model, key string, id int64) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions", bytes.NewReader(directBody(model, id, false)))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return err
	}
	if resp.StatusCode != 200 || len(out.Choices) == 0 || out.Choices[0].Message.Content == "" {
		return fmt.Errorf("status %d, %d choices", resp.StatusCode, len(out.Choices))
	}
	return nil
}

// postStream1 is post1 streaming; it returns at the first content chunk
// and drains the rest in the background.
func (b *bench) postStream1(ctx context.Context, base, model, key string, id int64) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions", bytes.NewReader(directBody(model, id, true)))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			resp.Body.Close()
			return err
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"content"`) {
			break
		}
	}
	go func() {
		_, _ = io.Copy(io.Discard, br)
		resp.Body.Close()
	}()
	return errFirstChunk
}

type result struct {
	n        int
	rps      float64
	errors   int64
	p50, p99 time.Duration
	firstErr error
}

// sample is one load run: every request's latency, and errors.
type sample struct {
	lat      []time.Duration
	reqs     []request
	elapsed  time.Duration
	errors   int64
	firstErr error
}

// summarize pools the latencies of several runs.
func summarize(runs []sample) result {
	var r result
	var lat []time.Duration
	var elapsed time.Duration
	for _, s := range runs {
		lat = append(lat, s.lat...)
		elapsed += s.elapsed
		r.errors += s.errors
		if r.firstErr == nil {
			r.firstErr = s.firstErr
		}
	}
	slices.Sort(lat)
	r.n = len(lat)
	r.rps = float64(r.n) / elapsed.Seconds()
	r.p50, r.p99 = lat[r.n/2], lat[r.n*99/100]
	return r
}

// load sends rate requests per second for d, open loop: each request is
// due at a fixed time and its latency counts from then, so a slow server
// cannot slow the load down (no coordinated omission).
func (b *bench) load(rate int, d time.Duration, fn func(context.Context, int64) error) sample {
	interval := time.Second / time.Duration(rate)
	n := max(int(d/interval), 1)
	lat := make([]time.Duration, n)
	reqs := make([]request, n)
	var errs atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	// Requests go out on time (precise.go): a late start counts in the
	// latency of either path, but would add noise to both.
	lockPreciseThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	for i := 0; i < n; i++ {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			sleepOnThread(wait)
		}
		wg.Add(1)
		go func(i int, due time.Time) {
			defer wg.Done()
			id := b.lastID.Add(1)
			reqs[i] = request{id: id, due: due.UnixNano(), startLate: time.Since(due)}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := fn(ctx, id)
			lat[i] = time.Since(due)
			reqs[i].lat = lat[i]
			if err != nil && err != errFirstChunk {
				errs.Add(1)
				firstErr.CompareAndSwap(nil, &err)
			}
		}(i, due)
	}
	wg.Wait()
	s := sample{lat: lat, reqs: reqs, elapsed: time.Since(start), errors: errs.Load()}
	if p := firstErr.Load(); p != nil {
		s.firstErr = *p
	}
	return s
}

func us(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

// cpuTime reads the user+system CPU time of process pid.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks
}

// syscalls reads the read and write system calls process pid made
// (syscr + syscw in /proc/pid/io).
func syscalls(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	var n int64
	for _, l := range strings.Split(string(b), "\n") {
		for _, k := range []string{"syscr:", "syscw:"} {
			if v, ok := strings.CutPrefix(l, k); ok {
				c, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += c
			}
		}
	}
	return n
}

// machineBusy reads the machine's busy and total CPU ticks (/proc/stat).
func machineBusy() (busy, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseInt(f, 10, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

func percent(part, whole int64) string {
	if whole == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(part)/float64(whole))
}

// peakRSS reads VmHWM of process pid.
func peakRSS(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "n/a"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return fmt.Sprintf("%.1f MB", float64(kb)/1024)
		}
	}
	return "n/a"
}

// loadAverage reads the 1, 5 and 15 minute load averages (/proc/loadavg).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func numCPU() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "processor\t:")
}

// startChild runs this binary with args and env as a child process and
// returns it with the address it printed first ("ADDR <host:port>").
func startChild(self string, env []string, args ...string) (*exec.Cmd, string, error) {
	child := exec.Command(self, args...)
	child.Env = env
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := child.Start(); err != nil {
		return nil, "", err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stopChild(child)
		return nil, "", fmt.Errorf("did not start: %w", err)
	}
	return child, strings.TrimSpace(strings.TrimPrefix(line, "ADDR ")), nil
}

// stopChild ends a child process and waits for it.
func stopChild(child *exec.Cmd) {
	_ = child.Process.Signal(syscall.SIGTERM)
	_ = child.Wait()
}
