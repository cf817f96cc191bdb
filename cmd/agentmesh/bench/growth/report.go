package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// firstEventTarget is the ceiling for the first event's p99 at 50
// concurrent clients; maxDrop its ceiling for the fall in ops/s from the
// lowest level to the highest.
const (
	firstEventTarget = 100 * time.Millisecond
	maxDrop          = 0.20
)

// row is one measured workload at one level.
type row struct {
	workload     workload
	level        int
	storedBefore int // items of the workload's kind stored when the window opened
	attempt      int // 0 for the first run of this row, 1 for its repeat...
	window       time.Duration
	samples      []sample
	errors       int
	warmupErrors int
	errorText    []string
	cpu          cpuUse
	mem          memUse // the mesh's at the window's end
	loadBefore   string
	loadAfter    string
}

func (r row) opsPerSecond() float64 {
	if r.window <= 0 {
		return 0
	}
	return float64(len(r.samples)) / r.window.Seconds()
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of the
// durations that get picks from the samples, or 0 without samples.
func (r row) percentile(p float64, get func(sample) time.Duration) time.Duration {
	ds := make([]time.Duration, len(r.samples))
	for i, s := range r.samples {
		ds[i] = get(s)
	}
	return percentile(ds, p)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	rank := int(float64(len(ds))*p/100+0.999999) - 1
	return ds[min(max(rank, 0), len(ds)-1)]
}

func firstOf(s sample) time.Duration { return s.first }
func wholeOf(s sample) time.Duration { return s.whole }

const rowFormat = "%-11s %7s %7s %5s %8s %9s %9s %9s %9s %6s %6s %6s %5s %5s  %s\n"

func printHeader(w io.Writer) {
	fmt.Fprintf(w, rowFormat, "workload", "level", "stored", "ops", "ops/s", "first p50", "first p99", "whole p50", "whole p99",
		"errors", "mesh", "others", "rss", "peak", "load before → after")
	fmt.Fprintf(w, rowFormat, "", "", "", "", "", "", "", "", "", "", "cores", "cores", "MB", "MB", "")
}

// print writes the row as a line of the table, then its first errors.
func (r row) print(w io.Writer) {
	first := func(p float64) string {
		if !r.workload.events || len(r.samples) == 0 {
			return "-"
		}
		return ms(r.percentile(p, firstOf))
	}
	whole := func(p float64) string {
		if len(r.samples) == 0 {
			return "-"
		}
		return ms(r.percentile(p, wholeOf))
	}
	name := r.workload.name
	if r.attempt > 0 {
		name += fmt.Sprintf("#%d", r.attempt+1)
	}
	fmt.Fprintf(w, rowFormat, name, fmt.Sprint(r.level), fmt.Sprint(r.storedBefore), fmt.Sprint(len(r.samples)),
		fmt.Sprintf("%.1f", r.opsPerSecond()), first(50), first(99), whole(50), whole(99),
		fmt.Sprint(r.errors), cores(r.cpu.mesh), cores(r.cpu.others),
		megabytes(r.mem.rss), megabytes(r.mem.peak), r.loadBefore+" → "+r.loadAfter)
	if r.warmupErrors > 0 {
		fmt.Fprintf(w, "   (%d errors in the warm-up, not counted)\n", r.warmupErrors)
	}
	for _, e := range r.errorText {
		fmt.Fprintf(w, "   error: %s\n", e)
	}
}

func ms(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%dms", d.Round(time.Millisecond).Milliseconds())
	default:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
}

func megabytes(b int64) string {
	if b < 0 {
		return "n/a"
	}
	return fmt.Sprint(b / 1e6)
}

func cores(c float64) string {
	if c < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", c)
}

// best returns, for each workload and level, the row of median ops/s
// among those measured while other processes stayed under -noisy cores
// (all of them if none did); of an even number, the slower middle one.
func (b *bench) best() map[string]map[int]row {
	type key struct {
		name  string
		level int
	}
	groups := map[key][]row{}
	var keys []key
	for _, r := range b.rows {
		k := key{r.workload.name, r.level}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r)
	}
	out := map[string]map[int]row{}
	for _, k := range keys {
		rows := groups[k]
		quiet := slices.DeleteFunc(slices.Clone(rows), func(r row) bool { return r.cpu.others > b.opt.noisy })
		if len(quiet) > 0 {
			rows = quiet
		}
		slices.SortStableFunc(rows, func(a, c row) int { return cmp.Compare(a.opsPerSecond(), c.opsPerSecond()) })
		if out[k.name] == nil {
			out[k.name] = map[int]row{}
		}
		out[k.name][k.level] = rows[(len(rows)-1)/2]
	}
	return out
}

