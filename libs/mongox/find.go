package mongox

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// FirstBatch is how many documents Find and Aggregate ask for in the first
// reply (the driver's default is 101). It is not larger because FerretDB
// sizes a reply by count alone: it allocates room for the whole batch and
// fills it, without MongoDB's 16 MiB cap. A thousand covers every page and
// bounded list the services read, and leaves room for documents up to
// 48 KB in one reply under the wire protocol's 48 MB; longer results
// (start-up sweeps) still page by getMore.
const FirstBatch = 1000

// Find is coll.Find asking for FirstBatch documents in the first reply.
// Every query of the services goes through it (or Aggregate), because of
// FerretDB (agentmesh up's embedded store, or a FerretDB in front of
// PostgreSQL in production): a find whose context cut it while its first
// reply was on the way leaves the server cursor the client never learned,
// and on FerretDB that cursor keeps one of its 100 SQLite connections
// until the client's connection closes. A hundred of those and FerretDB
// answers nothing: four clients cutting finds of 2,000 documents for 5 s
// left it answering no find for over 100 s (TestCutFindsLeaveNoCursors
// cuts finds of 400 for 3 s). With the whole result in the first reply
// the server drains the query and keeps no cursor. A caller's own batch
// size wins.
func Find(ctx context.Context, coll *mongo.Collection, filter any, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error) {
	return coll.Find(ctx, filter, append([]options.Lister[options.FindOptions]{options.Find().SetBatchSize(FirstBatch)}, opts...)...)
}

// Aggregate is coll.Aggregate asking for FirstBatch documents in the first
// reply: see Find.
func Aggregate(ctx context.Context, coll *mongo.Collection, pipeline any, opts ...options.Lister[options.AggregateOptions]) (*mongo.Cursor, error) {
	return coll.Aggregate(ctx, pipeline, append([]options.Lister[options.AggregateOptions]{options.Aggregate().SetBatchSize(FirstBatch)}, opts...)...)
}
