package mongostore

import "container/list"

// windowCacheSize bounds the windows a store remembers having written: the
// conversations with turns in flight and recent ones, not every
// conversation a long-running process ever served.
const windowCacheSize = 4096

// windowCache is a least-recently-written cache of window documents. It is
// not safe for concurrent use: the store guards it.
type windowCache struct {
	max   int
	order *list.List               // of string ids, most recent at the front
	items map[string]*list.Element // id → element whose Value is a *windowEntry
}

type windowEntry struct {
	id string
	w  windowDoc
}

func newWindowCache(max int) *windowCache {
	return &windowCache{max: max, order: list.New(), items: map[string]*list.Element{}}
}

func (c *windowCache) get(id string) (windowDoc, bool) {
	e, ok := c.items[id]
	if !ok {
		return windowDoc{}, false
	}
	return e.Value.(*windowEntry).w, true
}

func (c *windowCache) put(id string, w windowDoc) {
	if e, ok := c.items[id]; ok {
		e.Value.(*windowEntry).w = w
		c.order.MoveToFront(e)
		return
	}
	c.items[id] = c.order.PushFront(&windowEntry{id: id, w: w})
	for c.order.Len() > c.max {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.items, oldest.Value.(*windowEntry).id)
	}
}

func (c *windowCache) remove(id string) {
	if e, ok := c.items[id]; ok {
		c.order.Remove(e)
		delete(c.items, id)
	}
}
