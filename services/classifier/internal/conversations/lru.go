package conversations

import "container/list"

// lru keeps values by key up to a total cost, dropping the least
// recently used first. It is not safe for concurrent use.
type lru[V any] struct {
	max, cost int
	byKey     map[string]*list.Element // of *lruEntry[V]
	order     *list.List               // front: most recently used
}

type lruEntry[V any] struct {
	key  string
	v    V
	cost int
}

func newLRU[V any](max int) *lru[V] {
	return &lru[V]{max: max, byKey: map[string]*list.Element{}, order: list.New()}
}

func (l *lru[V]) get(k string) (V, bool) {
	e, ok := l.byKey[k]
	if !ok {
		var zero V
		return zero, false
	}
	l.order.MoveToFront(e)
	return e.Value.(*lruEntry[V]).v, true
}

// put keeps v under k at cost, unless cost alone is over the bound.
func (l *lru[V]) put(k string, v V, cost int) {
	if cost > l.max {
		return
	}
	if e, ok := l.byKey[k]; ok {
		old := e.Value.(*lruEntry[V])
		l.cost += cost - old.cost
		old.v, old.cost = v, cost
		l.order.MoveToFront(e)
	} else {
		l.byKey[k] = l.order.PushFront(&lruEntry[V]{key: k, v: v, cost: cost})
		l.cost += cost
	}
	for l.cost > l.max {
		old := l.order.Remove(l.order.Back()).(*lruEntry[V])
		delete(l.byKey, old.key)
		l.cost -= old.cost
	}
}

func (l *lru[V]) len() int { return l.order.Len() }

func (l *lru[V]) clear() {
	clear(l.byKey)
	l.order.Init()
	l.cost = 0
}
