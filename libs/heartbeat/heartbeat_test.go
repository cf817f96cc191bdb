package heartbeat_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/heartbeat"
)

func TestKeep(t *testing.T) {
	t.Parallel()
	const interval = 5 * time.Millisecond

	t.Run("renews until stopped, and stop waits for the last renewal", func(t *testing.T) {
		var calls, inside atomic.Int32
		stop := heartbeat.Keep(context.Background(), interval, func(context.Context) bool {
			inside.Add(1)
			defer inside.Add(-1)
			calls.Add(1)
			<-time.After(interval) // a renewal that takes a while
			return true
		})
		for calls.Load() < 3 {
			<-time.After(interval)
		}
		stop()
		if n := inside.Load(); n != 0 {
			t.Fatalf("a renewal still runs after stop returned")
		}
		after := calls.Load()
		<-time.After(5 * interval)
		if n := calls.Load(); n != after {
			t.Errorf("%d renewals after stop", n-after)
		}
		stop() // a second stop is harmless
	})
	t.Run("a renewal that returns false is the last", func(t *testing.T) {
		var calls atomic.Int32
		stop := heartbeat.Keep(context.Background(), interval, func(context.Context) bool { return calls.Add(1) < 2 })
		defer stop()
		for calls.Load() < 2 {
			<-time.After(interval)
		}
		<-time.After(5 * interval)
		if n := calls.Load(); n != 2 {
			t.Errorf("%d renewals, want 2", n)
		}
	})
	t.Run("ends with its context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var calls atomic.Int32
		stop := heartbeat.Keep(ctx, interval, func(context.Context) bool { calls.Add(1); return true })
		for calls.Load() < 1 {
			<-time.After(interval)
		}
		cancel()
		stop() // returns: the goroutine ended with ctx
		after := calls.Load()
		<-time.After(5 * interval)
		if n := calls.Load(); n != after {
			t.Errorf("%d renewals after the context ended", n-after)
		}
	})
}
