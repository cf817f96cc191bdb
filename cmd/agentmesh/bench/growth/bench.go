package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// options is what the flags set.
type options struct {
	levels      []int
	workloads   []string
	concurrency int
	// count is the operations a row measures, shared evenly between the
	// clients; ignored when duration is set.
	count    int
	duration time.Duration
	// warmup is the operations each client does before the row's window.
	warmup          int
	seedConcurrency int
	seedTurns       int
	opTimeout       time.Duration
	// settle bounds the wait for the mesh to go idle before a row; 0 skips it.
	settle time.Duration
	// rest is how long after a seeding its level's first row waits (see
	// bench.rest); 0 skips it.
	rest time.Duration
	// noisy is the CPU, in cores, that other processes may use during a row
	// before it is run again, at most retries times.
	noisy   float64
	retries int
	// repeat is how many times each row is measured (each on the same mesh
	// and level, one after the other); the summary takes the median.
	repeat int
	env    map[string]string
	keep   bool
	// cpuProfile is the directory of the mesh processes' CPU profiles; empty: none.
	cpuProfile string
}

// bench is one run of the growth bench.
type bench struct {
	opt    options
	out    io.Writer
	mesh   *mesh          // the mesh of the workload being measured
	stored map[string]int // items stored so far, by workload name
	seeded time.Time      // when the last seeding ended; zero: none yet on this mesh
	rows   []row
	seeds  []seeding
}

// seeding is one stretch of storing items up to a level.
type seeding struct {
	kind                   string
	count, failures, level int
	took                   time.Duration
}

