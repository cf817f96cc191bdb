package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// Relay tuning.
const (
	// RelayPollInterval is how often a [Relay] scans its whole collection
	// for entries nobody named with NotifyDocument (failed publishes, or
	// another replica that died before relaying). A scan is expensive on
	// FerretDB, so the fast path is NotifyDocument, not polling.
	RelayPollInterval = 5 * time.Second
	// relayPageSize is how many documents one query of a sweep reads.
	relayPageSize = 100
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
// cost of duplicate publishes that JetStream discards by event id.
type Relay struct {
	bus    *Bus
	coll   *mongo.Collection
	logger *slog.Logger
	wake   chan struct{}                // capacity 1: coalesced Notify calls
	sweeps sync.Mutex                   // serialises sweeps so one relay never races itself
	lock   func(id any) (unlock func()) // set before Run; nil: no lock

	mu      sync.Mutex // guards the fields below
	pending []any      // document ids named by NotifyDocument, in call order
	full    bool       // a full sweep was asked for by Notify
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
	r.mu.Unlock()
	r.poke()
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
// is called and every [RelayPollInterval] (catching entries whose publish
// failed, or written by a process that died before relaying them), until ctx
// is done. Errors are logged and retried on the next sweep. Run returns nil
// once ctx is done.
func (r *Relay) Run(ctx context.Context) error {
	t := time.NewTicker(RelayPollInterval)
	defer t.Stop()
	full := true
	for {
		if full {
			if _, err := r.Sweep(ctx); err != nil && ctx.Err() == nil {
				r.logger.Warn("outbox sweep incomplete; will retry", slog.Any("error", err))
			}
		}
		r.mu.Lock()
		ids := r.pending
		r.pending = nil
		full = r.full
		r.full = false
		r.mu.Unlock()
		if len(ids) > 0 && !full {
			if _, err := r.SweepDocuments(ctx, ids...); err != nil && ctx.Err() == nil {
				r.logger.Warn("outbox relay incomplete; will retry on the next sweep", slog.Any("error", err))
			}
			continue
		}
		if full {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		case <-t.C:
			full = true
		}
	}
}

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
	opts := options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: OutboxField, Value: 1}})
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		var doc outboxDoc
		err := r.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, opts).Decode(&doc)
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("events: outbox read %v: %w", id, err))
			continue
		}
		if len(doc.Outbox) == 0 {
			continue
		}
		n, err := r.relayDoc(ctx, doc)
		published += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return published, errors.Join(errs...)
}

// Sweep publishes, in array order, the entries of every document whose
// outbox is not empty, and removes the published entries. It returns how
// many entries it published. A publish failure stops that document's sweep
// (later entries wait so order is kept) and is returned after the other
// documents were swept. Run calls Sweep; call it directly to flush the outbox
// synchronously, e.g. at shutdown.
func (r *Relay) Sweep(ctx context.Context) (int, error) {
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
		opts := options.Find().
			SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: OutboxField, Value: 1}}).
			SetSort(bson.D{{Key: "_id", Value: 1}}).
			SetLimit(relayPageSize)
		cur, err := r.coll.Find(ctx, filter, opts)
		if err != nil {
			return published, errors.Join(append(errs, fmt.Errorf("events: outbox find: %w", err))...)
		}
		var docs []outboxDoc
		if err := cur.All(ctx, &docs); err != nil {
			return published, errors.Join(append(errs, fmt.Errorf("events: outbox read: %w", err))...)
		}
		for _, doc := range docs {
			n, err := r.relayDoc(ctx, doc)
			published += n
			if err != nil {
				if ctx.Err() != nil {
					return published, errors.Join(append(errs, err)...)
				}
				errs = append(errs, err)
			}
		}
		if len(docs) < relayPageSize {
			return published, errors.Join(errs...)
		}
		lastID = docs[len(docs)-1].ID
	}
}

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
	}
	if len(done) == 0 {
		return 0, pubErr
	}
	update := bson.D{{Key: "$pullAll", Value: bson.D{{Key: OutboxField, Value: done}}}}
	// The removal must happen even if ctx was cancelled mid-sweep, or the
	// entries are published again (harmlessly) by the next process.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), relayPublishTimeout)
	defer cancel()
	if r.lock != nil {
		defer r.lock(doc.ID)()
	}
	if _, err := r.coll.UpdateOne(pctx, bson.D{{Key: "_id", Value: doc.ID}}, update); err != nil {
		return len(done), errors.Join(pubErr, fmt.Errorf("events: outbox remove from document %v: %w", doc.ID, err))
	}
	return len(done), pubErr
}

// publish sends one entry with its id as Nats-Msg-Id.
func (r *Relay) publish(ctx context.Context, e OutboxEntry) error {
	if e.ID == "" {
		return errors.New("entry has no id")
	}
	h := nats.Header{}
	for k, v := range e.Trace {
		h.Set(k, v)
	}
	h.Set(HeaderMsgID, e.ID)
	h.Set(HeaderContentType, ContentTypeProtobuf)
	pctx, cancel := context.WithTimeout(ctx, relayPublishTimeout)
	defer cancel()
	_, err := r.bus.publishMsg(pctx, &nats.Msg{Subject: e.Subject, Data: e.Data, Header: h})
	return err
}
