package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
)

// OutboxField is the document field holding pending outbox entries.
const OutboxField = "outbox"

// OutboxIndex is the index that serves a [Relay]'s sweep of a collection
// on MongoDB: its filter is {"outbox.0": {$exists: true}} (paged by _id),
// and a sparse index on "outbox.0" holds only the documents whose outbox
// is not empty, so a sweep reads those and sorts them, never the
// collection. (An index that is not sparse holds every document, a missing
// field as null, and {$exists: true} then scans all of it; a partial index
// would do too, but FerretDB v1 refuses partialFilterExpression, while it
// accepts and ignores sparse.) Every store whose collection a Relay serves
// creates it at start in the many-writer mode.
var OutboxIndex = mongox.Index{Name: "outbox_pending", Keys: bson.D{{Key: OutboxField + ".0", Value: 1}}, Sparse: true}

// Relay tuning.
const (
	// RelayPollInterval is how often a [Relay] scans its whole collection
	// for entries nobody named with NotifyDocument (failed publishes, or
	// another replica that died before relaying), or, for a single writer,
	// relays again the documents whose relay failed. A scan is expensive on
	// FerretDB, so the fast path is NotifyDocument, not polling.
	RelayPollInterval = 5 * time.Second
	// relayPageSize is how many documents one query of a sweep reads.
	relayPageSize = 100
	// relayBatch is the most named documents one goroutine of Run relays
	// in turn, reading those it must read in one query.
	relayBatch = 32
	// relayPublishTimeout bounds the publish of one entry.
	relayPublishTimeout = 10 * time.Second
)

// OutboxEntry is one event waiting in a document's outbox array to be
// published by a [Relay]. Build it with [OutboxEntryFor]; a document type
// embeds the entries as
//
//	Outbox []events.OutboxEntry `bson:"outbox,omitempty"`
type OutboxEntry struct {
	// ID is the event id; the relay publishes with Nats-Msg-Id = ID.
	ID string `bson:"id"`
	// Subject is the subject to publish on.
	Subject string `bson:"subject"`
	// Data is the marshalled [commonv1.Event].
	Data []byte `bson:"data"`
	// Trace holds the W3C trace context of the write that produced the
	// entry (see [OutboxEntry.WithTraceContext]); the relay sends it as
	// message headers.
	Trace map[string]string `bson:"trace,omitempty"`
}

// OutboxEntryFor encodes ev for publishing on subject through an outbox. It
// sets ev.Subject; ev must have an id (use [NewEvent]).
func OutboxEntryFor(subject string, ev *commonv1.Event) (OutboxEntry, error) {
	data, err := marshalEvent(subject, ev)
	if err != nil {
		return OutboxEntry{}, err
	}
	return OutboxEntry{ID: ev.GetId(), Subject: subject, Data: data}, nil
}

// WithTraceContext returns a copy of e carrying the trace context of ctx
// (through otel.GetTextMapPropagator), so the relayed message continues the
// trace of the request that wrote it.
func (e OutboxEntry) WithTraceContext(ctx context.Context) OutboxEntry {
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	if len(carrier) > 0 {
		e.Trace = carrier
	}
	return e
}

// OutboxPush returns the value of a $push that appends entries, in order,
// to a document's outbox, for use in the same update as the state change:
//
//	update := bson.M{
//		"$set":  bson.M{"status": "done", "version": v + 1},
//		"$push": events.OutboxPush(entry),
//	}
//
// Call [Relay.Notify] after the update succeeds to publish promptly.
func OutboxPush(entries ...OutboxEntry) bson.M {
	if entries == nil {
		entries = []OutboxEntry{}
	}
	return bson.M{OutboxField: bson.M{"$each": entries}}
}

