// Command growth measures whether the embedded default stays fast as data
// grows (issue 21): chat turns, analyses, classification runs and document
// ingests per second, each at several counts of stored items of its kind.
//
// It runs the mesh as `agentmesh up` does (up.Run, embedded FerretDB and
// NATS in a fresh temporary directory, the model gateway's simulator with
// zero latency) in a process of its own, and drives it only through the
// gateway's public REST/SSE API, as a user would:
//
//   - chat: each client creates a conversation and sends turns on
//     POST /v1/conversations/{id}/messages:stream, reading the SSE answer to
//     its Completed event;
//   - analysis: POST /v1/analyses, then GET /v1/jobs/{id}:watch to the
//     analysis's final event;
//   - classify: POST /agents/classificationAgent/runs, then
//     POST .../runs/{id}/command with ApproveFetch and ApproveBatch until
//     agent.run.completed, on the sample conversations `agentmesh up` loads;
//   - ingest: POST /v1/documents with a distinct small document.
//
// Before each level it stores items through the same operations (finished
// conversations, analyses and runs, ingested documents) up to the level,
// and prints how long that took, then rests until JetStream's duplicate
// window has passed since (-rest), so that the row measures the stored
// items and not the ids of the seeding's recent events. Each row then has its clients do their
// warm-up operations, and measures its operations in one wall-clock window:
// ops/s, time to the first event and to the end (p50, p99), errors (a
// non-2xx answer, an `event: error`, a failed job or run, a stream that
// ends early). The load average before and after, the CPU the mesh used
// and the CPU other processes used during the window go beside it; each
// row is measured -repeat times, and one that other processes disturbed
// runs again. The summary takes each row's median and sets the drop from
// the lowest level to the highest beside the targets.
//
// Usage:
//
//	go run ./cmd/agentmesh/bench/growth -levels 0,1000,10000 -workloads chat,analysis,classify,ingest -concurrency 50 -count 200
//
// With -cpuprofile DIR, the mesh writes a CPU profile of each row's window
// to DIR/<workload>-<level>.pprof (<workload>-<level>#2.pprof for the next
// run of the row, and so on) and of each seeding to
// DIR/<workload>-seed-<level>.pprof, each with the profile of the live heap
// at its end beside it as .heap.pprof (go tool pprof reads them; compare
// two levels with -diff_base).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentmesh/agentmesh/libs/events"
)

var workloadNames = []string{"chat", "analysis", "classify", "ingest"}

func main() {
	if len(os.Args) >= 3 && os.Args[1] == serveArg {
		if err := serveMesh(os.Args[2]); err != nil {
			slog.Error("mesh failed", "error", err)
			os.Exit(1)
		}
		return
	}
	opt, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, opt, self, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "growth:", err)
		os.Exit(1)
	}
}

