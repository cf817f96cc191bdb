// Package heartbeat renews a claim on a schedule for as long as its holder
// works: the analysis job claims, the indexer's extraction claims, the SQL
// agent's execution claims and the chat turn's lease all keep themselves
// alive this way, each renewing every third of its TTL so that one or two
// late renewals do not lose it.
package heartbeat

import (
	"context"
	"sync"
	"time"
)

// Keep calls renew every interval, from a goroutine of its own, until renew
// returns false, ctx is done, or the returned stop is called. stop waits
// for a renewal under way to return, so nothing renews after it; it may be
// called more than once. renew gets ctx and bounds its own call.
func Keep(ctx context.Context, interval time.Duration, renew func(context.Context) bool) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if !renew(ctx) {
				return
			}
		}
	}()
	return sync.OnceFunc(func() {
		close(done)
		<-exited
	})
}
