//go:build e2ecluster

package cluster

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// executor is the service that runs each kind of execution (the model
// gateway only relays the model calls).
var executor = map[string]string{
	kindToolJob: "orchestrator", kindPlanning: "orchestrator", kindBatch: "classifier", kindExtraction: "indexer",
}

// rerun is an execution that ran again, and why.
type rerun struct {
	kind, key   string
	first, next execution
	// explanation names the fault or failure that made the re-run
	// necessary; empty when nothing explains it: a double run.
	explanation string
}

// reruns finds every execution that ran more than once and explains each
// repeat where a fault or a failed first attempt makes it legitimate: a
// result that was never delivered, or never recorded because the process
// that would record it, or the database, or a NATS node was gone. What
// nothing explains is a double run.
func reruns(execs []execution, faults []*fault) []rerun {
	groups := map[string][]execution{}
	for _, e := range execs {
		groups[e.kind+"\x00"+e.key] = append(groups[e.kind+"\x00"+e.key], e)
	}
	var out []rerun
	for _, g := range groups {
		sort.Slice(g, func(i, j int) bool { return g[i].start.Before(g[j].start) })
		for i := 1; i < len(g); i++ {
			prev, cur := g[i-1], g[i]
			r := rerun{kind: cur.kind, key: cur.key, first: prev, next: cur}
			switch {
			case !prev.completed:
				r.explanation = fmt.Sprintf("the earlier execution (via %s) was cut before it answered", orUnknown(prev.by))
			default:
				for _, f := range faults {
					if f.at.Before(prev.start) || f.at.After(cur.start) {
						continue
					}
					svc, _, _ := strings.Cut(f.target, "-")
					switch {
					case f.kind != "service":
						r.explanation = f.what
					case f.target == prev.by:
						r.explanation = f.what + ", which ran the earlier execution"
					case cur.kind != kindToolJob && (svc == executor[cur.kind] || svc == "modelgateway"):
						r.explanation = f.what + ", on the earlier execution's path"
					}
				}
			}
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].next.start.Before(out[j].next.start) })
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "an unidentified process"
	}
	return s
}

// summary is what the suite prints at the end.
type summary struct {
	took           time.Duration
	results        []*result
	faults         []*fault
	execs          []execution
	reruns         []rerun
	outages        map[string]mongoOutage
	chunkProblems  []string
	startupCrashes []startupCrash
}

// unclean are the flows that neither completed nor failed with a reason.
func (s *summary) unclean() []*result {
	var out []*result
	for _, r := range s.results {
		if !r.completed && r.reason == "" && r.unchecked == "" {
			out = append(out, r)
		}
	}
	return out
}

// internal are the flows failed with HTTP 500 "internal error".
func (s *summary) internal() []*result {
	var out []*result
	for _, r := range s.results {
		if !r.completed && r.internal {
			out = append(out, r)
		}
	}
	return out
}

func (s *summary) doubleRuns() []rerun {
	var out []rerun
	for _, r := range s.reruns {
		if r.explanation == "" {
			out = append(out, r)
		}
	}
	return out
}

func (s *summary) total(f func(r *result) int) int {
	n := 0
	for _, r := range s.results {
		n += f(r)
	}
	return n
}