// Relay publishes the outbox entries of one collection's documents and
// removes them once JetStream has stored them. See the package comment for
// the consistency argument. A Relay is safe for concurrent use; several
// relays (one per service replica) may serve the same collection, at the
// cost of duplicate publishes that JetStream discards by event id. Its
// hooks (SetDocumentLock, SetDrained, SetGone, SetPublished, SetRemover)
// may run while Run relays a document, holding the lock Sweep and
// SweepDocuments take to write: a hook must not call those two.
type Relay struct {
	bus    *Bus
	coll   *mongo.Collection
	logger *slog.Logger
	wake   chan struct{}                // capacity 1: coalesced Notify calls
	sweeps sync.RWMutex                 // serialises sweeps so one relay never races itself; Run's per-document relays share it
	lock   func(id any) (unlock func()) // set before Run; nil: no lock
	conc   int                          // set before Run: documents relayed at once (SetConcurrency)
	delay  time.Duration                // set before Run: wait before removing (SetRemovalDelay)
	poll   time.Duration                // set before Run: between full sweeps (SetPollInterval)
	single bool                         // set before Run: polls retry failures instead of sweeping (SetSingleWriter)
	// drained is called with a document's _id once its outbox was read
	// and everything read was published and removed (SetDrained).
	drained func(ctx context.Context, id any) error
	// gone reports a document known to have left the collection (SetGone).
	gone func(id any) bool
	// published is told the ids of a document's entries stored in
	// JetStream, before their removal is written (SetPublished).
	published func(ctx context.Context, id any, entryIDs []string) error
	// remove writes a removal itself, or declines it (SetRemover).
	remove func(ctx context.Context, id any, entryIDs []string) (done bool, err error)

	mu      sync.Mutex            // guards the fields below
	pending []any                 // document ids named by NotifyDocument or NotifyEntries, in call order
	full    bool                  // a full sweep was asked for by Notify
	known   map[any][]OutboxEntry // entries named by NotifyEntries, per document, in call order
	reread  map[any]bool          // documents to read before relaying (NotifyDocument, failures)
	failed  map[any]bool          // documents whose relay or removal failed since the last poll
}

// SetDocumentLock makes the relay hold lock(id) while it removes published
// entries from the document with _id id. Call it before Run or Sweep. The
// default is mongox.LockDocument, which UpdateVersioned takes too.
//
// FerretDB v1 applies an update as a read of the document followed by a
// write of the whole document, without isolation between the two, so two
// concurrent updates of one document can lose one of them — including a
// state change racing the relay's removal. A store that takes the same lock
// around its own updates of a document is safe from that within one
// process. (MongoDB applies single-document updates atomically and needs no
// lock.)
func (r *Relay) SetDocumentLock(lock func(id any) (unlock func())) { r.lock = lock }

// SetConcurrency lets Run relay up to n named documents at once (n < 1
// means 1, the default: one after the other, each read, published and
// cleared before the next). Call it before Run.
//
// With n > 1, Run also clears published entries without holding up the
// publishing: a document named again before the removal of its earlier
// entries is through has its new entries published at once, and one write
// then removes everything published from it — under load, fewer writes.
// Either way each document's entries are published in order; the order
// across documents is not kept, and a published entry stays in its
// document a little longer (it is published again, deduplicated by event
// id, only if the process dies first).
func (r *Relay) SetConcurrency(n int) { r.conc = max(n, 1) }

// SetRemovalDelay makes Run, with a concurrency above 1, wait d after
// publishing a document's entries before removing them: entries published
// from the document meanwhile are removed by the same write, and, with
// SetGone, nothing is written if the document is gone by then. The entries
// stay in their document that much longer (a process that dies meanwhile
// leaves them to be published again, deduplicated by event id). Call it
// before Run.
func (r *Relay) SetRemovalDelay(d time.Duration) { r.delay = max(d, 0) }

// SetPollInterval sets how often Run sweeps the whole collection for
// entries nobody named (RelayPollInterval by default; d <= 0 keeps it). A
// sweep on FerretDB decodes every document of the collection, so a store
// whose collection can hold many documents may want it rarer. Call it
// before Run.
func (r *Relay) SetPollInterval(d time.Duration) {
	if d > 0 {
		r.poll = d
	}
}

// SetSingleWriter tells the relay that its process is the only writer of
// the collection and names to it every write that adds entries
// (NotifyDocument or NotifyEntries after each write, and NotifyDocument
// after a write whose outcome is unknown, such as one that timed out). Run
// then sweeps the whole collection only at start (and again at the next
// poll if that sweep could not read it), reading everything pending in one
// query rather than in pages; every poll interval it relays again, reading
// each by _id, just the documents whose publish or removal failed, in a
// sweep or since. On FerretDB every query of a sweep decodes every document
// of the collection, so periodic sweeps cost more as the collection grows,
// and hold up the documents named meanwhile. Call it before Run.
func (r *Relay) SetSingleWriter() { r.single = true }

// SetDrained makes the relay call drained with a document's _id once it
// has relayed that document's outbox: every entry it read was published
// and removed, or the outbox was empty when read. A store that moves
// finished documents out of the collection once their events are out does
// that here. It is a hint, not a guarantee that the outbox is still empty:
// a write may have added entries since, so drained must check under the
// store's own lock. drained runs in the relay's goroutine for the
// document, after the removal; its error is logged. Call it before Run.
func (r *Relay) SetDrained(drained func(ctx context.Context, id any) error) { r.drained = drained }