// run measures every workload at every level, each workload on a mesh of
// its own (self in serve mode) in a fresh data directory, printing each row
// as it is done and the summary at the end. It returns every row measured,
// repeats included.
//
// A fresh mesh per workload keeps the workloads apart: between a
// workload's rows only its own kind of item grows, and what one workload
// leaves behind (a backlog of document extraction, JetStream consumers,
// a failure) does not weigh on the next one's figures.
func run(ctx context.Context, opt options, self string, out io.Writer) ([]row, error) {
	dir, err := os.MkdirTemp("", "agentmesh-growth-")
	if err != nil {
		return nil, err
	}
	if opt.keep {
		fmt.Fprintf(out, "data and mesh logs kept in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	fmt.Fprintf(out, "growth bench: %d cores (GOMAXPROCS %d), load %s; each workload on a fresh mesh: up.Run in its own process, simulator with zero latency",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), loadAvg())
	for k, v := range opt.env {
		fmt.Fprintf(out, ", %s=%s", k, v)
	}
	fmt.Fprintln(out)
	if opt.duration > 0 {
		fmt.Fprintf(out, "each row: %d clients for %s", opt.concurrency, opt.duration)
	} else {
		fmt.Fprintf(out, "each row: %d clients, %d operations", opt.concurrency, opt.count)
	}
	fmt.Fprintf(out, " after %d warm-up operation(s) per client, measured %d time(s)", opt.warmup, max(opt.repeat, 1))
	if opt.retries > 0 {
		fmt.Fprintf(out, "; a row during which other processes used more than %.2f cores runs again (at most %d times)", opt.noisy, opt.retries)
	}
	fmt.Fprint(out, "\n\n")
	printHeader(out)

	b := &bench{opt: opt, out: out, stored: map[string]int{}}
	var errs []error
	for _, name := range opt.workloads {
		if err := b.workload(ctx, self, filepath.Join(dir, name), name); err != nil {
			if ctx.Err() != nil {
				return b.rows, err
			}
			fmt.Fprintf(out, "   %s: %v\n", name, err)
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	b.summary()
	return b.rows, errors.Join(errs...)
}

// workload starts a mesh with its data under dir and measures workload
// name at each level in turn, seeding its kind of item up to the level
// first. A level it cannot seed ends the workload.
func (b *bench) workload(ctx context.Context, self, dir, name string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(dir, "mesh.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	if b.opt.cpuProfile != "" {
		if err := os.MkdirAll(b.opt.cpuProfile, 0o755); err != nil {
			return err
		}
	}
	m, err := startMesh(ctx, self, meshEnv(filepath.Join(dir, "data"), b.opt.env), logFile)
	if err != nil {
		return fmt.Errorf("%w; the mesh's log ends:\n%s", err, tail(logPath, 20))
	}
	b.mesh = m
	a := newAPI(m.URL, max(b.opt.concurrency, b.opt.seedConcurrency))
	var w workload
	for _, c := range a.workloads(b.opt.seedTurns) {
		if c.name == name {
			w = c
		}
	}
	err = b.levels(ctx, w)
	if stopErr := m.stop(); err == nil && stopErr != nil {
		err = fmt.Errorf("stopping the mesh: %w", stopErr)
	}
	if lines := tail(logPath, 3); lines != "" {
		fmt.Fprintf(b.out, "   (%s: the mesh logged warnings or errors; the last:)\n%s", name, indent(lines))
	}
	return err
}

// profile starts the mesh's CPU profile, with -cpuprofile, as
// DIR/<name>.pprof, or <name>#2.pprof and so on if taken; stop ends it and
// writes the profile of the live heap then beside it, as
// <name>.heap.pprof.
func (b *bench) profile(name string) (stop func() error, err error) {
	if b.opt.cpuProfile == "" {
		return func() error { return nil }, nil
	}
	path := filepath.Join(b.opt.cpuProfile, name+".pprof")
	for k := 2; ; k++ {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			break
		}
		path = filepath.Join(b.opt.cpuProfile, fmt.Sprintf("%s#%d.pprof", name, k))
	}
	if path, err = filepath.Abs(path); err != nil {
		return nil, err
	}
	if err := b.mesh.profile(path); err != nil {
		return nil, err
	}
	return func() error {
		if err := b.mesh.profile(""); err != nil {
			return err
		}
		return b.mesh.heapProfile(strings.TrimSuffix(path, ".pprof") + ".heap.pprof")
	}, nil
}

// levels measures w at each level, seeding first.
func (b *bench) levels(ctx context.Context, w workload) error {
	for _, level := range b.opt.levels {
		if err := b.seed(ctx, w, level); err != nil {
			return fmt.Errorf("not measured at %d stored or more: %w", level, err)
		}
		if err := b.rest(ctx); err != nil {
			return err
		}
		attempt := 0
		for range max(b.opt.repeat, 1) {
			for retry := 0; ; retry++ {
				b.waitIdle(ctx)
				r, err := b.measure(ctx, w, level)
				if err != nil {
					return err
				}
				r.attempt = attempt
				attempt++
				b.rows = append(b.rows, r)
				r.print(b.out)
				if r.cpu.others <= b.opt.noisy || retry >= b.opt.retries {
					break
				}
			}
		}
	}
	return nil
}

// tail returns the last n lines of the file at path ("" if none).
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.SplitAfter(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return ""
	}
	return strings.Join(lines[max(len(lines)-n, 0):], "") + "\n"
}

func indent(lines string) string {
	return "     " + strings.ReplaceAll(strings.TrimSuffix(lines, "\n"), "\n", "\n     ") + "\n"
}

// seed stores items of w's kind through the API until there are level of
// them, seedConcurrency at a time, and prints how long it took. A failed
// operation is tried again with another item; seeding gives up once more
// than 20 operations have failed and failures outnumber successes.
func (b *bench) seed(ctx context.Context, w workload, level int) error {
	need := level - b.stored[w.name]
	if need <= 0 {
		return nil
	}
	stopProfile, err := b.profile(fmt.Sprintf("%s-seed-%d", w.name, level))
	if err != nil {
		return err
	}
	defer func() { _ = stopProfile() }()
	start := time.Now()
	var (
		mu       sync.Mutex // guards the counters below
		done     int
		inFlight int
		failures int
		firstErr error
	)
	// claim reserves one more item to store, if any is still missing.
	claim := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if done+inFlight >= need || failures > 20 && failures > done || ctx.Err() != nil {
			return false
		}
		inFlight++
		return true
	}
	stopProgress := make(chan struct{})
	go func() {
		progress := time.NewTicker(15 * time.Second)
		defer progress.Stop()
		for {
			select {
			case <-progress.C:
				mu.Lock()
				d, f := done, failures
				mu.Unlock()
				fmt.Fprintf(b.out, "   seeding %s: %d/%d after %s (%.1f/s, %d failed)\n", w.kind, d, need, time.Since(start).Round(time.Second), float64(d)/time.Since(start).Seconds(), f)
			case <-stopProgress:
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range b.opt.seedConcurrency {
		wg.Go(func() {
			for claim() {
				octx, cancel := context.WithTimeout(ctx, b.opt.opTimeout)
				err := w.seed(octx)
				cancel()
				mu.Lock()
				inFlight--
				if err != nil {
					failures++
					if firstErr == nil {
						firstErr = err
					}
				} else {
					done++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(stopProgress)
	b.stored[w.name] += done
	b.seeded = time.Now()
	took := time.Since(start)
	b.seeds = append(b.seeds, seeding{kind: w.kind, count: done, failures: failures, level: level, took: took})
	fmt.Fprintf(b.out, "   seeded %d %s in %s (%.1f/s, %d failed) → %d stored; load %s\n",
		done, w.kind, took.Round(time.Millisecond), float64(done)/took.Seconds(), failures, b.stored[w.name], loadAvg())
	if firstErr != nil {
		fmt.Fprintf(b.out, "   first seeding error: %v\n", firstErr)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if done < need {
		return fmt.Errorf("seeding %s to %d: gave up after %d failures (%d stored); first: %w", w.kind, level, failures, done, firstErr)
	}
	return nil
}

// rest waits until opt.rest has passed since the last seeding ended. What
// the mesh keeps for a while after a burst of work, whatever is stored,
// is then gone before the row, as it is before the first row of a fresh
// mesh: JetStream remembers every event's id for its duplicate window
// (events.DuplicateWindow, 2 min): the ids of the last two minutes of the
// analyses' seeding (about 100,000) held 9–14 MB of a live heap of 76–79
// MB in the row after it, whose collector took 13–14% of the mesh's CPU;
// after the rest, 8% of it, with 52 MB live.
func (b *bench) rest(ctx context.Context) error {
	if b.opt.rest <= 0 || b.seeded.IsZero() {
		return nil
	}
	wait := time.Until(b.seeded.Add(b.opt.rest))
	b.seeded = time.Time{}
	if wait <= 0 {
		return nil
	}
	fmt.Fprintf(b.out, "   resting %s: the seeding's event ids leave JetStream's duplicate window\n", wait.Round(time.Second))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

// waitIdle waits, at most opt.settle, until the mesh uses less than a
// twentieth of a core over half a second, so that work left from seeding
// or the last row (document extraction, archiving) does not run inside the
// next row's window.
func (b *bench) waitIdle(ctx context.Context) {
	if b.opt.settle <= 0 {
		return
	}
	start := time.Now()
	for time.Since(start) < b.opt.settle {
		m := startCPU(b.mesh.pid())
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		if use := m.stop(); use.mesh >= 0 && use.mesh < 0.05 {
			if waited := time.Since(start); waited > 2*time.Second {
				fmt.Fprintf(b.out, "   (waited %s for the mesh to go idle)\n", waited.Round(100*time.Millisecond))
			}
			return
		}
	}
	fmt.Fprintf(b.out, "   (the mesh was still busy after %s; measuring anyway)\n", b.opt.settle)
}

// measure runs one row: concurrency clients, each doing its warm-up
// operations, then all together the row's operations inside one wall-clock
// window.
func (b *bench) measure(ctx context.Context, w workload, level int) (row, error) {
	r := row{workload: w, level: level, storedBefore: b.stored[w.name], loadBefore: loadAvg()}
	n := b.opt.concurrency
	ops := make([]op, n)
	for i := range ops {
		octx, cancel := context.WithTimeout(ctx, b.opt.opTimeout)
		o, err := w.newClient(octx)
		cancel()
		if err != nil {
			return r, fmt.Errorf("%s: preparing client %d: %w", w.name, i, err)
		}
		ops[i] = o
	}
	if w.name == "chat" {
		b.stored[w.name] += n // each client's conversation
	}
	var (
		mu      sync.Mutex
		samples []sample
		stored  int
	)
	record := func(s sample, err error) {
		mu.Lock()
		defer mu.Unlock()
		if w.name != "chat" && err == nil {
			stored++
		}
		if err != nil {
			r.errors++
			if len(r.errorText) < 3 && !slices.Contains(r.errorText, err.Error()) {
				r.errorText = append(r.errorText, err.Error())
			}
			return
		}
		samples = append(samples, s)
	}
	do := func(o op) (sample, error) {
		octx, cancel := context.WithTimeout(ctx, b.opt.opTimeout)
		defer cancel()
		return o(octx)
	}

	// Warm-up, excluded from the window: connections, the first turn of
	// each conversation, caches.
	var wg sync.WaitGroup
	for _, o := range ops {
		wg.Go(func() {
			for range b.opt.warmup {
				if _, err := do(o); err != nil {
					record(sample{}, err)
				}
			}
		})
	}
	wg.Wait()
	warmupErrors := r.errors
	mu.Lock()
	b.stored[w.name] += stored
	stored = 0
	mu.Unlock()

	quota := func(i int) int { return b.opt.count/n + boolInt(i < b.opt.count%n) }
	var deadline time.Time
	stopProfile, err := b.profile(fmt.Sprintf("%s-%d", w.name, level))
	if err != nil {
		return r, err
	}
	cpu := startCPU(b.mesh.pid())
	start := time.Now()
	if b.opt.duration > 0 {
		deadline = start.Add(b.opt.duration)
	}
	for i, o := range ops {
		wg.Go(func() {
			for k := 0; ; k++ {
				if deadline.IsZero() && k >= quota(i) || !deadline.IsZero() && !time.Now().Before(deadline) {
					return
				}
				record(do(o))
			}
		})
	}
	wg.Wait()
	r.window = time.Since(start)
	r.cpu = cpu.stop()
	r.mem = processMemory(b.mesh.pid())
	if err := stopProfile(); err != nil {
		return r, err
	}
	r.loadAfter = loadAvg()
	r.errors -= warmupErrors
	r.warmupErrors = warmupErrors
	r.samples = samples
	b.stored[w.name] += stored
	return r, ctx.Err()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
