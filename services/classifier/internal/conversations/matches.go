package conversations

import (
	"slices"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/lru"
)

// A run fetches its plan's matches a page at a time (at most MaxBatch
// conversations), each page skipping what the run labelled already. On
// the embedded FerretDB every page reads and parses every conversation of
// the collection and sorts the matches in Go, whatever the limit, so a
// run of n pages pays for n whole scans to learn one ordered list.
//
// In single-writer mode (mongox.SingleWriter: agentmesh up, whose
// classifier is the only writer of the collection) the Store keeps that
// list: the first page of a (scope, filter) queries its first
// matchPrefix matches in id order, and later pages — of the same run or of
// another run with the same query — are cut from it in process. Every
// write of the Store (Upsert, the moves of Prepare) makes the kept lists
// stale; a list is only kept if no write began or ended while its query
// ran. A page is the first limit ids of the list not excluded; when the
// kept prefix holds fewer than that and the scope has more matches than
// the prefix, the page is queried as before. Plans are deterministic (plan
// refuses $where, $expr and everything else that is not a plain function
// of the stored documents), so the same filter on the same data matches
// the same conversations.
//
// The conversations a single writer reads by key are kept too, up to
// maxKeptConversationBytes, made stale by the same writes: a run's batch
// reads the conversations its fetch's sample read, and runs over the same
// conversations read each once.
//
// With many writers nothing is kept: another process's import would not
// reach this one's lists.

// matchPrefix is how many matches of a (scope, filter) a kept list holds:
// enough for the pages of runs with targets in the hundreds, small enough
// that the first page's query moves little more than a page would.
const matchPrefix = 1000

// matchLists is how many (scope, filter) lists are kept, least recently
// used first out: at most matchLists*matchPrefix ids.
const matchLists = 64

// maxKeptConversationBytes bounds the conversations a single writer
// keeps (about: their texts and a little per message), so a run's batch
// reads the conversations its fetch just read, and runs over the same
// conversations share them, without a round trip each.
const maxKeptConversationBytes = 16 << 20

// readCache holds, for a single writer, the kept match lists and the
// conversations last read. Its zero value is not usable: see
// newReadCache.
type readCache struct {
	mu sync.Mutex
	// gen counts the Store's writes twice: when each begins and when it
	// ends, so a read that overlapped any write sees it changed.
	gen   uint64
	lists *lru.Cache[*matchList] // by matchKey, cost 1 each
	docs  *lru.Cache[doc]        // by key(), cost docCost
}

type matchList struct {
	ids      []string // in id order, no duplicates
	complete bool     // ids holds every match, not only a prefix
}

func newReadCache() *readCache {
	return &readCache{lists: lru.New[*matchList](matchLists), docs: lru.New[doc](maxKeptConversationBytes)}
}

// docCost estimates what keeping d costs, in bytes.
func docCost(d doc) int {
	n := 256 + len(d.ID) + len(d.Channel) + len(d.Customer) + 64*len(d.Metadata)
	for _, m := range d.Messages {
		n += 64 + len(m.Role) + len(m.Text)
	}
	return n
}

// matchKey names a (scope, filter): the scope's key prefix and the
// filter's BSON, which marshals its elements in order.
func matchKey(scope *commonv1.Scope, filter bson.D) (string, error) {
	if filter == nil {
		filter = bson.D{} // all: as a nil filter queries
	}
	b, err := bson.Marshal(filter)
	if err != nil {
		return "", err
	}
	return key(scope, "") + string(b), nil
}

// written marks the start or the end of a write of the Store.
func (c *readCache) written() {
	c.mu.Lock()
	c.gen++
	// Everything kept may be stale now: free it rather than keep it until
	// it is pushed out.
	c.lists.Clear()
	c.docs.Clear()
	c.mu.Unlock()
}

// generation returns the write count a query starting now must see
// unchanged at its end for its list to be kept.
func (c *readCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// page returns the first limit ids of k's kept list not in exclude, and
// whether the kept list answers: false when none is kept or when it is a
// prefix too short to fill the page.
func (c *readCache) page(k string, exclude []string, limit int) ([]string, bool) {
	c.mu.Lock()
	l, ok := c.lists.Get(k)
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	// l.ids is never changed once kept: read it outside the lock.
	return l.page(exclude, limit)
}

func (l *matchList) page(exclude []string, limit int) ([]string, bool) {
	skip := make(map[string]struct{}, len(exclude))
	for _, id := range exclude {
		skip[id] = struct{}{}
	}
	out := make([]string, 0, min(limit, len(l.ids)))
	for _, id := range l.ids {
		if _, ok := skip[id]; ok {
			continue
		}
		if out = append(out, id); len(out) == limit {
			return out, true
		}
	}
	return out, l.complete
}

// keep keeps l, the first matches of k's (scope, filter) in id order, if
// no write began or ended since gen.
func (c *readCache) keep(k string, l *matchList, gen uint64) {
	l.ids = slices.Clip(l.ids)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen {
		c.lists.Put(k, l, 1)
	}
}

// conversation returns the conversation kept under key k.
func (c *readCache) conversation(k string) (doc, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.docs.Get(k)
}

// keepConversation keeps d, read under key k, if no write began or ended
// since gen.
func (c *readCache) keepConversation(k string, d doc, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen {
		c.docs.Put(k, d, docCost(d))
	}
}
