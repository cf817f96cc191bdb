// Package dbbudget helps the classifier's store tests, run on databases
// whose commands are counted (testkit.EachWriterModeCounted), hold a hot
// path (a batch, a run's end) to lookups by exact _id on the collections
// that grow, without timing anything.
//
// Only test code imports this package.
package dbbudget

import (
	"slices"
	"strings"

	"github.com/agentmesh/agentmesh/libs/testkit"
)

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