// summary prints, per workload, ops/s at the lowest and highest level
// measured, the drop between them, and the targets beside them.
func (b *bench) summary() {
	if len(b.rows) == 0 {
		return
	}
	best := b.best()
	fmt.Fprintf(b.out, "\nsummary (the median of each row's undisturbed runs; targets of issue 21 on a quiet 2-core machine at 50 concurrent clients):\n")
	fmt.Fprintf(b.out, "%-34s %10s %10s %8s %11s   %s\n", "", "ops/s low", "ops/s high", "change", "first p99", "targets")
	var order []string
	for _, r := range b.rows {
		if !slices.Contains(order, r.workload.name) {
			order = append(order, r.workload.name)
		}
	}
	for _, name := range order {
		byLevel := best[name]
		levels := make([]int, 0, len(byLevel))
		for l := range byLevel {
			levels = append(levels, l)
		}
		slices.Sort(levels)
		low, high := byLevel[levels[0]], byLevel[levels[len(levels)-1]]
		w := low.workload
		label := fmt.Sprintf("%s (%d→%d)", w.unit, low.level, high.level)
		drop := "-"
		var checks []string
		if w.target > 0 {
			checks = append(checks, verdict(fmt.Sprintf("≥%.0f/s", w.target), min(low.opsPerSecond(), high.opsPerSecond()) >= w.target))
		}
		worstFirst := time.Duration(0)
		empty := false
		for _, l := range levels {
			empty = empty || len(byLevel[l].samples) == 0
		}
		if w.events && !empty {
			for _, l := range levels {
				worstFirst = max(worstFirst, byLevel[l].percentile(99, firstOf))
			}
			checks = append(checks, verdict(fmt.Sprintf("first p99 ≤%s", ms(firstEventTarget)), worstFirst <= firstEventTarget))
		}
		if empty {
			checks = append(checks, "a row had no successful operation")
		}
		if len(levels) > 1 && low.opsPerSecond() > 0 {
			d := 1 - high.opsPerSecond()/low.opsPerSecond()
			drop = fmt.Sprintf("%+.0f%%", -d*100)
			checks = append(checks, verdict(fmt.Sprintf("drop ≤%.0f%%", maxDrop*100), d <= maxDrop))
		}
		first := "-"
		if w.events && !empty {
			first = ms(worstFirst)
		}
		fmt.Fprintf(b.out, "%-34s %10.1f %10.1f %8s %11s   %s\n", label, low.opsPerSecond(), high.opsPerSecond(), drop, first, strings.Join(checks, ", "))
	}
	for _, s := range b.seeds {
		fmt.Fprintf(b.out, "seeding to %d %s: %d stored in %s (%.1f/s), %d failed\n", s.level, s.kind, s.count, s.took.Round(time.Second), float64(s.count)/s.took.Seconds(), s.failures)
	}
	var errs int
	for _, r := range b.rows {
		errs += r.errors
	}
	fmt.Fprintf(b.out, "errors in measured windows: %d; load at the end %s\n", errs, loadAvg())
}

func verdict(target string, met bool) string {
	if met {
		return target + " met"
	}
	return target + " MISSED"
}
