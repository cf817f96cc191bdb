package testkit

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/mongox"
)

// RoundTrips counts the commands a client sends to the database, by
// command and collection ("update analysis_jobs"), so a test can hold a
// store's hot path to a budget of round trips without timing anything. It
// also keeps the filters that are not an exact _id lookup (see NotExact),
// and the shape of every statement's filter and sort (see Shapes), so a
// test can check that an index serves each (AssertIndexed). Its methods
// are safe for concurrent use.
type RoundTrips struct {
	mu       sync.Mutex
	counts   map[string]int  // guarded by mu
	notExact []string        // guarded by mu: statements whose filter is not {_id: v}
	unkeyed  []string        // guarded by mu: statements whose filter has no _id equality
	shapes   []QueryShape    // guarded by mu: distinct shapes, in the order first sent
	seen     map[string]bool // guarded by mu: the String of each of shapes
}

// Reset forgets what was counted so far.
func (r *RoundTrips) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts = map[string]int{}
	r.notExact, r.unkeyed = nil, nil
	r.shapes, r.seen = nil, nil
}

// NotExact lists the statements counted since the last Reset (each
// statement of a find, count, distinct, update, delete, findAndModify or
// aggregate) whose filter is not exactly {_id: <string or ObjectID>}, as
// "find things {\"n\": 1}", in the order sent. FerretDB v1 finds the
// documents of every such filter by parsing its whole collection.
func (r *RoundTrips) NotExact() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.notExact)
}

// Unkeyed lists, as NotExact does, the statements whose filter has no
// equality on _id at all (an aggregate never has): they read the
// collection on MongoDB too, unless a secondary index serves them, while a
// filter like {_id: x, version: n} is a lookup by _id there.
func (r *RoundTrips) Unkeyed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.unkeyed)
}

// Shapes lists the distinct shapes (QueryShape) of the statements sent
// since the last Reset, in the order first sent: two statements that
// differ only in their values share one.
func (r *RoundTrips) Shapes() []QueryShape {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.shapes)
}

// Total is the number of commands counted since the last Reset.
func (r *RoundTrips) Total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.counts {
		n += c
	}
	return n
}

// Count is the number of commands counted since the last Reset under
// name, a command and its collection as String spells them ("update
// conversations").
func (r *RoundTrips) Count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[name]
}

// String lists the counts, e.g. "find conversations=2 insert messages=1".
func (r *RoundTrips) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.counts))
	for k := range r.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, r.counts[k])
	}
	return b.String()
}

// direct counts a write the client's store made on the embedded server's
// SQLite file rather than through the driver (mongox.DeleteIDs,
// InsertEach and ReplaceByID), as "<cmd> <collection> (sqlite)": still a round trip to the
// database.
func (r *RoundTrips) direct(cmd, coll string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	r.counts[cmd+" "+coll+" (sqlite)"]++
}

func (r *RoundTrips) started(_ context.Context, e *event.CommandStartedEvent) {
	switch e.CommandName {
	case "hello", "isMaster", "ismaster", "ping", "endSessions", "buildInfo", "saslStart", "saslContinue":
		return // connection housekeeping, not the store's work
	}
	coll := ""
	if v, err := e.Command.LookupErr(e.CommandName); err == nil {
		if s, ok := v.StringValueOK(); ok {
			coll = s
		}
	}
	name := strings.TrimSpace(e.CommandName + " " + coll)
	filters := commandFilters(e.CommandName, e.Command)
	shapes := commandShapes(e.CommandName, coll, e.Command)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	r.counts[name]++
	for _, f := range filters {
		exact, keyed := classifyFilter(f)
		desc := name + " " + f.String()
		if !exact {
			r.notExact = append(r.notExact, desc)
		}
		if !keyed {
			r.unkeyed = append(r.unkeyed, desc)
		}
	}
	for _, sh := range shapes {
		if key := sh.String(); !r.seen[key] {
			if r.seen == nil {
				r.seen = map[string]bool{}
			}
			r.seen[key] = true
			r.shapes = append(r.shapes, sh)
		}
	}
}

