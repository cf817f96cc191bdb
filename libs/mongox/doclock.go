package mongox

import (
	"fmt"
	"sort"
	"sync"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// FerretDB v1 applies an update as a read of the document, a check of the
// filter in Go, and a write of the whole document, without isolation
// between the steps: two concurrent updates of one document can both match
// a `version` filter, and one of them is lost. MongoDB applies
// single-document updates atomically. Every process that writes through
// FerretDB (`agentmesh up`, the tests) therefore serialises its writes to
// one document with these locks; UpdateVersioned and the outbox relay take
// them, and a store that updates a document some other way takes
// LockDocument itself. Several processes sharing one FerretDB are not
// protected: production runs on MongoDB.
var docLocks Locks

// Locks is a set of mutexes by key, each kept only while it is held or
// waited for. The zero value is ready to use.
type Locks struct {
	mu sync.Mutex
	m  map[string]*docLock
}

type docLock struct {
	mu   sync.Mutex
	refs int // guarded by Locks.mu
}

// Lock locks key's mutex and returns the unlock func. Different keys
// never contend; the locks are not reentrant.
func (ls *Locks) Lock(key string) (unlock func()) {
	ls.mu.Lock()
	if ls.m == nil {
		ls.m = map[string]*docLock{}
	}
	l := ls.m[key]
	if l == nil {
		l = &docLock{}
		ls.m[key] = l
	}
	l.refs++
	ls.mu.Unlock()

	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		ls.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(ls.m, key)
		}
		ls.mu.Unlock()
	}
}

// LockDocument locks the document with _id id in coll for this process and
// returns the unlock func. Locks of different documents never contend.
func LockDocument(coll *mongo.Collection, id any) (unlock func()) {
	return docLocks.Lock(coll.Database().Name() + "\x00" + coll.Name() + "\x00" + fmt.Sprint(id))
}

// LockDocuments locks the documents with these _ids in coll (LockDocument
// for each, duplicates once) in one order, by their string form, so that
// callers locking overlapping sets never deadlock each other; the returned
// func unlocks them all. The locks are not reentrant: while holding them,
// take no lock of one of these documents again (LockDocument, UpdateIf,
// UpdateVersioned).
func LockDocuments(coll *mongo.Collection, ids ...any) (unlock func()) {
	keys := make([]string, 0, len(ids))
	byKey := make(map[string]any, len(ids))
	for _, id := range ids {
		k := fmt.Sprint(id)
		if _, dup := byKey[k]; !dup {
			byKey[k] = id
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	unlocks := make([]func(), len(keys))
	for i, k := range keys {
		unlocks[i] = LockDocument(coll, byKey[k])
	}
	return func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}
}
