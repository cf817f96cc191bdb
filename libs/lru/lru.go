// Package lru is a least-recently-used cache bounded by a total cost (a
// count, when every value costs 1; bytes, when the cost is a size).
package lru

import "container/list"

// Cache keeps values by key up to a total cost, dropping the least
// recently used first. It is not safe for concurrent use: its owner guards
// it. The zero Cache is not usable: see New.
type Cache[V any] struct {
	max, cost int
	byKey     map[string]*list.Element // of *entry[V]
	order     *list.List               // front: most recently used
}

type entry[V any] struct {
	key  string
	v    V
	cost int
}

// New returns a cache whose values cost at most max in total.
func New[V any](max int) *Cache[V] {
	return &Cache[V]{max: max, byKey: map[string]*list.Element{}, order: list.New()}
}

// Get returns the value kept under k, making it the most recently used.
func (c *Cache[V]) Get(k string) (V, bool) {
	e, ok := c.byKey[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*entry[V]).v, true
}

// Put keeps v under k at cost, as the most recently used, replacing what
// k held, then drops the least recently used until the total is within the
// bound. A value whose cost alone is over the bound is not kept (and what
// k held stays).
func (c *Cache[V]) Put(k string, v V, cost int) {
	if cost > c.max {
		return
	}
	if e, ok := c.byKey[k]; ok {
		old := e.Value.(*entry[V])
		c.cost += cost - old.cost
		old.v, old.cost = v, cost
		c.order.MoveToFront(e)
	} else {
		c.byKey[k] = c.order.PushFront(&entry[V]{key: k, v: v, cost: cost})
		c.cost += cost
	}
	for c.cost > c.max {
		old := c.order.Remove(c.order.Back()).(*entry[V])
		delete(c.byKey, old.key)
		c.cost -= old.cost
	}
}

// Len is how many values the cache keeps.
func (c *Cache[V]) Len() int { return c.order.Len() }

// Cost is the total cost of the values kept.
func (c *Cache[V]) Cost() int { return c.cost }

// Clear drops every value.
func (c *Cache[V]) Clear() {
	clear(c.byKey)
	c.order.Init()
	c.cost = 0
}