// SetGone gives the relay a way to know, without a read, that the
// document with _id id has left the collection (a single writer's store
// that deleted or archived it): the removal of its published entries is
// then not written, as it would match nothing. gone must answer false
// when unsure, and from memory: it is asked before every removal, under
// the document's lock (SetDocumentLock), so a store that holds that lock
// while it moves the document spares the removal that waited for it. Call
// it before Run.
func (r *Relay) SetGone(gone func(id any) bool) { r.gone = gone }

// SetPublished makes the relay call published with a document's _id and
// the ids of its outbox entries that JetStream has stored, in their order,
// as soon as they are (an entry published again, after a failure or by
// another relay, may be named again). A single writer's store that
// remembers which entries it wrote can then tell a document whose every
// entry is out without reading it, and move it away before the removal,
// which SetGone then spares. With a concurrency of 1 the call comes before
// the removal is written, in the relay's goroutine; above 1 it runs in a
// goroutine of its own, while the removal waits its delay
// (SetRemovalDelay), so a hook that writes holds up no other document.
// Its error is logged. Call it before Run.
func (r *Relay) SetPublished(published func(ctx context.Context, id any, entryIDs []string) error) {
	r.published = published
}

// SetRemover makes the relay offer every removal of published entries to
// remove, with the document's _id and the ids of the entries, under the
// document's lock (SetDocumentLock), after SetGone's check: remove writes
// it and reports done (with the write's error), or declines it (done
// false, nothing written), and the relay removes them itself ($pullAll of
// the entries as read). A single writer's store that knows a document
// exactly writes the removal as it writes the document, and keeps knowing
// it. Call it before Run.
func (r *Relay) SetRemover(remove func(ctx context.Context, id any, entryIDs []string) (done bool, err error)) {
	r.remove = remove
}

// afterPublish calls the published hook for document id, if there is one
// and ids is not empty. Like the removal, it runs even when ctx has ended.
// With rm (Run, at a concurrency above 1) it runs in a goroutine of its
// own, which Run waits for before it returns.
func (r *Relay) afterPublish(ctx context.Context, rm *removals, id any, ids []string) {
	if r.published == nil || len(ids) == 0 {
		return
	}
	ids = slices.Clone(ids)
	call := func() {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), relayPublishTimeout)
		defer cancel()
		if err := r.published(pctx, id, ids); err != nil {
			r.logger.Warn("outbox published hook failed", slog.Any("document", id), slog.Any("error", err))
		}
	}
	if rm == nil {
		call()
		return
	}
	rm.wg.Go(call)
}

// afterDrain calls the drained hook for document id, if there is one. It
// runs even when ctx has ended (shutting down), as the removal does.
func (r *Relay) afterDrain(ctx context.Context, id any) {
	if r.drained == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), relayPublishTimeout)
	defer cancel()
	if err := r.drained(dctx, id); err != nil {
		r.logger.Warn("outbox drained hook failed", slog.Any("document", id), slog.Any("error", err))
	}
}

// NewRelay returns a relay for the outbox arrays of coll's documents. logger
// may be nil.
func NewRelay(bus *Bus, coll *mongo.Collection, logger *slog.Logger) *Relay {
	if logger == nil {
		logger = bus.logger
	}
	return &Relay{
		bus:    bus,
		coll:   coll,
		logger: logger.With(slog.String("outbox_collection", coll.Name())),
		wake:   make(chan struct{}, 1),
		lock:   func(id any) func() { return mongox.LockDocument(coll, id) },
		conc:   1,
		poll:   RelayPollInterval,
		known:  map[any][]OutboxEntry{},
		reread: map[any]bool{},
		failed: map[any]bool{},
	}
}

// Notify asks the relay to sweep the whole collection soon. It never blocks;
// calls made while a sweep is pending coalesce into one. Prefer
// NotifyDocument after a write: it relays just that document.
func (r *Relay) Notify() {
	r.mu.Lock()
	r.full = true
	r.mu.Unlock()
	r.poke()
}

// NotifyDocument asks the relay to publish the outbox of the document with
// _id id soon. It never blocks. This is the fast path after each state
// change: the relay reads that one document by _id instead of scanning the
// collection (a scan on FerretDB decodes every document).
func (r *Relay) NotifyDocument(id any) {
	r.mu.Lock()
	r.pending = append(r.pending, id)
	if r.conc > 1 {
		r.reread[id] = true
	}
	r.mu.Unlock()
	r.poke()
}