// commandFilters returns the filters of a command's statements; nil for
// commands without one (insert, getMore, ...). An aggregate's filter is its
// pipeline, which never counts as a lookup by _id.
func commandFilters(name string, cmd bson.Raw) []bson.Raw {
	field := func(key string) []bson.Raw {
		if d, ok := cmd.Lookup(key).DocumentOK(); ok {
			return []bson.Raw{d}
		}
		return []bson.Raw{emptyFilter} // absent: every document
	}
	statements := func(key, q string) []bson.Raw {
		arr, ok := cmd.Lookup(key).ArrayOK()
		if !ok {
			return nil
		}
		vals, err := arr.Values()
		if err != nil {
			return nil
		}
		var out []bson.Raw
		for _, v := range vals {
			if st, ok := v.DocumentOK(); ok {
				out = append(out, statementFilter(st, q))
			}
		}
		return out
	}
	switch name {
	case "find":
		return field("filter")
	case "count", "distinct", "findAndModify":
		return field("query")
	case "update":
		return statements("updates", "q")
	case "delete":
		return statements("deletes", "q")
	case "aggregate":
		pipeline, _ := bson.Marshal(bson.D{{Key: "pipeline", Value: cmd.Lookup("pipeline")}})
		return []bson.Raw{pipeline}
	}
	return nil
}

// statementFilter is the q field of an update or delete statement.
func statementFilter(st bson.Raw, q string) bson.Raw {
	if d, ok := st.Lookup(q).DocumentOK(); ok {
		return d
	}
	return emptyFilter
}

// emptyFilter is {}, the filter of a statement that names none.
var emptyFilter, _ = bson.Marshal(bson.D{})

// classifyFilter reports whether f is exactly {_id: <string or ObjectID>}
// (the filter FerretDB v1 pushes down to SQLite), and whether it has an
// equality on _id at all.
func classifyFilter(f bson.Raw) (exact, keyed bool) {
	elems, err := f.Elements()
	if err != nil {
		return false, false
	}
	for _, e := range elems {
		if e.Key() != "_id" {
			continue
		}
		switch v := e.Value(); v.Type {
		case bson.TypeString, bson.TypeObjectID:
			return len(elems) == 1, true
		case bson.TypeEmbeddedDocument:
			first, err := v.Document().IndexErr(0)
			return false, err != nil || !strings.HasPrefix(first.Key(), "$")
		default:
			return false, true
		}
	}
	return false, false
}

// MongoDBCounted is MongoDB with every command the returned database's
// client sends counted in the returned RoundTrips.
func MongoDBCounted(t testing.TB) (*mongo.Database, *RoundTrips) {
	t.Helper()
	m := sharedMongo(t)
	rt := &RoundTrips{counts: map[string]int{}}
	client, err := mongo.Connect(options.Client().ApplyURI(m.URI()).SetMonitor(&event.CommandMonitor{Started: rt.started}))
	if err != nil {
		t.Fatalf("testkit: connect to %s: %v", m.URI(), err)
	}
	mongox.BindDirect(client, m)
	mongox.ObserveDirect(client, rt.direct)
	db := client.Database(DatabaseName(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := db.Drop(ctx); err != nil {
			t.Errorf("testkit: drop database %s: %v", db.Name(), err)
		}
		_ = client.Disconnect(ctx)
	})
	return db, rt
}

// Uncounted returns db (of MongoDBCounted) through a client of its own,
// whose commands no RoundTrips counts: for a test that polls what the
// code under test wrote while it counts that code's round trips.
func Uncounted(t testing.TB, db *mongo.Database) *mongo.Database {
	t.Helper()
	m := sharedMongo(t)
	client, err := mongo.Connect(options.Client().ApplyURI(m.URI()))
	if err != nil {
		t.Fatalf("testkit: connect to %s: %v", m.URI(), err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client.Database(db.Name())
}
