package mongox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/priority"
)

// Batcher gathers the writes asked for while one of its batches is under
// way into the next batch, written as one command (a group commit). Alone,
// a caller's write goes at once, as a batch of one; under a burst, a
// caller waits for the batch ahead of its own instead of for every write
// ahead of it in the write gate's line.
//
// Batcher is safe for concurrent use; the zero value is not usable (see
// NewBatcher).
type Batcher[T any] struct {
	write func(ctx context.Context, items []T) []error
	max   int

	// lanes batch background writes [0] and interactive ones [1] apart,
	// so a submission never waits in a background batch, behind the
	// gate's interactive line.
	lanes [2]lane[T]
}

type lane[T any] struct {
	mu      sync.Mutex
	queue   []*batched[T] // waiting for a batch, oldest first
	running bool          // a batch is being written
}

type batched[T any] struct {
	ctx  context.Context
	item T
	err  error
	lead chan struct{} // closed when this caller is to write the next batch
	done chan struct{} // closed once err is set
}

// NewBatcher returns a Batcher whose batches hold at most size items (at
// least one). Write writes items in one command and returns the outcome of
// each, errs[i] for items[i]. A batch holds either Interactive callers
// (priority) or background ones; write's ctx carries the values of the
// batch's first caller and ends at the latest deadline of theirs (none if
// one has none), never when a caller's ctx is canceled: the others' writes
// are in the same command.
func NewBatcher[T any](size int, write func(ctx context.Context, items []T) []error) *Batcher[T] {
	return &Batcher[T]{write: write, max: max(size, 1)}
}

// Do writes item in a batch and returns its outcome. It returns only once
// the batch is written, even if ctx ends first: the write may be under way
// and its outcome is the caller's to know (a caller holding a document's
// lock keeps it until then). Ctx bounds the batch as NewBatcher says.
func (b *Batcher[T]) Do(ctx context.Context, item T) error {
	p := &batched[T]{ctx: ctx, item: item, lead: make(chan struct{}), done: make(chan struct{})}
	l := &b.lanes[0]
	if priority.IsInteractive(ctx) {
		l = &b.lanes[1]
	}
	l.mu.Lock()
	l.queue = append(l.queue, p)
	leading := !l.running
	l.running = true
	l.mu.Unlock()
	if !leading {
		select {
		case <-p.done:
			return p.err
		case <-p.lead:
		}
	}
	// p is first in the queue: it writes the queue's first batch, then
	// hands the lead to the first caller left waiting, if any.
	l.mu.Lock()
	n := min(len(l.queue), b.max)
	batch := l.queue[:n:n]
	l.queue = append([]*batched[T](nil), l.queue[n:]...)
	l.mu.Unlock()

	// Even if write panics, the callers in the batch get an outcome and
	// the lead passes on: the lane is never left waiting for a leader.
	defer func() {
		l.mu.Lock()
		if len(l.queue) > 0 {
			close(l.queue[0].lead)
		} else {
			l.running = false
		}
		l.mu.Unlock()
	}()
	b.run(batch)
	return p.err
}

// errBatchPanicked is the outcome of the writes of a batch whose write
// panicked.
var errBatchPanicked = errors.New("mongox: the batch's write panicked; its outcome is unknown")

// run writes batch and gives each caller its outcome.
func (b *Batcher[T]) run(batch []*batched[T]) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	items := make([]T, len(batch))
	for i, p := range batch {
		items[i] = p.item
	}
	var errs []error
	defer func() {
		r := recover()
		for i, p := range batch {
			switch {
			case r != nil:
				p.err = errBatchPanicked
			case i < len(errs):
				p.err = errs[i]
			}
			close(p.done)
		}
		if r != nil {
			panic(r) // the leader's caller's, as if it had written alone
		}
	}()
	errs = b.write(ctx, items)
}

// batchContext is the context a batch is written with (see NewBatcher).
func batchContext[T any](batch []*batched[T]) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, p := range batch {
		d, ok := p.ctx.Deadline()
		if !ok {
			return context.WithoutCancel(batch[0].ctx), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}

// InsertEach inserts docs into coll in one unordered command and returns
// each one's outcome, errs[i] for docs[i], translated (Translate): a taken
// _id fails that document alone with ErrDuplicate. When the command fails
// as a whole, every outcome is its error: unknown (the server may have
// stored some). The only writer's client with a DocInserter (agentmesh
// up's, on its embedded FerretDB: see RegisterDirect) writes them beneath
// the driver in one transaction, in its write turn, when it can write them
// as the server would.
func InsertEach[D any](ctx context.Context, coll *mongo.Collection, docs []D) []error {
	errs := make([]error, len(docs))
	if len(docs) == 0 {
		return errs
	}
	direct, err, served := insertEachDirect(ctx, coll, docs)
	if served && err == nil {
		return direct
	}
	if !served {
		_, err = coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	}
	var bwe mongo.BulkWriteException
	switch {
	case err == nil:
	case errors.As(err, &bwe) && bwe.WriteConcernError == nil && len(bwe.WriteErrors) > 0 &&
		!slices.ContainsFunc(bwe.WriteErrors, func(we mongo.BulkWriteError) bool { return we.Index < 0 || we.Index >= len(docs) }):
		for _, we := range bwe.WriteErrors {
			if mongo.IsDuplicateKeyError(we) {
				errs[we.Index] = fmt.Errorf("%w: %w", ErrDuplicate, we)
			} else {
				errs[we.Index] = Translate(we)
			}
		}
	default:
		err = Translate(err)
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

// insertEachDirect inserts docs through the only writer's DocInserter (the
// embedded FerretDB's), if its client has one that serves them: each
// one's outcome, or the error of the whole call (see InsertEach).
func insertEachDirect[D any](ctx context.Context, coll *mongo.Collection, docs []D) (errs []error, err error, served bool) {
	in, ok := directAs[DocInserter](coll.Database())
	if !ok {
		return nil, nil, false
	}
	// Encoded as the driver encodes them with its default registry and
	// options, which the mesh's clients keep.
	raws := make([]bson.Raw, len(docs))
	for i, doc := range docs {
		raw, err := encodeDoc(any(doc))
		if err != nil {
			return nil, nil, false // the driver says what is wrong with it
		}
		raws[i] = raw
	}
	errs, served, err = direct(ctx, coll, "insert", func() ([]error, bool, error) {
		return in.InsertDocs(ctx, coll.Database().Name(), coll.Name(), raws)
	})
	return errs, err, served
}