// NotifyEntries asks the relay to publish entries, just appended to the
// outbox of the document with _id id, soon, after the entries named for
// the document before. It never blocks. With a concurrency above 1 (see
// SetConcurrency) the relay then publishes them as given, without reading
// the document; otherwise it is NotifyDocument.
//
// Only a writer that is the only one to add entries to the document, and
// that calls NotifyEntries after each of its writes in the order of the
// writes (e.g. under the lock that orders them), may use it: the relay
// takes the order of the calls for the order of the entries. Others call
// NotifyDocument.
func (r *Relay) NotifyEntries(id any, entries ...OutboxEntry) {
	r.mu.Lock()
	r.pending = append(r.pending, id)
	if r.conc > 1 {
		r.known[id] = append(r.known[id], entries...)
	}
	r.mu.Unlock()
	r.poke()
}

// takeDocument returns, for a goroutine about to relay document id, the
// entries named for it and whether it must read the document instead.
func (r *Relay) takeDocument(id any) (entries []OutboxEntry, reread bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	entries, reread = r.known[id], r.reread[id]
	delete(r.known, id)
	delete(r.reread, id)
	return entries, reread || len(entries) == 0
}

// failedOn records that relaying document id failed: its next relay
// reads it (entries of it could not be published, and later ones must
// wait for them), and for a single writer the next poll relays it again
// (see SetSingleWriter).
func (r *Relay) failedOn(id any) {
	r.mu.Lock()
	if r.single { // only a single writer's polls take them (retryFailed)
		r.failed[id] = true
	}
	r.reread[id] = true
	r.mu.Unlock()
}

// retryFailed names again, to be read and relayed, the documents whose
// relay failed since the last call.
func (r *Relay) retryFailed() {
	r.mu.Lock()
	for id := range r.failed {
		r.pending = append(r.pending, id)
	}
	clear(r.failed)
	r.mu.Unlock()
}

