// Package dbbudget runs the classifier's store tests on a database whose
// commands are counted (testkit.MongoDBCounted) in both writer modes, so a
// test holds a hot path (a batch, a run's end) to a budget of round trips
// and to lookups by exact _id without timing anything.
//
// Only test code imports this package.
package dbbudget

import (
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// EachWriterMode runs body as testkit.EachWriterMode does, in both writer
// modes, on a new counted database instead of the plain one.
func EachWriterMode(t *testing.T, body func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips)) {
	t.Helper()
	testkit.EachWriterMode(t, func(t *testing.T, plain *mongo.Database) {
		db, rt := testkit.MongoDBCounted(t)
		if mongox.SingleWriter(plain) {
			mongox.MarkSingleWriter(db.Client())
		}
		body(t, db, rt)
	})
}

// NotExactOn returns the statements of rt.NotExact() on the given
// collections: the reads and writes that FerretDB v1 answers by parsing
// the whole collection.
func NotExactOn(rt *testkit.RoundTrips, collections ...string) []string {
	var out []string
	for _, s := range rt.NotExact() {
		if f := strings.Fields(s); len(f) > 1 && slices.Contains(collections, f[1]) {
			out = append(out, s)
		}
	}
	return out
}
