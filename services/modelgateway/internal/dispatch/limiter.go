package dispatch

import (
	"context"
	"sync/atomic"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
)

// Limiter bounds concurrent upstream requests to one provider, with a
// bounded queue of waiters: past the queue, Acquire fails at once. Safe for
// concurrent use.
type Limiter struct {
	provider string
	sem      chan struct{}
	queued   atomic.Int64
	maxQueue int64
	release  func()
}

// NewLimiter allows max concurrent requests and maxQueue waiters.
func NewLimiter(provider string, max, maxQueue int) *Limiter {
	if max <= 0 {
		max = 1
	}
	if maxQueue < 0 {
		maxQueue = 0
	}
	l := &Limiter{provider: provider, sem: make(chan struct{}, max), maxQueue: int64(maxQueue)}
	l.release = func() { <-l.sem }
	return l
}

// Acquire waits for a slot and returns the function that frees it. It fails
// with llm.KindOverloaded when the queue is full, or with ctx's error.
func (l *Limiter) Acquire(ctx context.Context) (func(), error) {
	select {
	case l.sem <- struct{}{}:
		return l.release, nil
	default:
	}
	if l.queued.Add(1) > l.maxQueue {
		l.queued.Add(-1)
		return nil, llm.Errorf(l.provider, llm.KindOverloaded, "too many requests in flight: %d running and %d queued", cap(l.sem), l.maxQueue)
	}
	defer l.queued.Add(-1)
	select {
	case l.sem <- struct{}{}:
		return l.release, nil
	case <-ctx.Done():
		return nil, &llm.Error{Provider: l.provider, Kind: llm.KindCanceled, Message: "cancelled while queued for the provider", Err: ctx.Err()}
	}
}

// InFlight returns the number of requests holding a slot.
func (l *Limiter) InFlight() int { return len(l.sem) }

// Queued returns the number of requests waiting for a slot.
func (l *Limiter) Queued() int { return int(l.queued.Load()) }