func (r *Relay) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run sweeps every pending entry at once (recovering whatever an earlier
// process left behind), then relays each document named by NotifyDocument
// as soon as it is named, and sweeps the whole collection again when Notify
// is called and every poll interval (SetPollInterval; RelayPollInterval by
// default), catching entries whose publish failed or that a process died
// before relaying (a single writer's relay reads again just the documents
// whose relay failed; see SetSingleWriter), until ctx is done. Errors are logged and retried on the next sweep. Run returns nil
// once ctx is done and the documents it was relaying are done.
//
// Named documents are relayed in the order named, as many at once as
// SetConcurrency allows, each by one goroutine at a time (a document named
// again meanwhile is relayed again afterwards). With many writers, when
// more are named than the relay's concurrency, a goroutine takes a share of
// the queue (the queue divided by the concurrency, at most 32) and reads
// the documents it must read in one query.
func (r *Relay) Run(ctx context.Context) error {
	t := time.NewTicker(r.poll)
	defer t.Stop()
	rm := newRemovals(r)
	defer rm.wait()
	var (
		inflight = map[any]bool{} // documents being published
		again    = map[any]bool{} // named again while being published
		queued   = map[any]bool{} // the documents in queue
		queue    []any            // named, waiting for a free goroutine
		busy     int              // goroutines relaying
		done     = make(chan []any)
	)
	full := true
	swept := false // the last full sweep read every document (failed ones are retried by name)
	for {
		if full && len(inflight) == 0 {
			// A full sweep covers every document named so far.
			full, queue, again = false, nil, map[any]bool{}
			clear(queued)
			r.mu.Lock()
			clear(r.known) // their documents are read by the sweep
			clear(r.reread)
			clear(r.failed)
			r.mu.Unlock()
			var sweepRM *removals
			if r.conc > 1 {
				sweepRM = rm
			}
			_, read, err := r.sweep(ctx, sweepRM)
			swept = read
			if err != nil && ctx.Err() == nil {
				r.logger.Warn("outbox sweep incomplete; will retry", slog.Any("error", err))
			}
		}
		r.mu.Lock()
		ids := r.pending
		r.pending = nil
		if r.full {
			full, r.full = true, false
		}
		r.mu.Unlock()
		for _, id := range ids {
			switch {
			case inflight[id]:
				again[id] = true
			case !queued[id]:
				queued[id] = true
				queue = append(queue, id)
			}
		}
		for !full && len(queue) > 0 && busy < r.conc {
			// With many writers the queue is shared among the
			// goroutines: one given several documents reads those it
			// must read in one query (publishNamedBatch). A share of the
			// whole concurrency, not of the goroutines free now (they
			// free up one at a time: the first would take it all); a
			// single writer, handed the entries, reads nothing to share.
			n := 1
			if r.conc > 1 && !r.single {
				n = min(relayBatch, (len(queue)+r.conc-1)/r.conc)
			}
			batch := slices.Clone(queue[:n])
			queue = queue[n:]
			for _, id := range batch {
				delete(queued, id)
				inflight[id] = true
			}
			busy++
			go func() {
				r.sweeps.RLock()
				var errs []error
				if r.conc > 1 {
					errs = r.publishNamedBatch(ctx, batch, rm)
				} else {
					_, err := r.relayDocument(ctx, batch[0])
					errs = []error{err}
				}
				r.sweeps.RUnlock()
				for i, id := range batch {
					if errs[i] != nil {
						r.failedOn(id)
						if ctx.Err() == nil {
							r.logger.Warn("outbox relay incomplete; will retry", slog.Any("error", errs[i]))
						}
					}
				}
				done <- batch
			}()
		}
		if full && len(inflight) == 0 {
			continue
		}
		select {
		case <-ctx.Done():
			for range busy {
				<-done
			}
			return nil
		case <-r.wake:
		case batch := <-done:
			busy--
			for _, id := range batch {
				delete(inflight, id)
				if again[id] {
					delete(again, id)
					if !queued[id] {
						queued[id] = true
						queue = append(queue, id)
					}
				}
			}
		case <-t.C:
			if r.single && swept {
				r.retryFailed()
			} else {
				full = true
			}
		}
	}
}

// publishNamedBatch publishes, for each document of ids in turn, the
// entries named for it with NotifyEntries, or, if it was named by
// NotifyDocument (or an earlier publish failed), its outbox as read. The
// documents to read are read in one query ({_id: {$in: ids}}) when there
// are several, except for a single writer (FerretDB reads the whole
// collection for an $in); one missing from that read, or whose _id is
// neither a string nor an ObjectID, is read by itself. errs[i] is the
// error of ids[i].
func (r *Relay) publishNamedBatch(ctx context.Context, ids []any, rm *removals) (errs []error) {
	errs = make([]error, len(ids))
	given := make([][]OutboxEntry, len(ids))
	var reread []any // those read together: ids that key a map as decoded
	for i, id := range ids {
		entries, again := r.takeDocument(id)
		if !again {
			for _, e := range entries {
				if len(e.Trace) > 1 {
					// Its encoding (map order) cannot be rebuilt to remove it.
					again = true
				}
			}
		}
		switch {
		case !again:
			given[i] = entries
		case batchable(id):
			reread = append(reread, id)
		}
	}
	var read map[any]outboxDoc
	if len(reread) > 1 && !r.single {
		var err error
		if read, err = r.readOutboxes(ctx, reread); err != nil {
			for i, id := range ids {
				if given[i] == nil && batchable(id) {
					errs[i] = err
				}
			}
			read = nil
		}
	}
	for i, id := range ids {
		var (
			doc outboxDoc
			ok  bool
		)
		if read != nil && batchable(id) {
			doc, ok = read[id]
		}
		switch {
		case errs[i] != nil:
		case given[i] != nil:
			errs[i] = r.publishGiven(ctx, id, given[i], rm)
		case ok && len(doc.Outbox) == 0:
			r.afterDrain(ctx, id)
		case ok:
			_, errs[i] = r.publishEntries(ctx, doc, rm)
		default:
			errs[i] = r.publishDocument(ctx, id, rm)
		}
	}
	return errs
}

// batchable reports whether document id, read in a batch, is found by its
// _id as decoded (a string or an ObjectID); others are read alone.
func batchable(id any) bool {
	switch id.(type) {
	case string, bson.ObjectID:
		return true
	}
	return false
}

// readOutboxes reads the outboxes of the documents with the given ids in
// one query, by _id.
func (r *Relay) readOutboxes(ctx context.Context, ids []any) (map[any]outboxDoc, error) {
	var docs []outboxDoc
	err := mongox.FindAll(ctx, r.coll, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, &docs,
		options.Find().SetProjection(outboxProjection))
	if err != nil {
		return nil, fmt.Errorf("events: outbox read of %d documents: %w", len(ids), err)
	}
	out := make(map[any]outboxDoc, len(docs))
	for _, d := range docs {
		out[d.ID] = d
	}
	return out, nil
}

// publishGiven publishes, in order, the entries of document id not
// published yet, and hands them to rm for removal.
func (r *Relay) publishGiven(ctx context.Context, id any, entries []OutboxEntry, rm *removals) error {
	raws := make([]bson.Raw, 0, len(entries))
	ids := make([]string, 0, len(entries))
	var pubErr error
	for _, e := range entries {
		// The entry as the write that pushed it encoded it, so that
		// $pullAll matches it exactly.
		raw, err := bson.Marshal(e)
		if err != nil {
			pubErr = fmt.Errorf("events: outbox entry %s of document %v: %w", e.ID, id, err)
			break
		}
		if !rm.published(e.ID) {
			if err := r.publish(ctx, e); err != nil {
				pubErr = fmt.Errorf("events: outbox publish %s to %s (document %v): %w", e.ID, e.Subject, id, err)
				break
			}
		}
		raws = append(raws, raw)
		ids = append(ids, e.ID)
	}
	r.afterPublish(ctx, rm, id, ids)
	rm.add(ctx, id, raws, ids)
	return pubErr
}

// publishDocument reads the document with _id id and publishes its
// outbox with publishEntries.
func (r *Relay) publishDocument(ctx context.Context, id any, rm *removals) error {
	doc, ok, err := r.readOutbox(ctx, id)
	if !ok {
		return err
	}
	_, err = r.publishEntries(ctx, doc, rm)
	return err
}

// readOutbox reads the outbox of the document with _id id. ok is false
// when there is nothing to publish: on an error, when the document is
// gone, or when its outbox is empty (then the drained hook is told).
func (r *Relay) readOutbox(ctx context.Context, id any) (doc outboxDoc, ok bool, err error) {
	opts := options.FindOne().SetProjection(outboxProjection)
	err = r.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, opts).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return doc, false, nil
	}
	if err != nil {
		return doc, false, fmt.Errorf("events: outbox read %v: %w", id, err)
	}
	if len(doc.Outbox) == 0 {
		r.afterDrain(ctx, id)
		return doc, false, nil
	}
	return doc, true, nil
}

