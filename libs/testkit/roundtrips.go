package testkit

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// RoundTrips counts the commands a client sends to the database, by
// command and collection ("update analysis_jobs"), so a test can hold a
// store's hot path to a budget of round trips without timing anything. Its
// methods are safe for concurrent use.
type RoundTrips struct {
	mu     sync.Mutex
	counts map[string]int // guarded by mu
}

// Reset forgets what was counted so far.
func (r *RoundTrips) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts = map[string]int{}
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
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	r.counts[strings.TrimSpace(e.CommandName+" "+coll)]++
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

