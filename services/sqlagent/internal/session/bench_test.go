package session_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
)

// countedDBs counts the queries of the databases it wraps: a stage
// transition of the benchmark must run none.
type countedDBs struct {
	session.Databases
	queries *atomic.Int64
}

func (c countedDBs) Query(ctx context.Context, name, sql string, limit int, timeout time.Duration) (*connections.Result, error) {
	c.queries.Add(1)
	return c.Databases.Query(ctx, name, sql, limit, timeout)
}

// BenchmarkStageTransition measures the overhead of one stage transition
// of a session: a typed dropdown selection (ASK_SQL_METHOD →
// change_connection → NEED_CONNECTION → the connection → ASK_SQL_METHOD),
// which calls no model (the agent has no SQL writer: a call would panic)
// and runs no SQL (queries are counted: any fails the benchmark), so all
// it costs is the session's read, the stage logic and the session's
// versioned write. The baseline, measured in the same loop on the same
// store, is a bare write of a session document of the same size (one
// versioned update by _id: Store.Update, as the transition ends with).
// Sessions start afresh every 20 transitions, so documents stay the size
// of a real session. Reported: p50 and p99 of both in ms, their ratios,
// and the 1-minute load average before and after, for each writer mode
// of the store (many writers: service binaries; single writer: agentmesh
// up).
func BenchmarkStageTransition(b *testing.B) {
	for _, single := range []bool{false, true} {
		name := "many_writers"
		if single {
			name = "single_writer"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			load0 := loadAverage()
			db := testkit.MongoDB(b)
			if single {
				mongox.MarkSingleWriter(db.Client())
			}
			store := newStore(b, db)
			var queries atomic.Int64
			dbs := countedDBs{Databases: newShop(b).dbs, queries: &queries}
			a := session.NewAgent(store, dbs, nil, session.Options{})
			const perSession = 20
			trans := make([]time.Duration, 0, b.N)
			base := make([]time.Duration, 0, b.N)
			var s, bare *session.Session
			b.ResetTimer()
			for i := range b.N {
				if i%perSession == 0 {
					b.StopTimer()
					var err error
					if s, _, err = a.Create(ctx, scope, connections.SampleName); err != nil {
						b.Fatal(err)
					}
					if bare, _, err = a.Create(ctx, scope, connections.SampleName); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				sel, want := "change_connection", session.StageNeedConnection
				if s.Stage == session.StageNeedConnection {
					sel, want = connections.SampleName, session.StageAskSQLMethod
				}
				t0 := time.Now()
				got, r, err := a.Send(ctx, scope, s.ID, "", sel)
				trans = append(trans, time.Since(t0))
				if err != nil || got.Stage != want {
					b.Fatalf("selection %q: stage %v, %v", sel, got, err)
				}
				s = got

				// The baseline: the same two turns added, one write.
				now := time.Now().UTC()
				bare.Turns = append(bare.Turns, session.Turn{Role: "user", Text: sel, Time: now}, session.Turn{Role: "agent", Text: r.Text, Time: now})
				bare.Stage, bare.Updated = got.Stage, now
				t0 = time.Now()
				err = store.Update(ctx, bare)
				base = append(base, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if n := queries.Load(); n != 0 {
				b.Fatalf("the transitions ran %d queries, want none", n)
			}
			p50, p99 := percentiles(trans)
			b50, b99 := percentiles(base)
			b.ReportMetric(p50, "p50-ms")
			b.ReportMetric(p99, "p99-ms")
			b.ReportMetric(b50, "write-p50-ms")
			b.ReportMetric(b99, "write-p99-ms")
			if b50 > 0 && b99 > 0 {
				b.ReportMetric(p50/b50, "p50-ratio")
				b.ReportMetric(p99/b99, "p99-ratio")
			}
			b.ReportMetric(load0, "load1-before")
			b.ReportMetric(loadAverage(), "load1-after")
		})
	}
}

// percentiles returns the p50 and p99 of ds in milliseconds.
func percentiles(ds []time.Duration) (p50, p99 float64) {
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) float64 { return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000 }
	return at(0.50), at(0.99)
}

// loadAverage is the 1-minute load average (/proc/loadavg); -1 where
// there is none.
func loadAverage() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var l float64
	if _, err := fmt.Sscan(strings.Fields(string(raw))[0], &l); err != nil {
		return -1
	}
	return l
}
