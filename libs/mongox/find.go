package mongox

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// FirstBatch is how many documents FindAll and AggregateAll ask for in the
// first reply (the driver's default is 101). It is not larger because
// FerretDB sizes a reply by count alone: it allocates room for the whole
// batch and fills it, without MongoDB's 16 MiB cap. A thousand covers
// every page and bounded list the services read, and leaves room for
// documents up to 48 KB in one reply under the wire protocol's 48 MB;
// longer results (start-up sweeps, a long document's chunks) page by
// getMore.
const FirstBatch = 1000

// closeTimeout bounds the killCursors a cut read sends for its cursor.
const closeTimeout = 5 * time.Second

// FindAll appends to out every document of coll that filter matches. Every
// query of the services goes through it (or AggregateAll), because of
// FerretDB (agentmesh up's embedded store, or a FerretDB in front of
// PostgreSQL in production), which keeps a query's cursor, and one of its
// 100 SQLite connections with it, until the client kills the cursor or
// closes the connection that opened it; it has no idle-cursor timeout.
// A hundred such cursors and FerretDB answers no find at all. A read the
// caller's context cuts must therefore not leave one:
//
//   - The whole result comes in the first reply when it fits in
//     FirstBatch (a caller's own batch size wins), and the server then
//     keeps no cursor.
//   - The caller's deadline reaches the driver as a cancellation, not as
//     a deadline: the driver keeps a connection whose read a deadline cut
//     (to read the rest of the reply later) but closes one that a
//     cancellation cut, and FerretDB then drops that connection's
//     cursors. A first reply cut on its way names a cursor the client
//     never learned, which only that closing frees. The server gets no
//     maxTimeMS: it finishes a cut read's current batch (at most
//     FirstBatch documents), then finds the connection closed.
//   - A read cut later (between replies, or in a getMore, which may go
//     over another connection) kills its cursor under a context of its
//     own.
//
// Four clients cutting reads of 2,500 documents for 5 s, at every point of
// their replies, left 100 cursors, and FerretDB answering no find, when the
// deadline reached the driver; now they leave none
// (TestCutReadsLeaveNoCursors).
func FindAll[T any](ctx context.Context, coll *mongo.Collection, filter any, out *[]T, opts ...options.Lister[options.FindOptions]) error {
	return readAll(ctx, out, func(ctx context.Context) (*mongo.Cursor, error) {
		return coll.Find(ctx, filter, append([]options.Lister[options.FindOptions]{options.Find().SetBatchSize(FirstBatch)}, opts...)...)
	})
}

// AggregateAll appends to out every document pipeline yields on coll,
// under FindAll's rules.
func AggregateAll[T any](ctx context.Context, coll *mongo.Collection, pipeline any, out *[]T, opts ...options.Lister[options.AggregateOptions]) error {
	return readAll(ctx, out, func(ctx context.Context) (*mongo.Cursor, error) {
		return coll.Aggregate(ctx, pipeline, append([]options.Lister[options.AggregateOptions]{options.Aggregate().SetBatchSize(FirstBatch)}, opts...)...)
	})
}

// readAll opens a cursor with open and decodes its documents into out; see
// FindAll for the contexts it uses.
func readAll[T any](ctx context.Context, out *[]T, open func(context.Context) (*mongo.Cursor, error)) error {
	cut, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	cur, err := open(cut)
	if err != nil {
		return cutErr(ctx, err)
	}
	defer func() {
		kill := func() {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
			defer cancel()
			_ = cur.Close(c)
		}
		if ctx.Err() != nil {
			go kill() // the caller is not kept past its deadline
			return
		}
		kill()
	}()
	for cur.Next(cut) {
		var v T
		if err := cur.Decode(&v); err != nil {
			return err
		}
		*out = append(*out, v)
	}
	return cutErr(ctx, cur.Err())
}

// cutErr is err, or, when ctx ended, ctx's error with err's text: a read
// that readAll's cancellation cut reports what ended the caller's context
// (its deadline, say), not the cancellation or the closed connection the
// driver saw.
func cutErr(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	return fmt.Errorf("%w (%v)", ctx.Err(), err)
}