// publishEntries publishes, in order, the entries of doc's outbox not
// published yet, and hands them to rm for removal.
func (r *Relay) publishEntries(ctx context.Context, doc outboxDoc, rm *removals) (int, error) {
	var (
		done      []bson.Raw
		doneIDs   []string
		published int
		pubErr    error
	)
	for i, raw := range doc.Outbox {
		var e OutboxEntry
		if err := bson.Unmarshal(raw, &e); err != nil {
			pubErr = fmt.Errorf("events: outbox entry %d of document %v: %w", i, doc.ID, err)
			break
		}
		if !rm.published(e.ID) {
			if err := r.publish(ctx, e); err != nil {
				pubErr = fmt.Errorf("events: outbox publish %s to %s (document %v): %w", e.ID, e.Subject, doc.ID, err)
				break
			}
			published++
		}
		done = append(done, raw)
		doneIDs = append(doneIDs, e.ID)
	}
	r.afterPublish(ctx, rm, doc.ID, doneIDs)
	rm.add(ctx, doc.ID, done, doneIDs)
	return published, pubErr
}

// removals removes the entries Run published from their documents, one
// write per document for everything published from it meanwhile, and
// remembers them until then so they are not published twice.
type removals struct {
	r   *Relay
	sem chan struct{} // bounds the documents being written at once
	wg  sync.WaitGroup

	mu   sync.Mutex
	docs map[any]*docRemoval // guarded by mu: documents with entries to remove
	sent map[string]bool     // guarded by mu: ids of published entries not removed yet
}

// docRemoval is what remains to be removed from one document.
type docRemoval struct {
	raws    bson.A   // the entries, exactly as read
	ids     []string // their ids
	running bool     // a goroutine is removing
}

func newRemovals(r *Relay) *removals {
	return &removals{r: r, sem: make(chan struct{}, r.conc), docs: map[any]*docRemoval{}, sent: map[string]bool{}}
}

// published reports whether the entry with id was published and awaits
// removal.
func (rm *removals) published(id string) bool {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	return rm.sent[id]
}