// parseFlags reads the command line into options, checking every value.
func parseFlags(fs *flag.FlagSet, args []string) (options, error) {
	var (
		opt       options
		levels    = fs.String("levels", "0,1000,10000", "comma-separated counts of stored items of each workload's kind to measure at, ascending")
		workloads = fs.String("workloads", strings.Join(workloadNames, ","), "comma-separated workloads: "+strings.Join(workloadNames, ", "))
		env       = map[string]string{}
	)
	fs.IntVar(&opt.concurrency, "concurrency", 50, "concurrent clients of a row")
	fs.IntVar(&opt.count, "count", 200, "operations a row measures, shared evenly between the clients (chat: 200 at 50 clients = 4 turns each)")
	fs.DurationVar(&opt.duration, "duration", 0, "measure each row for this long instead of -count operations (0 = use -count)")
	fs.IntVar(&opt.warmup, "warmup", 1, "operations each client does before a row's window opens, not measured")
	fs.IntVar(&opt.seedConcurrency, "seed-concurrency", 50, "concurrent requests while storing items up to a level")
	fs.IntVar(&opt.seedTurns, "seed-turns", 2, "turns of each seeded conversation (a turn stores the question and the answer)")
	fs.DurationVar(&opt.opTimeout, "op-timeout", 5*time.Minute, "longest an operation may take before it counts as an error")
	fs.DurationVar(&opt.settle, "settle", 10*time.Minute, "longest wait before a row for the mesh to go idle, e.g. to finish extracting ingested documents (0 = no wait)")
	fs.DurationVar(&opt.rest, "rest", events.DuplicateWindow+5*time.Second, "wait after storing items up to a level before its first row, so that the seeding's event ids have left JetStream's duplicate window, as a fresh mesh's first row has none (0 = no wait)")
	fs.Float64Var(&opt.noisy, "noisy", 0.3, "CPU, in cores, other processes may use during a row before it is run again")
	fs.IntVar(&opt.retries, "retries", 2, "most repeats of a row that other processes disturbed")
	fs.IntVar(&opt.repeat, "repeat", 3, "times each row is measured; the summary takes the median of the undisturbed ones (this machine's throughput varies by a third between runs minutes apart)")
	fs.BoolVar(&opt.keep, "keep", false, "keep the data directory and the mesh's log")
	fs.StringVar(&opt.cpuProfile, "cpuprofile", "", "directory to write the mesh's CPU profiles to: each row's window as <workload>-<level>.pprof (#2, #3 for its repeats), each seeding as <workload>-seed-<level>.pprof, each with its live heap at the end as .heap.pprof")
	fs.Func("env", "KEY=VALUE for the mesh's environment, on top of the defaults (repeatable), e.g. to measure another storage option; GOGC, GOMEMLIMIT, GOMAXPROCS, GODEBUG and GOTRACEBACK set its process's runtime", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("want KEY=VALUE, got %q", s)
		}
		env[k] = v
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return opt, err
	}
	if fs.NArg() > 0 {
		return opt, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	opt.env = env
	for _, s := range strings.Split(*levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return opt, fmt.Errorf("-levels: %q is not a count", s)
		}
		if len(opt.levels) > 0 && n <= opt.levels[len(opt.levels)-1] {
			return opt, fmt.Errorf("-levels: %d after %d: levels must ascend", n, opt.levels[len(opt.levels)-1])
		}
		opt.levels = append(opt.levels, n)
	}
	for _, s := range strings.Split(*workloads, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(workloadNames, s) {
			return opt, fmt.Errorf("-workloads: unknown %q (known: %s)", s, strings.Join(workloadNames, ", "))
		}
		if !slices.Contains(opt.workloads, s) {
			opt.workloads = append(opt.workloads, s)
		}
	}
	switch {
	case opt.concurrency < 1:
		return opt, fmt.Errorf("-concurrency %d: must be at least 1", opt.concurrency)
	case opt.duration <= 0 && opt.count < 1:
		return opt, fmt.Errorf("-count %d: must be at least 1 (or set -duration)", opt.count)
	case opt.duration < 0:
		return opt, fmt.Errorf("-duration %s: must not be negative", opt.duration)
	case opt.warmup < 0:
		return opt, fmt.Errorf("-warmup %d: must not be negative", opt.warmup)
	case opt.seedConcurrency < 1:
		return opt, fmt.Errorf("-seed-concurrency %d: must be at least 1", opt.seedConcurrency)
	case opt.seedTurns < 0:
		return opt, fmt.Errorf("-seed-turns %d: must not be negative", opt.seedTurns)
	case opt.opTimeout <= 0:
		return opt, fmt.Errorf("-op-timeout %s: must be positive", opt.opTimeout)
	case opt.retries < 0:
		return opt, fmt.Errorf("-retries %d: must not be negative", opt.retries)
	case opt.rest < 0:
		return opt, fmt.Errorf("-rest %s: must not be negative", opt.rest)
	}
	return opt, nil
}
