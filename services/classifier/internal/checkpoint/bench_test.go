package checkpoint

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/agentmesh/agentmesh/libs/events"
)

// percentiles returns the p50 and p99 of ds in milliseconds.
func percentiles(ds []time.Duration) (p50, p99 float64) {
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) float64 {
		i := int(q * float64(len(s)-1))
		return float64(s[i].Microseconds()) / 1000
	}
	return at(0.50), at(0.99)
}

// BenchmarkCheckpointWrite measures one checkpoint write on the embedded
// store (FerretDB on SQLite): the whole context of a run in
// AwaitingBatchApproval plus its events, guarded by the version, as the
// runner writes it after every transition. The baseline, measured in the
// same run on the same document, is a bare $set of the same context with no
// version guard, no outbox and no lock.
//
// Sub-benchmarks: "alone" (the outbox is emptied between writes, untimed)
// and "with_relay" (the events relay publishes each write's events to
// NATS meanwhile, as in the service, so writes contend with its removals).
func BenchmarkCheckpointWrite(b *testing.B) {
	for _, withRelay := range []bool{false, true} {
		name := "alone"
		if withRelay {
			name = "with_relay"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			s, db := newStore(b)
			m := machine(b)
			tr := richRun(b, m, "bench")
			rec, err := s.Create(ctx, tr.Run, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			entries := outbox(b, tr)
			coll := db.Collection(Collection)
			filter := bson.D{{Key: "_id", Value: "bench"}}
			clear := func() {
				if _, err := coll.UpdateOne(ctx, filter, bson.M{"$set": bson.M{events.OutboxField: bson.A{}}}); err != nil {
					b.Fatal(err)
				}
			}
			notify := func() {}
			if withRelay {
				relay := runRelay(b, s, testBus(b))
				notify = func() { relay.NotifyDocument("bench") } // after each write, as the runner does
			}

			// Baseline: the same context written with a bare update.
			base := make([]time.Duration, 0, b.N)
			ctxDoc := encodeContext(tr.Run)
			for range max(b.N, 50) {
				t0 := time.Now()
				if _, err := coll.UpdateOne(ctx, filter, bson.M{"$set": bson.M{"context": ctxDoc, "update_time": time.Now()}}); err != nil {
					b.Fatal(err)
				}
				base = append(base, time.Since(t0))
			}

			durations := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				rec, err = s.Commit(ctx, rec, tr.Run, nil, entries)
				durations = append(durations, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				notify()
				if !withRelay {
					b.StopTimer()
					clear()
					b.StartTimer()
				}
			}
			b.StopTimer()
			p50, p99 := percentiles(durations)
			b50, b99 := percentiles(base)
			b.ReportMetric(p50, "p50-ms")
			b.ReportMetric(p99, "p99-ms")
			b.ReportMetric(b50, "baseline-p50-ms")
			b.ReportMetric(b99, "baseline-p99-ms")
			if b50 > 0 {
				b.ReportMetric(p50/b50, "p50-ratio")
			}
		})
	}
}