// add queues published entries of document id for removal.
func (rm *removals) add(ctx context.Context, id any, raws []bson.Raw, ids []string) {
	if len(raws) == 0 {
		return
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	d := rm.docs[id]
	if d == nil {
		d = &docRemoval{}
		rm.docs[id] = d
	}
	for i, raw := range raws {
		if !rm.sent[ids[i]] {
			rm.sent[ids[i]] = true
			d.raws = append(d.raws, raw)
			d.ids = append(d.ids, ids[i])
		}
	}
	if d.running || len(d.raws) == 0 {
		return
	}
	d.running = true
	rm.wg.Go(func() {
		if rm.r.delay > 0 {
			t := time.NewTimer(rm.r.delay)
			select {
			case <-t.C:
			case <-ctx.Done(): // shutting down: remove now
				t.Stop()
			}
		}
		rm.remove(ctx, id)
	})
}

// remove writes the removals of document id until none is left.
func (rm *removals) remove(ctx context.Context, id any) {
	rm.sem <- struct{}{}
	defer func() { <-rm.sem }()
	for {
		rm.mu.Lock()
		d := rm.docs[id]
		raws, ids := d.raws, d.ids
		d.raws, d.ids = nil, nil
		if len(raws) == 0 {
			delete(rm.docs, id)
			rm.mu.Unlock()
			return
		}
		rm.mu.Unlock()
		err := rm.r.removeEntries(ctx, id, raws, ids)
		if err != nil && ctx.Err() == nil {
			rm.r.failedOn(id)
			rm.r.logger.Warn("outbox removal failed; will retry", slog.Any("error", err))
		}
		rm.mu.Lock()
		for _, eid := range ids {
			// Removed, or left for the next sweep (which publishes again,
			// deduplicated, and removes).
			delete(rm.sent, eid)
		}
		drained := err == nil && len(d.raws) == 0
		rm.mu.Unlock()
		if drained {
			rm.r.afterDrain(ctx, id)
		}
	}
}

// wait waits for the removals under way.
func (rm *removals) wait() { rm.wg.Wait() }

// SweepDocuments publishes and removes the outbox entries of the documents
// with the given ids, reading each by _id. It returns how many entries it
// published.
func (r *Relay) SweepDocuments(ctx context.Context, ids ...any) (int, error) {
	r.sweeps.Lock()
	defer r.sweeps.Unlock()
	var (
		published int
		errs      []error
	)
	seen := make(map[any]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		n, err := r.relayDocument(ctx, id)
		published += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return published, errors.Join(errs...)
}

// relayDocument reads the document with _id id and relays its outbox.
func (r *Relay) relayDocument(ctx context.Context, id any) (int, error) {
	doc, ok, err := r.readOutbox(ctx, id)
	if !ok {
		return 0, err
	}
	return r.relayDoc(ctx, doc)
}

// Sweep publishes, in array order, the entries of every document whose
// outbox is not empty, and removes the published entries. It returns how
// many entries it published. A publish failure stops that document's sweep
// (later entries wait so order is kept) and is returned after the other
// documents were swept. Run calls Sweep; call it directly to flush the outbox
// synchronously, e.g. at shutdown.
func (r *Relay) Sweep(ctx context.Context) (int, error) {
	n, _, err := r.sweep(ctx, nil)
	return n, err
}

// sweep is Sweep; with rm, entries are published with publishEntries and
// removed through rm. It reports whether it read every page; a document
// whose relay failed is recorded for the next poll (see failedOn).
func (r *Relay) sweep(ctx context.Context, rm *removals) (int, bool, error) {
	r.sweeps.Lock()
	defer r.sweeps.Unlock()

	var (
		published int
		errs      []error
		lastID    any
	)
	for {
		filter := bson.D{{Key: OutboxField + ".0", Value: bson.D{{Key: "$exists", Value: true}}}}
		if lastID != nil {
			filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$gt", Value: lastID}}})
		}
		opts := options.Find().SetProjection(outboxProjection)
		if !r.single {
			// Pages keep each query short on MongoDB, where the sparse
			// index serves them. A single writer's sweeps run on FerretDB,
			// which parses the whole collection for each query, and only
			// at start: one query reads everything pending.
			opts.SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(relayPageSize)
		}
		var docs []outboxDoc
		if err := mongox.FindAll(ctx, r.coll, filter, &docs, opts); err != nil {
			return published, false, errors.Join(append(errs, fmt.Errorf("events: outbox find: %w", err))...)
		}
		for _, doc := range docs {
			var (
				n   int
				err error
			)
			if rm != nil {
				n, err = r.publishEntries(ctx, doc, rm)
			} else {
				n, err = r.relayDoc(ctx, doc)
			}
			published += n
			if err != nil {
				if ctx.Err() != nil {
					return published, false, errors.Join(append(errs, err)...)
				}
				r.failedOn(doc.ID)
				errs = append(errs, err)
			}
		}
		if r.single || len(docs) < relayPageSize {
			return published, true, errors.Join(errs...)
		}
		lastID = docs[len(docs)-1].ID
	}
}

// outboxProjection reads a document's _id and outbox (outboxDoc).
var outboxProjection = bson.D{{Key: "_id", Value: 1}, {Key: OutboxField, Value: 1}}

// outboxDoc is the projection a sweep reads. Entries stay raw so they can
// be removed by exact match (see relayDoc).
type outboxDoc struct {
	ID     any        `bson:"_id"`
	Outbox []bson.Raw `bson:"outbox"`
}

// relayDoc publishes doc's entries in order and removes the published ones.
//
// FerretDB v1 silently ignores $pull with a condition ({id: {$in: ids}}
// modifies nothing), so entries are removed with $pullAll by exact match,
// using the elements exactly as they were read. That works on FerretDB and
// MongoDB alike, and never removes an entry pushed after the read.
func (r *Relay) relayDoc(ctx context.Context, doc outboxDoc) (int, error) {
	done := make(bson.A, 0, len(doc.Outbox))
	ids := make([]string, 0, len(doc.Outbox))
	var pubErr error
	for i, raw := range doc.Outbox {
		var e OutboxEntry
		if err := bson.Unmarshal(raw, &e); err != nil {
			pubErr = fmt.Errorf("events: outbox entry %d of document %v: %w", i, doc.ID, err)
			break
		}
		if err := r.publish(ctx, e); err != nil {
			pubErr = fmt.Errorf("events: outbox publish %s to %s (document %v): %w", e.ID, e.Subject, doc.ID, err)
			break
		}
		done = append(done, raw)
		ids = append(ids, e.ID)
	}
	r.afterPublish(ctx, nil, doc.ID, ids)
	if len(done) == 0 {
		return 0, pubErr
	}
	if err := r.removeEntries(ctx, doc.ID, done, ids); err != nil {
		return len(done), errors.Join(pubErr, err)
	}
	if pubErr == nil {
		r.afterDrain(ctx, doc.ID)
	}
	return len(done), pubErr
}

// removeEntries removes the entries raws, exactly as read, whose ids are
// entryIDs, from the outbox of document id.
func (r *Relay) removeEntries(ctx context.Context, id any, raws bson.A, entryIDs []string) error {
	// Under the document's lock: a store that is moving the document away
	// holds it, and gone then answers once the move is through.
	if r.lock != nil {
		defer r.lock(id)()
	}
	if r.gone != nil && r.gone(id) {
		return nil // deleted with its entries
	}
	// The removal must happen even if ctx was cancelled mid-sweep, or the
	// entries are published again (harmlessly) by the next process.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), relayPublishTimeout)
	defer cancel()
	if r.remove != nil {
		if done, err := r.remove(pctx, id, entryIDs); done {
			if err != nil {
				return fmt.Errorf("events: outbox remove from document %v: %w", id, err)
			}
			return nil
		}
	}
	update := bson.D{{Key: "$pullAll", Value: bson.D{{Key: OutboxField, Value: raws}}}}
	if _, err := r.coll.UpdateOne(pctx, bson.D{{Key: "_id", Value: id}}, update); err != nil {
		return fmt.Errorf("events: outbox remove from document %v: %w", id, err)
	}
	return nil
}

// publish sends one entry, bounded by relayPublishTimeout.
func (r *Relay) publish(ctx context.Context, e OutboxEntry) error {
	pctx, cancel := context.WithTimeout(ctx, relayPublishTimeout)
	defer cancel()
	if err := r.bus.PublishEntry(pctx, e); err != nil {
		return err
	}
	r.relayed(ctx, e)
	return nil
}

// PublishEntry publishes an outbox entry as it was recorded: its id as
// Nats-Msg-Id (so publishing it again is stored once) and the trace context
// of the write that recorded it. For relays of outboxes other than Relay's.
func (b *Bus) PublishEntry(ctx context.Context, e OutboxEntry) error {
	if e.ID == "" {
		return errors.New("entry has no id")
	}
	h := nats.Header{}
	for k, v := range e.Trace {
		h.Set(k, v)
	}
	h.Set(HeaderMsgID, e.ID)
	h.Set(HeaderContentType, ContentTypeProtobuf)
	_, err := b.publishMsg(ctx, &nats.Msg{Subject: e.Subject, Data: e.Data, Header: h})
	return err
}