func (s *summary) print(w io.Writer) {
	fmt.Fprintf(w, "\n==== e2e-cluster summary (%v) ====\n", s.took.Round(time.Second))
	fmt.Fprintf(w, "topology: 3-node NATS JetStream cluster (streams R3), ferretdb process (SQLite; write commands take turns through the suite's relay), provider simulator and market-data endpoint in the test process;\n")
	fmt.Fprintf(w, "          modelgateway×2 orchestrator×2 classifier×2 indexer×2 gateway×2 (behind a round-robin TCP front), sqlagent×1 vision×1; peers found by DNS (gRPC round_robin)\n")

	fmt.Fprintf(w, "\nflows (run / completed / failed with a reason / of which an internal error / unclean):\n")
	byKind := map[string][5]int{}
	var kinds []string
	for _, r := range s.results {
		k, seen := byKind[r.kind]
		if !seen {
			kinds = append(kinds, r.kind)
		}
		k[0]++
		switch {
		case r.completed:
			k[1]++
		case r.reason != "":
			k[2]++
			if r.internal {
				k[3]++
			}
		case r.unchecked == "":
			k[4]++
		}
		byKind[r.kind] = k
	}
	sort.Strings(kinds)
	var all [5]int
	for _, k := range kinds {
		c := byKind[k]
		fmt.Fprintf(w, "  %-40s %4d %4d %4d %4d %4d\n", k, c[0], c[1], c[2], c[3], c[4])
		for i := range all {
			all[i] += c[i]
		}
	}
	fmt.Fprintf(w, "  %-40s %4d %4d %4d %4d %4d\n", "all", all[0], all[1], all[2], all[3], all[4])
	for _, r := range s.results {
		if !r.completed {
			fmt.Fprintf(w, "  failed: %s %s: %s\n", r.kind, r.id, oneLine(firstNonEmpty(r.reason, "NO REASON")))
			for _, n := range r.notes[max(len(r.notes)-8, 0):] {
				fmt.Fprintf(w, "      %s\n", oneLine(n))
			}
		}
	}

	fmt.Fprintf(w, "\nfaults injected (%d): target, down, recovery\n", len(s.faults))
	for _, f := range s.faults {
		fmt.Fprintf(w, "  %-58s down %6v, back %6v  [%s]\n", f.what, f.down.Round(10*time.Millisecond), f.recovery.Round(10*time.Millisecond), f.during)
		for _, n := range f.notes {
			fmt.Fprintf(w, "      %s\n", n)
		}
	}
	if len(s.outages) > 0 {
		fmt.Fprintf(w, "\ndatabase restart, per replica: NOT_SERVING seen after the kill / SERVING after the restart / liveness kept / process restarted\n")
		names := make([]string, 0, len(s.outages))
		for n := range s.outages {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			o := s.outages[n]
			ns := "never"
			if o.notServingAfter > 0 {
				ns = o.notServingAfter.Round(10 * time.Millisecond).String()
			}
			fmt.Fprintf(w, "  %-16s %8s %8v %5v %5v\n", n, ns, o.servingAfterRestart.Round(10*time.Millisecond), !o.livenessLost, o.restarted)
		}
	}

	fmt.Fprintf(w, "\nexecutions (observed where they leave the mesh): executions / distinct / re-runs explained by a fault / double runs\n")
	count := map[string][4]int{}
	keys := map[string]map[string]bool{}
	for _, e := range s.execs {
		c := count[e.kind]
		c[0]++
		count[e.kind] = c
		if keys[e.kind] == nil {
			keys[e.kind] = map[string]bool{}
		}
		keys[e.kind][e.key] = true
	}
	for _, r := range s.reruns {
		c := count[r.kind]
		if r.explanation != "" {
			c[2]++
		} else {
			c[3]++
		}
		count[r.kind] = c
	}
	for _, k := range []string{kindToolJob, kindPlanning, kindBatch, kindExtraction} {
		c := count[k]
		fmt.Fprintf(w, "  %-24s %5d %5d %5d %5d\n", k, c[0], len(keys[k]), c[2], c[3])
	}
	writes := s.total(func(r *result) int { return r.doubleWrites })
	sqlJobs := 0
	for _, r := range s.results {
		if r.kind == flowSQL && r.completed {
			sqlJobs++
		}
	}
	fmt.Fprintf(w, "  %-24s %5d tables written, %d interrupted executions confirmed again, %d re-runs after them, %d double runs\n", kindSQL, sqlJobs,
		s.total(func(r *result) int { return r.interrupted }), s.total(func(r *result) int { return r.rerunWrites }), writes)
	for _, r := range s.reruns {
		label := "DOUBLE RUN"
		if r.explanation != "" {
			label = "re-run after: " + r.explanation
		}
		fmt.Fprintf(w, "    %s %q: %s (first via %s at %s, completed=%v; again via %s at %s)\n", r.kind, r.key, label,
			orUnknown(r.first.by), r.first.start.Format("15:04:05.000"), r.first.completed, orUnknown(r.next.by), r.next.start.Format("15:04:05.000"))
	}

	fmt.Fprintf(w, "\nduplicates (must be 0): double runs %d, SQL double writes %d, duplicated chunks %d, events published twice %d\n",
		len(s.doubleRuns()), writes, s.total(func(r *result) int { return r.duplicateChunks })+len(s.chunkProblems), s.total(func(r *result) int { return r.duplicateEvents }))
	for _, p := range s.chunkProblems {
		fmt.Fprintf(w, "  %s\n", p)
	}
	fmt.Fprintf(w, "events: received %d, lost %d, received but missing from the log %d, job events after their analysis's watch ended %d, replays from the start that never ended %d (all must be 0 but the first)\n",
		s.total(func(r *result) int { return r.events }), s.total(func(r *result) int { return r.lost }), s.total(func(r *result) int { return r.phantom }),
		s.total(func(r *result) int { return r.afterEnd }),
		s.total(func(r *result) int {
			if r.replayHung {
				return 1
			}
			return 0
		}))
	for _, r := range s.results {
		if r.lost > 0 || r.phantom > 0 || r.duplicateChunks > 0 || r.doubleWrites > 0 || r.duplicateEvents > 0 || r.afterEnd > 0 || r.replayHung {
			fmt.Fprintf(w, "  %s %s: %s\n", r.kind, r.id, strings.Join(r.notes, "; "))
		}
	}
	fmt.Fprintf(w, "flows failed with an internal error, HTTP 500 or an SSE error event of code 13 (must be 0): %d\n", len(s.internal()))
	unchecked := 0
	for _, r := range s.results {
		if r.unchecked != "" {
			unchecked++
			fmt.Fprintf(w, "  not checked: %s %s: %s\n", r.kind, r.id, oneLine(r.unchecked))
		}
	}
	fmt.Fprintf(w, "flows the suite could not check (must be 0): %d\n", unchecked)
	fmt.Fprintf(w, "unclean flows (must be 0): %d\n", len(s.unclean()))
	for _, r := range s.unclean() {
		fmt.Fprintf(w, "  %s %s: %s\n", r.kind, r.id, strings.Join(r.notes, "; "))
	}
	if len(s.startupCrashes) > 0 {
		fmt.Fprintf(w, "\nreplicas that exited while the cluster started (restarted, as a kubelet would): %d\n", len(s.startupCrashes))
		for _, sc := range s.startupCrashes {
			fmt.Fprintf(w, "  %s: %s\n", sc.replica, sc.cause)
		}
	}
	fmt.Fprintln(w)
}

// oneLine keeps the first line of s, shortened.
func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return s
}
