package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve the mesh when the bench starts it in
// serve mode, as the bench's own binary does.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == serveArg {
		if err := serveMesh(os.Args[2]); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// tiny is a bench small enough for `make test`: two clients, one operation
// each, at level 0 and after seeding three more items of each kind.
func tiny(env map[string]string, workloads ...string) options {
	return options{
		levels: []int{0, 5}, workloads: workloads, concurrency: 2, count: 2,
		seedConcurrency: 2, seedTurns: 1, opTimeout: time.Minute, noisy: 1e9, env: env,
	}
}

func runTiny(t *testing.T, opt options) ([]row, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rows, err := run(ctx, opt, self, &out)
	t.Logf("bench output:\n%s", out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return rows, out.String()
}

// Every workload runs against the real mesh through the gateway: each row
// has its operations, timed, without errors, the second level's rows come
// after seeding, and the summary states the drop beside the targets. With
// -cpuprofile, the mesh writes a profile of every row and every seeding.
func TestBenchMeasuresEveryWorkload(t *testing.T) {
	t.Parallel()
	opt := tiny(nil, workloadNames...)
	opt.cpuProfile = t.TempDir()
	rows, out := runTiny(t, opt)
	for _, name := range workloadNames {
		for _, file := range []string{name + "-0.pprof", name + "-0.heap.pprof", name + "-seed-5.pprof", name + "-5.pprof"} {
			if fi, err := os.Stat(filepath.Join(opt.cpuProfile, file)); err != nil || fi.Size() == 0 {
				t.Errorf("profile %s: %v (empty: %v)", file, err, err == nil && fi.Size() == 0)
			}
		}
	}
	if len(rows) != 2*len(workloadNames) {
		t.Fatalf("%d rows, want one per workload and level", len(rows))
	}
	for _, r := range rows {
		name := r.workload.name
		if len(r.samples) != 2 || r.errors != 0 || r.window <= 0 {
			t.Errorf("%s at %d: %d operations, %d errors (%v) in %s", name, r.level, len(r.samples), r.errors, r.errorText, r.window)
		}
		for _, s := range r.samples {
			if s.whole <= 0 || r.workload.events != (s.first > 0) || s.first > s.whole {
				t.Errorf("%s at %d: sample %+v", name, r.level, s)
			}
		}
		if r.mem.rss <= 0 || r.mem.peak < r.mem.rss {
			t.Errorf("%s at %d: the mesh's memory read as %+v", name, r.level, r.mem)
		}
		if r.level == 5 && r.storedBefore < 5 {
			t.Errorf("%s at level 5 measured with %d stored", name, r.storedBefore)
		}
	}
	for _, want := range []string{"seeded 3 analyses", "seeded 3 documents", "chat turns/s (0→5)", "analyses/s (0→5)", "drop ≤20%"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
}

// A classification run that cannot complete (no conversations to classify)
// is an error of its row, not a fast operation.
func TestBenchCountsFailedOperations(t *testing.T) {
	t.Parallel()
	opt := tiny(map[string]string{"CLASSIFIER_SAMPLE_DATA": "false"}, "classify")
	opt.levels = []int{0}
	rows, out := runTiny(t, opt)
	if len(rows) != 1 || len(rows[0].samples) != 0 || rows[0].errors != 2 {
		t.Fatalf("rows %+v", rows)
	}
	if !strings.Contains(out, `the stream ended at "agent.run.stopped"`) {
		t.Errorf("the output does not say why the runs failed")
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"defaults", nil, ""},
		{"a before run", []string{"-levels", "0,1000", "-workloads", "chat,analysis", "-env", "K=V"}, ""},
		{"descending levels", []string{"-levels", "1000,0"}, "levels must ascend"},
		{"negative level", []string{"-levels", "-1"}, "is not a count"},
		{"negative rest", []string{"-rest", "-1s"}, "-rest -1s: must not be negative"},
		{"unknown workload", []string{"-workloads", "chat,search"}, `unknown "search"`},
		{"no clients", []string{"-concurrency", "0"}, "-concurrency 0"},
		{"env without =", []string{"-env", "K"}, "want KEY=VALUE"},
		{"stray argument", []string{"extra"}, "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("growth", flag.ContinueOnError)
			fs.SetOutput(new(bytes.Buffer))
			opt, err := parseFlags(fs, tc.args)
			if tc.wantErr == "" {
				if err != nil || len(opt.levels) == 0 || len(opt.workloads) == 0 {
					t.Fatalf("parseFlags(%q) = %+v, %v", tc.args, opt, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("parseFlags(%q) error %v, want one containing %q", tc.args, err, tc.wantErr)
			}
		})
	}
}

// The summary's row of a level is the median of its undisturbed runs: a
// run other processes disturbed counts only when all were, and of an even
// number the slower middle one is taken.
func TestSummaryTakesTheMedianRun(t *testing.T) {
	w := workload{name: "chat"}
	run := func(level, ops int, others float64) row {
		return row{workload: w, level: level, window: time.Second, samples: make([]sample, ops), cpu: cpuUse{others: others}}
	}
	b := &bench{opt: options{noisy: 0.3}, rows: []row{
		run(0, 300, 0), run(0, 100, 0), run(0, 900, 1.5), run(0, 200, 0),
		run(1000, 50, 0), run(1000, 70, 0),
		run(10000, 40, 0.9), run(10000, 60, 0.8),
	}}
	best := b.best()["chat"]
	for level, want := range map[int]float64{0: 200, 1000: 50, 10000: 40} {
		if got := best[level].opsPerSecond(); got != want {
			t.Errorf("level %d: %v ops/s, want %v", level, got, want)
		}
	}
}

// The Go runtime's settings given with -env reach the mesh's process
// environment (the rest of -env reaches it as configuration), replacing the
// bench's own.
func TestRuntimeSettingsReachTheMeshProcess(t *testing.T) {
	t.Parallel()
	got := processEnv([]string{"PATH=/bin", "GOGC=50", "LOG_LEVEL=debug"}, map[string]string{"GOGC": "400", "GOMEMLIMIT": "1GiB", "LOG_LEVEL": "warn"})
	want := []string{"PATH=/bin", "LOG_LEVEL=debug", "GOGC=400", "GOMEMLIMIT=1GiB"}
	if !slices.Equal(got, want) {
		t.Fatalf("processEnv = %q, want %q", got, want)
	}
}
