package mongox

// Queued is how many callers of b wait for a batch, in both lanes.
func Queued[T any](b *Batcher[T]) int {
	n := 0
	for i := range b.lanes {
		l := &b.lanes[i]
		l.mu.Lock()
		n += len(l.queue)
		l.mu.Unlock()
	}
	return n
}

// WriteGateBusy reports whether a write holds the turn of the single
// writers' gate for uri.
func WriteGateBusy(uri string) bool {
	g := gateFor(uri)
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.busy
}
