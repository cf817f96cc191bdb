package mongostore

import "container/list"

// cacheSize bounds the conversations a store remembers: those with turns
// in flight and recent ones, not every conversation a long-running process
// ever served.
const cacheSize = 4096

// cached is what a store remembers of one conversation. The window is the
// last one this process wrote (used in both modes, see cacheRecent). The
// conversation document and its newest lease generation are remembered
// only by a single writer, for which they are the truth: no other process
// writes them.
type cached struct {
	window *windowDoc // nil: not known
	// stored is the last_seq of the window document in the database, as
	// a single writer last wrote or read it (it writes the document only
	// every windowEvery messages; see cacheRecent).
	stored int64
	conv   *convDoc // nil: not known
	// lease is the newest lease generation (nil: none) when leaseKnown.
	lease      *leaseDoc
	leaseKnown bool
}

// convCache is a least-recently-used cache of conversations. It is not
// safe for concurrent use: the store guards it. Values are copied in and
// out, so callers never share them.
type convCache struct {
	max   int
	order *list.List               // of *cacheEntry, most recent at the front
	items map[string]*list.Element // id → element
}

type cacheEntry struct {
	id string
	c  cached
}

func newConvCache(max int) *convCache {
	return &convCache{max: max, order: list.New(), items: map[string]*list.Element{}}
}

// get returns a copy of what is known of id.
func (c *convCache) get(id string) cached {
	e, ok := c.items[id]
	if !ok {
		return cached{}
	}
	c.order.MoveToFront(e)
	return e.Value.(*cacheEntry).c.clone()
}

// update applies fn to id's entry (a new one if none) and keeps a copy.
func (c *convCache) update(id string, fn func(*cached)) {
	e, ok := c.items[id]
	if !ok {
		e = c.order.PushFront(&cacheEntry{id: id})
		c.items[id] = e
	} else {
		c.order.MoveToFront(e)
	}
	ent := e.Value.(*cacheEntry)
	fn(&ent.c)
	ent.c = ent.c.clone()
	for c.order.Len() > c.max {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.items, oldest.Value.(*cacheEntry).id)
	}
}

func (c *convCache) remove(id string) {
	if e, ok := c.items[id]; ok {
		c.order.Remove(e)
		delete(c.items, id)
	}
}

func (c cached) clone() cached {
	out := c
	if c.window != nil {
		w := *c.window
		w.Recent = append([]msgDoc(nil), c.window.Recent...)
		out.window = &w
	}
	if c.conv != nil {
		d := *c.conv
		out.conv = &d
	}
	if c.lease != nil {
		l := *c.lease
		out.lease = &l
	}
	return out
}
