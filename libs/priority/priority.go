// Package priority marks work that a caller is waiting on. The gRPC
// servers of the mesh mark every request they serve (grpcx), and code that
// goes on in the background after answering one unmarks its context
// (Background); a shared resource that queues its users, such as the
// single writer's write gate (mongox), serves marked work first, so a
// submission waits for the store's current write rather than for every
// background write queued before it.
package priority

import "context"

type key struct{}

// Interactive returns ctx marked as serving a caller who waits.
func Interactive(ctx context.Context) context.Context {
	if IsInteractive(ctx) {
		return ctx
	}
	return context.WithValue(ctx, key{}, true)
}

// Background returns ctx without the mark: for work that goes on after
// the caller has its answer.
func Background(ctx context.Context) context.Context {
	if !IsInteractive(ctx) {
		return ctx
	}
	return context.WithValue(ctx, key{}, false)
}

// IsInteractive reports whether ctx is marked Interactive.
func IsInteractive(ctx context.Context) bool {
	v, _ := ctx.Value(key{}).(bool)
	return v
}
