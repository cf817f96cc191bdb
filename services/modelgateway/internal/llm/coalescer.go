package llm

// Coalescer merges consecutive deltas of one kind that arrived together: a
// stream parser adds each delta and flushes whenever its input buffer runs
// dry (and before anything else it emits), so a burst of tokens read in one
// go becomes one event instead of one gRPC message each.
//
// The first delta is merged like the others. Sending it alone at once was
// tried (bench/modelgateway, streaming at 2,000 RPS, four alternated pairs,
// on the bench before its baseline was made fair, which skewed both arms
// alike) and was no better. gRPC's writer yields before flushing a small
// write, so the rest of the burst likely goes out with the first delta
// anyway.
type Coalescer struct {
	// Sink receives the merged deltas.
	Sink Sink

	kind EventKind // of the queued delta
	one  string    // the only queued delta, kept without copying
	text []byte    // the queued deltas, once there are several
	n    int       // how many deltas are queued
}

// Add queues a delta, flushing first if its kind differs from the queued
// one.
func (c *Coalescer) Add(kind EventKind, text string) error {
	if c.n > 0 && kind != c.kind {
		if err := c.Flush(); err != nil {
			return err
		}
	}
	c.kind = kind
	switch c.n {
	case 0:
		c.one = text
	case 1:
		c.text = append(append(c.text[:0], c.one...), text...)
	default:
		c.text = append(c.text, text...)
	}
	c.n++
	return nil
}

// Flush sends the queued delta, if any.
func (c *Coalescer) Flush() error {
	if c.n == 0 {
		return nil
	}
	text := c.one
	if c.n > 1 {
		text = string(c.text)
	}
	c.n = 0
	return c.Sink(Event{Kind: c.kind, Text: text})
}
