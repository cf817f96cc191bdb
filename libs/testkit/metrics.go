package testkit

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// CounterSums collects r and returns the int64 counter name's values
// summed by key of each data point's attributes (e.g. one attribute's
// value).
func CounterSums(t testing.TB, r *sdkmetric.ManualReader, name string, key func(*attribute.Set) string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("metric %s is %T, not an int64 counter", name, m.Data)
			}
			for _, dp := range sum.DataPoints {
				out[key(&dp.Attributes)] += dp.Value
			}
		}
	}
	return out
}
